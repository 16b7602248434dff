package foreign_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/clusters"
	"github.com/openmcp-project/service-provider-kro/config/crd"
	"github.com/openmcp-project/service-provider-kro/controllers/foreign"
	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

// TestAPIServerAcceptsEveryResult is the property test against a real kube-apiserver:
// for hostile and random strings, what each function makes of them is written where the
// provider writes it (a label value and an object's name, a Kro's condition and RGD
// summary, an event), and the API server must accept every write.
func TestAPIServerAcceptsEveryResult(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	kroCRDs, err := crd.ForCluster(clusters.Onboarding)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := testenv.StartClusters(ctx, testenv.ClusterOptions{Name: "foreign", CRDs: kroCRDs})
	if err != nil {
		t.Fatalf("starting an API server: %v", err)
	}
	defer testenv.StopClusters(cs...)
	c := cs[0].Client
	const ns = "foreign"
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	for i, s := range foreign.Hostile(3, 150) {
		// A label value and a name; a namespace is a DNS label.
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
			Name: foreign.Subdomain(fmt.Sprintf("%d-%s", i, s), foreign.SubdomainMax), Namespace: ns,
			Labels: map[string]string{"kro.services.open-control-plane.io/version": foreign.LabelValue(s)},
		}}
		if err := c.Create(ctx, cm); err != nil {
			t.Errorf("string %d %.80q: ConfigMap %q with label %q refused: %v", i, s, cm.Name, cm.Labels, err)
		}
		nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: foreign.DNSLabel(fmt.Sprintf("%d-%s", i, s), foreign.DNSLabelMax)}}
		if err := c.Create(ctx, nsObj); err != nil {
			t.Errorf("string %d %.80q: Namespace %q refused: %v", i, s, nsObj.Name, err)
		}
		// A Kro's status: a condition and an RGD that is not Ready.
		kro := &v1alpha1.Kro{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("kro-%d", i), Namespace: ns}, Spec: v1alpha1.KroSpec{Version: "v0.9.4"}}
		if err := c.Create(ctx, kro); err != nil {
			t.Fatal(err)
		}
		kro.Status.Conditions = []metav1.Condition{{
			Type: v1alpha1.ConditionResourceGraphDefinitionsReady, Status: metav1.ConditionFalse,
			Reason: foreign.Reason(s, foreign.ConditionReasonMax), Message: foreign.Text(s, foreign.ConditionMessageMax), LastTransitionTime: metav1.Now(),
		}}
		kro.Status.ResourceGraphDefinitions = &v1alpha1.ResourceGraphDefinitionSummary{
			ObservedTime: metav1.Now(), Total: 1,
			NotReady: []v1alpha1.ResourceGraphDefinitionState{{Name: foreign.Subdomain(s, foreign.SubdomainMax), Reason: foreign.Reason(s, 128), Message: foreign.Text(s, 512)}},
		}
		if err := c.Status().Update(ctx, kro); err != nil {
			t.Errorf("string %d %.80q: Kro status refused: %v", i, s, err)
		}
		// An event, as the provider's recorder writes it.
		ev := &eventsv1.Event{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("ev-%d", i), Namespace: ns},
			EventTime:  metav1.NewMicroTime(time.Now()), Type: corev1.EventTypeWarning,
			ReportingController: "service-provider-kro", ReportingInstance: "service-provider-kro-0",
			Reason: foreign.Reason(s, foreign.EventReasonMax), Action: foreign.Reason(s, foreign.EventReasonMax), Note: foreign.Text(s, foreign.EventNoteMax),
			Regarding: corev1.ObjectReference{APIVersion: v1alpha1.GroupVersion.String(), Kind: "Kro", Namespace: ns, Name: kro.Name},
		}
		if err := c.Create(ctx, ev); err != nil {
			t.Errorf("string %d %.80q: event refused: %v", i, s, err)
		}
	}
	// The writes above are checked one by one; that they landed is checked here.
	var list corev1.ConfigMapList
	if err := c.List(ctx, &list, client.InNamespace(ns), client.HasLabels{"kro.services.open-control-plane.io/version"}); err != nil {
		t.Fatal(err)
	}
	if want := len(foreign.Hostile(3, 150)); len(list.Items) != want {
		t.Errorf("%d ConfigMaps stored, want %d", len(list.Items), want)
	}
}

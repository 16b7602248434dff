package controllers

import (
	"bufio"
	"bytes"
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/openmcp-project/openmcp-operator/api/constants"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
)

// TestLongBlockedDeletionLooksRarely: a deletion blocked by instances for an hour (its
// DeletionBlocked condition says since when) lists their kind on the ControlPlane at most
// about once a minute, as the API server counts, not every 2 s; the reconcile annotation
// still makes it look at once.
func TestLongBlockedDeletionLooksRarely(t *testing.T) {
	g := withClusters(t)
	ctx := context.Background()
	ns := newNamespace(t, g)
	k := readyKro(t, g, ns, "rarely", baseVersion)
	holdRelease(g, k)
	kind := "Rare" + k.Name
	instance := kroKind(t, g, controlPlane.Client, kind, uniq("gone"))
	instance.SetName("only")
	g.Expect(controlPlane.Client.Create(ctx, instance)).To(Succeed())
	mapping, err := controlPlane.Client.RESTMapper().RESTMapping(instance.GroupVersionKind().GroupKind(), instance.GroupVersionKind().Version)
	g.Expect(err).NotTo(HaveOccurred())
	crdPlural := mapping.Resource.Resource

	deleteKro(g, k)
	eventuallyCondition(g, k, v1alpha1.ConditionDeletionBlocked, metav1.ConditionTrue, v1alpha1.ReasonInstancesPresent, "1 "+kind)
	// Blocked for an hour, as far as the status says.
	g.Eventually(func() error {
		got := getKro(g, k)
		for i := range got.Status.Conditions {
			if got.Status.Conditions[i].Type == v1alpha1.ConditionDeletionBlocked {
				got.Status.Conditions[i].LastTransitionTime = metav1.NewTime(time.Now().Add(-time.Hour).Truncate(time.Second))
			}
		}
		return onboarding.Client.Status().Update(ctx, got)
	}, timeout, interval).Should(Succeed())
	time.Sleep(3 * time.Second) // the look already scheduled, 2 s after the last
	before := listsOf(g, crdPlural)
	time.Sleep(8 * time.Second)
	looks := listsOf(g, crdPlural) - before
	g.Expect(looks).To(BeNumerically("<=", 1), "lists of the instances' kind in 8 s of a deletion blocked for an hour")
	t.Logf("%d lists of %s in 8 s", looks, crdPlural)

	g.Expect(controlPlane.Client.Delete(ctx, instance)).To(Succeed())
	got := getKro(g, k)
	patch := client.MergeFrom(got.DeepCopy())
	got.Annotations = map[string]string{constants.OperationAnnotation: constants.OperationAnnotationValueReconcile}
	g.Expect(onboarding.Client.Patch(ctx, got, patch)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(getHelmRelease(g, k).DeletionTimestamp).NotTo(BeNil())
	}, 10*time.Second, interval).Should(Succeed(), "the reconcile annotation makes the deletion look at once")
	letReleaseGo(g, k)
	eventuallyGone(g, onboarding.Client, k)
}

// listsOf is how many LIST requests of a resource the ControlPlane's API server served.
func listsOf(g Gomega, resource string) int {
	dc, err := discovery.NewDiscoveryClientForConfig(controlPlane.Config)
	g.Expect(err).NotTo(HaveOccurred())
	raw, err := dc.RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	g.Expect(err).NotTo(HaveOccurred())
	n := 0
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "apiserver_request_total{") || !strings.Contains(line, `resource="`+resource+`"`) || !strings.Contains(line, `verb="LIST"`) {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndex(line, " ")+1:], 64)
		g.Expect(err).NotTo(HaveOccurred())
		n += int(v)
	}
	return n
}

package guard

import (
	"strings"
	"testing"

	krov1alpha1 "github.com/kubernetes-sigs/kro/api/v1alpha1"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/openmcp-project/service-provider-kro/controllers/foreign"
)

// TestTrimRGDKeepsTheSummary: an RGD in the cache holds no spec and only its last Ready
// condition, bounded, and summarizes exactly as the whole one; applied twice it gives
// the same.
func TestTrimRGDKeepsTheSummary(t *testing.T) {
	g := NewWithT(t)
	ptr := func(s string) *string { return &s }
	now := metav1.Now()
	rgds := []krov1alpha1.ResourceGraphDefinition{
		{ObjectMeta: metav1.ObjectMeta{Name: "a", Annotations: map[string]string{"x": strings.Repeat("a", 1<<20)}},
			Spec: krov1alpha1.ResourceGraphDefinitionSpec{Resources: []*krov1alpha1.Resource{{ID: "big", Template: runtime.RawExtension{Raw: []byte(`{"data":"` + strings.Repeat("t", 1<<20) + `"}`)}}}},
			Status: krov1alpha1.ResourceGraphDefinitionStatus{State: "Inactive", TopologicalOrder: []string{strings.Repeat("o", 1<<20)}, Conditions: krov1alpha1.Conditions{
				{Type: "GraphAccepted", Status: metav1.ConditionTrue, Message: ptr(strings.Repeat("g", 1<<20))},
				{Type: "Ready", Status: metav1.ConditionTrue},
				{Type: "Ready", Status: metav1.ConditionFalse, Reason: ptr("not ready: " + strings.Repeat("r", 1<<20)), Message: ptr(strings.Repeat("m", 1<<20)), LastTransitionTime: &now},
			}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "b", DeletionTimestamp: &now}, Status: krov1alpha1.ResourceGraphDefinitionStatus{Conditions: krov1alpha1.Conditions{{Type: "Ready", Status: metav1.ConditionTrue}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "c"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "d"}, Status: krov1alpha1.ResourceGraphDefinitionStatus{Conditions: krov1alpha1.Conditions{{Type: "Ready", Status: "Unknown", Reason: ptr("")}}}},
	}
	var cached []krov1alpha1.ResourceGraphDefinition
	for i := range rgds {
		out, err := TrimRGD(rgds[i].DeepCopy())
		g.Expect(err).NotTo(HaveOccurred())
		c := out.(*krov1alpha1.ResourceGraphDefinition)
		g.Expect(c.Spec).To(BeZero())
		g.Expect(c.Annotations).To(BeNil())
		g.Expect(c.Status.TopologicalOrder).To(BeNil())
		g.Expect(len(c.Status.Conditions)).To(BeNumerically("<=", 1))
		g.Expect(c.DeletionTimestamp).To(Equal(rgds[i].DeletionTimestamp))
		again, _ := TrimRGD(c.DeepCopy())
		g.Expect(again).To(Equal(c), "idempotent")
		cached = append(cached, *c)
	}
	g.Expect(len(*cached[0].Status.Conditions[0].Message)).To(Equal(foreign.StatusMessageMax))
	g.Expect(cached[0].Status.Conditions[0].Status).To(Equal(metav1.ConditionFalse), "the last Ready condition")
	g.Expect(SummarizeRGDs(cached)).To(Equal(SummarizeRGDs(rgds)))
}

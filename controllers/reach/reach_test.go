package reach_test

import (
	"fmt"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/reach"
)

// TestWorkloadNamespace: the tenant's namespace on a workload cluster is stable, a valid
// DNS label however long the ControlPlane's names, and different for two tenants that
// share the cluster.
func TestWorkloadNamespace(t *testing.T) {
	g := NewWithT(t)
	a, err := reach.WorkloadNamespace(types.NamespacedName{Namespace: "team-a", Name: "tenant"})
	g.Expect(err).NotTo(HaveOccurred())
	again, err := reach.WorkloadNamespace(types.NamespacedName{Namespace: "team-a", Name: "tenant"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(again).To(Equal(a), "stable")
	g.Expect(a).To(HavePrefix("kro-"))
	b, err := reach.WorkloadNamespace(types.NamespacedName{Namespace: "team-b", Name: "tenant"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(b).NotTo(Equal(a), "two tenants of one workload cluster")
	long, err := reach.WorkloadNamespace(types.NamespacedName{Namespace: strings.Repeat("n", 63), Name: strings.Repeat("c", 63)})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(validation.IsDNS1123Label(long)).To(BeEmpty(), long)
}

// TestNotAvailable: a wrapped NotAvailableError is found, and its reason defaults to
// Reconciling (something is awaited).
func TestNotAvailable(t *testing.T) {
	g := NewWithT(t)
	na, ok := reach.AsNotAvailable(fmt.Errorf("reaching: %w", &reach.NotAvailableError{Message: "no kubeconfig", Missing: true}))
	g.Expect(ok).To(BeTrue())
	g.Expect(na.Missing).To(BeTrue())
	g.Expect(na.ConditionReason()).To(Equal(v1alpha1.ReasonReconciling))
	g.Expect((&reach.NotAvailableError{Reason: v1alpha1.ReasonKubeconfigInvalid}).ConditionReason()).To(Equal(v1alpha1.ReasonKubeconfigInvalid))
	_, ok = reach.AsNotAvailable(fmt.Errorf("other"))
	g.Expect(ok).To(BeFalse())
}

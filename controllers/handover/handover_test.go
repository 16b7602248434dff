package handover

import (
	"testing"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/step"
)

// TestEarlierUninstallsFirst: the earlier release is uninstalled before the provider's
// own is applied for a version on a workload cluster, and while an uninstall of it is
// under way whatever the version; otherwise it is suspended and taken over in place.
func TestEarlierUninstallsFirst(t *testing.T) {
	g := NewWithT(t)
	scope := func(placement v1alpha1.Placement, change func(*helmv2.HelmRelease)) *step.Scope {
		hr := &helmv2.HelmRelease{}
		if change != nil {
			change(hr)
		}
		return &step.Scope{Version: &v1alpha1.KroVersion{Placement: placement}, Earlier: &step.Earlier{Release: hr}}
	}
	deleting := func(hr *helmv2.HelmRelease) { hr.DeletionTimestamp = &metav1.Time{Time: time.Now()} }
	g.Expect(earlierUninstallsFirst(scope(v1alpha1.PlacementControlPlane, nil))).To(BeFalse(), "taken over in place")
	g.Expect(earlierUninstallsFirst(scope(v1alpha1.PlacementWorkloadCluster, nil))).To(BeTrue())
	g.Expect(earlierUninstallsFirst(scope(v1alpha1.PlacementControlPlane, deleting))).To(BeTrue(), "an uninstall under way goes on")
	g.Expect(earlierUninstallsFirst(scope(v1alpha1.PlacementControlPlane, func(hr *helmv2.HelmRelease) {
		deleting(hr)
		hr.Spec.Suspend = true
	}))).To(BeFalse(), "a suspended release being deleted uninstalls nothing: the provider's release takes over")
}

// TestHelmOwned: Helm's annotation or managed-by label marks an object of a Helm release.
func TestHelmOwned(t *testing.T) {
	g := NewWithT(t)
	sa := func(annotations, labels map[string]string) *corev1.ServiceAccount {
		return &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Annotations: annotations, Labels: labels}}
	}
	g.Expect(helmOwned(sa(nil, nil))).To(BeFalse())
	g.Expect(helmOwned(sa(map[string]string{HelmReleaseNameAnnotation: "kro"}, nil))).To(BeTrue())
	g.Expect(helmOwned(sa(nil, map[string]string{HelmManagedByLabel: "Helm"}))).To(BeTrue())
	g.Expect(helmOwned(sa(nil, map[string]string{HelmManagedByLabel: "service-provider-kro"}))).To(BeFalse())
}

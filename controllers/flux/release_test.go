package flux_test

import (
	"testing"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/flux"
	"github.com/openmcp-project/service-provider-kro/controllers/step"
)

// TestReleaseFailReason: a HelmRelease that fails because helm-controller cannot get its
// chart says so with SourceNotReady; any other failure is ReleaseFailed.
func TestReleaseFailReason(t *testing.T) {
	g := NewWithT(t)
	hr := func(reason string) *helmv2.HelmRelease {
		h := &helmv2.HelmRelease{}
		h.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: reason}}
		return h
	}
	g.Expect(flux.ReleaseFailReason(hr("SourceNotReady"))).To(Equal(v1alpha1.ReasonSourceNotReady))
	g.Expect(flux.ReleaseFailReason(hr(helmv2.ArtifactFailedReason))).To(Equal(v1alpha1.ReasonSourceNotReady))
	g.Expect(flux.ReleaseFailReason(hr(helmv2.InstallFailedReason))).To(Equal(v1alpha1.ReasonReleaseFailed))
	g.Expect(flux.ReleaseFailReason(&helmv2.HelmRelease{})).To(Equal(v1alpha1.ReasonReleaseFailed))

	var obs step.Observation
	flux.InstalledCondition(&obs, "HelmRelease x", "0.9.4", "", metav1.ConditionFalse, "OCIRepository 'x' is not ready", v1alpha1.ReasonSourceNotReady)
	c := step.FindCondition(obs.Conditions, v1alpha1.ConditionHelmReleaseReady)
	g.Expect(c.Reason).To(Equal(v1alpha1.ReasonSourceNotReady))
	g.Expect(c.Message).To(ContainSubstring("OCIRepository 'x' is not ready"))
}

package controllers

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
)

// Tests of drift on the platform cluster (issue 40): the Kro's Flux objects carry exactly
// what the provider applies, whoever else writes to them, and a suspend set by a platform
// team stays and is reported.

// patchAs writes a merge patch to obj on the platform cluster as another field manager.
func patchAs(g Gomega, manager string, obj client.Object, patch string) {
	g.Expect(platform.Client.Patch(context.Background(), obj, client.RawPatch("application/merge-patch+json", []byte(patch)),
		client.FieldOwner(manager))).To(Succeed())
}

// TestForeignValuesLeaveTheHelmRelease: a value that a second field manager adds to a
// Ready Kro's HelmRelease is taken out by the provider, so helm-controller never installs
// it; helm-controller's finalizer and status stay, and once the HelmRelease is back as
// the provider made it nothing more is written.
func TestForeignValuesLeaveTheHelmRelease(t *testing.T) {
	g := withClusters(t)
	k := readyKro(t, g, newNamespace(t, g), "foreign-values", baseVersion)
	hr := getHelmRelease(g, k)
	g.Expect(hr.Spec.Values).To(BeNil(), "the version has no values")
	patchAs(g, "helm-controller", hr, `{"metadata":{"finalizers":["finalizers.fluxcd.io"]}}`)

	patchAs(g, "kubectl-patch", hr, `{"metadata":{"labels":{"team":"theirs"}},"spec":{"values":{"replicaCount":3}}}`)
	g.Eventually(func(g Gomega) {
		hr := getHelmRelease(g, k)
		g.Expect(hr.Spec.Values).To(BeNil())
		g.Expect(hr.Labels).NotTo(HaveKey("team"))
	}, timeout, interval).Should(Succeed())
	hr = getHelmRelease(g, k)
	g.Expect(hr.Finalizers).To(ConsistOf("finalizers.fluxcd.io"))
	g.Expect(hr.Status.Conditions).NotTo(BeEmpty())

	rv := hr.ResourceVersion
	g.Consistently(func(g Gomega) { g.Expect(getHelmRelease(g, k).ResourceVersion).To(Equal(rv)) }, 2*time.Second, 200*time.Millisecond).Should(Succeed())
	// The provider vouches for the repaired spec only once Flux has reconciled it.
	fluxReady(g, hr, metav1.ConditionTrue, "Helm upgrade succeeded")
	eventuallyCondition(g, k, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReconcileSuccess)
	g.Expect(getHelmRelease(g, k).Finalizers).To(ConsistOf("finalizers.fluxcd.io"))
}

// TestHandSuspendedReleaseIsReported: a HelmRelease that a platform team suspends stays
// suspended; the Kro says so in HelmReleaseReady and Ready, naming who suspended it and
// how to resume it, with a Warning event; once it is resumed, the Kro is Ready again.
func TestHandSuspendedReleaseIsReported(t *testing.T) {
	g := withClusters(t)
	k := readyKro(t, g, newNamespace(t, g), "hand-suspend", baseVersion)
	hr := getHelmRelease(g, k)

	patchAs(g, "flux", hr, `{"spec":{"suspend":true}}`)
	resume := "flux resume helmrelease -n " + hr.Namespace + " " + hr.Name
	eventuallyCondition(g, k, v1alpha1.ConditionHelmReleaseReady, metav1.ConditionFalse, v1alpha1.ReasonSuspended,
		"HelmRelease "+hr.Namespace+"/"+hr.Name+" is suspended", `field manager "flux"`, resume)
	got := eventuallyCondition(g, k, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonSuspended, resume)
	g.Expect(got.Status.Phase).To(Equal(v1alpha1.PhaseProgressing))
	eventuallyEvent(g, k, "Warning/"+v1alpha1.ReasonSuspended+": ", "HelmReleaseReady: HelmRelease", resume)
	g.Expect(getHelmRelease(g, k).Spec.Suspend).To(BeTrue(), "the provider leaves the suspend in place")

	patchAs(g, "flux", hr, `{"spec":{"suspend":false}}`)
	eventuallyCondition(g, k, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReconcileSuccess)
}

// TestHandSuspendedSourceIsReported: the same for the OCIRepository.
func TestHandSuspendedSourceIsReported(t *testing.T) {
	g := withClusters(t)
	k := readyKro(t, g, newNamespace(t, g), "source-suspend", baseVersion)
	repo := getOCIRepository(g, k)

	patchAs(g, "flux", repo, `{"spec":{"suspend":true}}`)
	eventuallyCondition(g, k, v1alpha1.ConditionOCIRepositoryReady, metav1.ConditionFalse, v1alpha1.ReasonSuspended,
		"OCIRepository "+repo.Namespace+"/"+repo.Name+" is suspended", "flux resume source oci -n "+repo.Namespace+" "+repo.Name)
	g.Expect(getOCIRepository(g, k).Spec.Suspend).To(BeTrue())
}

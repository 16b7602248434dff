//go:build e2e

package e2e

import (
	"strings"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/test/e2e/env"
	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

// Flux and the chart registry failing in the fault suite: helm-controller stopped during
// an upgrade, source-controller and the registry down during an install; and how the
// fault rows describe the state of Flux's objects.

// fluxDownSpecs are the faults of Flux's controllers and the chart registry, on the
// ControlPlane cpA returns.
func fluxDownSpecs(cpA func() *env.ControlPlane) {
	It("helm-controller stopped during an upgrade", func() {
		a := cpA()
		row := startRow("helm-controller stopped during an upgrade v0.9.3 → v0.9.4, then started",
			"while it is down status.chartVersion stays 0.9.3, Ready is not True and the Kro says UpgradeInProgress; then Ready at 0.9.4")
		cleanUpAfterFailure(a)
		installReady(a, "v0.9.3")
		Expect(fe.StopFluxController(testenv.HelmController.Name)).To(Succeed())
		DeferCleanup(func() { Expect(fe.StartFluxController(suiteCtx, testenv.HelmController.Name)).To(Succeed()) })
		patched := time.Now()
		patchKroOf(a, `{"spec":{"version":"v0.9.4"}}`)
		var reported metav1.Condition
		waitUntil(time.Minute, poll, func(g Gomega) {
			kro := getKroOf(g, a)
			g.Expect(kro.Status.ObservedGeneration).To(Equal(kro.Generation), describeKro(kro))
			reported = condition(kro, v1alpha1.ConditionHelmReleaseReady)
			g.Expect(reported.Reason).To(Equal(v1alpha1.ReasonUpgradeInProgress), describeKro(kro))
			g.Expect(kro.Status.Phase).To(Equal(v1alpha1.PhaseProgressing), describeKro(kro))
		})
		row.note("reported %s after spec.version changed: HelmReleaseReady=%s %s %q", ms(time.Since(patched)), reported.Status, reported.Reason, reported.Message)
		By("the status does not claim the new version while helm-controller is down")
		Consistently(func(g Gomega) {
			kro := getKroOf(g, a)
			g.Expect(kro.Status.ChartVersion).To(Equal("0.9.3"), describeKro(kro))
			g.Expect(condition(kro, v1alpha1.ConditionReady).Status).NotTo(Equal(metav1.ConditionTrue), describeKro(kro))
			g.Expect(kro.Status.Phase).To(Equal(v1alpha1.PhaseProgressing), describeKro(kro))
		}).WithContext(suiteCtx).WithTimeout(8 * time.Second).WithPolling(poll).Should(Succeed())
		kro := getKroOf(Default, a)
		row.note("for 8 s: status.chartVersion %s, Ready=%s (%s), phase %s", kro.Status.ChartVersion,
			condition(kro, v1alpha1.ConditionReady).Status, condition(kro, v1alpha1.ConditionReady).Reason, kro.Status.Phase)
		Expect(fe.StartFluxController(suiteCtx, testenv.HelmController.Name)).To(Succeed())
		restarted := time.Now()
		waitUntil(3*time.Minute, poll, func(g Gomega) { expectKroReady(g, a, "0.9.4") })
		row.note("Ready at 0.9.4 once helm-controller was back")
		row.converged(time.Since(restarted), "after helm-controller started", 0, "")
		deleteAndCheck(row, a)
	})

	It("source-controller down during an install", func() {
		a := cpA()
		row := startRow("source-controller down during an install, then started",
			"the Kro waits for the OCIRepository (source-controller says nothing while it is down, helm-controller's words show in HelmReleaseReady); Ready once it is back")
		cleanUpAfterFailure(a)
		Expect(fe.StopFluxController(testenv.SourceController.Name)).To(Succeed())
		DeferCleanup(func() { Expect(fe.StartFluxController(suiteCtx, testenv.SourceController.Name)).To(Succeed()) })
		created := createKro(a, "v0.9.3")
		var repo metav1.Condition
		waitUntil(time.Minute, poll, func(g Gomega) {
			kro := getKroOf(g, a)
			g.Expect(kro.Status.ObservedGeneration).To(Equal(kro.Generation), describeKro(kro))
			repo = condition(kro, v1alpha1.ConditionOCIRepositoryReady)
			g.Expect(repo.Status).NotTo(Equal(metav1.ConditionTrue), describeKro(kro))
			g.Expect(repo.Message).NotTo(BeEmpty(), describeKro(kro))
		})
		Consistently(func(g Gomega) {
			kro := getKroOf(g, a)
			g.Expect(condition(kro, v1alpha1.ConditionReady).Status).NotTo(Equal(metav1.ConditionTrue), describeKro(kro))
		}).WithContext(suiteCtx).WithTimeout(5 * time.Second).WithPolling(poll).Should(Succeed())
		hr := condition(getKroOf(Default, a), v1alpha1.ConditionHelmReleaseReady)
		row.note("while it was down: OCIRepositoryReady=%s %s %q; HelmReleaseReady=%s %s %q", repo.Status, repo.Reason, repo.Message, hr.Status, hr.Reason, hr.Message)
		Expect(fe.StartFluxController(suiteCtx, testenv.SourceController.Name)).To(Succeed())
		restarted := time.Now()
		waitUntil(3*time.Minute, poll, func(g Gomega) { expectKroReady(g, a, "0.9.3") })
		row.note("Ready at 0.9.3 once it was back")
		row.converged(time.Since(restarted), "after source-controller started", time.Since(created), "after the Kro was created")
		deleteAndCheck(row, a)
	})

	It("registry down during an install", func() {
		a := cpA()
		row := startRow("The chart registry down during an install, then started",
			"OCIRepositoryReady=False with source-controller's message; Ready once the registry is back")
		cleanUpAfterFailure(a)
		Expect(fe.StopRegistry()).To(Succeed())
		DeferCleanup(func() { Expect(fe.StartRegistry(suiteCtx)).To(Succeed()) })
		created := createKro(a, "v0.9.3")
		var reported metav1.Condition
		waitUntil(2*time.Minute, poll, func(g Gomega) {
			kro := getKroOf(g, a)
			reported = condition(kro, v1alpha1.ConditionOCIRepositoryReady)
			g.Expect(reported.Status).To(Equal(metav1.ConditionFalse), describeKro(kro))
			repo := &sourcev1.OCIRepository{}
			g.Expect(fe.Platform.Client.Get(suiteCtx, fluxKeyOf(a), repo)).To(Succeed())
			flux := fluxReady(repo.Status.Conditions)
			g.Expect(flux.Status).To(Equal(metav1.ConditionFalse), "%v", repo.Status.Conditions)
			g.Expect(reported.Message).To(ContainSubstring(flux.Message), "the Kro does not carry Flux's words")
		})
		row.note("reported %s after the Kro was created, in Flux's words: OCIRepositoryReady=%s %s %q",
			ms(time.Since(created)), reported.Status, reported.Reason, reported.Message)
		Expect(fe.StartRegistry(suiteCtx)).To(Succeed())
		restarted := time.Now()
		waitUntil(3*time.Minute, poll, func(g Gomega) { expectKroReady(g, a, "0.9.3") })
		row.note("Ready at 0.9.3 once the registry was back")
		row.converged(time.Since(restarted), "after the registry started", time.Since(created), "after the Kro was created")
		deleteAndCheck(row, a)
	})
}

// fluxState describes the Flux objects of cp's Kro, for a row.
func fluxState(cp *env.ControlPlane) string {
	var parts []string
	repo := &sourcev1.OCIRepository{}
	switch err := fe.Platform.Client.Get(suiteCtx, fluxKeyOf(cp), repo); {
	case apierrors.IsNotFound(err):
		parts = append(parts, "no OCIRepository")
	case err != nil:
		parts = append(parts, "OCIRepository unknown: "+err.Error())
	default:
		parts = append(parts, "OCIRepository "+fluxStatus(repo.Status.Conditions))
	}
	hr := &helmv2.HelmRelease{}
	switch err := fe.Platform.Client.Get(suiteCtx, fluxKeyOf(cp), hr); {
	case apierrors.IsNotFound(err):
		parts = append(parts, "no HelmRelease")
	case err != nil:
		parts = append(parts, "HelmRelease unknown: "+err.Error())
	default:
		s := "HelmRelease " + fluxStatus(hr.Status.Conditions)
		if l := hr.Status.History.Latest(); l != nil {
			s += " with chart " + strings.SplitN(l.ChartVersion, "+", 2)[0]
		}
		if hr.DeletionTimestamp != nil {
			s += ", being deleted"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ", ")
}

// fluxStatus is a Flux object's readiness in a few words.
func fluxStatus(conds []metav1.Condition) string {
	c := fluxReady(conds)
	if c.Status == "absent" {
		return "without status yet"
	}
	return "Ready=" + string(c.Status)
}

//go:build e2e

package e2e

import (
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/test/e2e/env"
)

// The provider SIGKILLed in the fault suite: during an install, an upgrade and a
// deletion, each time restarted with the same arguments.

// providerKilledSpecs are the faults that kill the provider while the Kro of the
// ControlPlane cpA returns is installed, upgraded or deleted.
func providerKilledSpecs(cpA func() *env.ControlPlane) {
	It("provider killed during an install", func() {
		a := cpA()
		row := startRow("Provider SIGKILLed during an install (v0.9.3), restarted with the same arguments",
			"Ready with status.chartVersion 0.9.3; nothing orphaned after the deletion")
		cleanUpAfterFailure(a)
		created := createKro(a, "v0.9.3")
		waitUntil(time.Minute, 50*time.Millisecond, func(g Gomega) {
			g.Expect(fe.Platform.Client.Get(suiteCtx, fluxKeyOf(a), &sourcev1.OCIRepository{})).To(Succeed())
		})
		killProvider(row, created, "the Kro was created", a)
		Expect(fe.RestartProvider(suiteCtx)).To(Succeed())
		restarted := time.Now()
		waitUntil(3*time.Minute, poll, func(g Gomega) { expectKroReady(g, a, "0.9.3") })
		row.note("Ready at 0.9.3 again; %s", fluxState(a))
		row.converged(time.Since(restarted), "after the restart", time.Since(created), "after the Kro was created")
		deleteAndCheck(row, a)
	})

	It("provider killed during an upgrade", func() {
		a := cpA()
		row := startRow("Provider SIGKILLed during an upgrade v0.9.3 → v0.9.4, restarted",
			"Ready with status.chartVersion 0.9.4; nothing orphaned after the deletion")
		cleanUpAfterFailure(a)
		installReady(a, "v0.9.3")
		patched := time.Now()
		patchKroOf(a, `{"spec":{"version":"v0.9.4"}}`)
		waitUntil(time.Minute, 50*time.Millisecond, func(g Gomega) {
			repo := &sourcev1.OCIRepository{}
			g.Expect(fe.Platform.Client.Get(suiteCtx, fluxKeyOf(a), repo)).To(Succeed())
			g.Expect(repo.Spec.Reference).NotTo(BeNil())
			g.Expect(repo.Spec.Reference.Tag).To(Equal("0.9.4"))
		})
		killProvider(row, patched, "spec.version changed, once the OCIRepository asked for 0.9.4", a)
		Expect(fe.RestartProvider(suiteCtx)).To(Succeed())
		restarted := time.Now()
		waitUntil(3*time.Minute, poll, func(g Gomega) { expectKroReady(g, a, "0.9.4") })
		row.note("Ready at 0.9.4; %s", fluxState(a))
		row.converged(time.Since(restarted), "after the restart", time.Since(patched), "after spec.version changed")
		deleteAndCheck(row, a)
	})

	It("provider killed during a deletion", func() {
		a := cpA()
		row := startRow("Provider SIGKILLed during a deletion (Flux uninstalling kro), restarted",
			"the Kro exists as long as kro's Helm release does; after the restart the Kro is gone and nothing is orphaned")
		cleanUpAfterFailure(a)
		installReady(a, "v0.9.4")
		guard := guardFinalizer(a)
		deleted := time.Now()
		Expect(fe.Onboarding.Client.Delete(suiteCtx, kroOf(a))).To(Succeed())
		waitUntil(time.Minute, 50*time.Millisecond, func(g Gomega) {
			hr := &helmv2.HelmRelease{}
			g.Expect(fe.Platform.Client.Get(suiteCtx, fluxKeyOf(a), hr)).To(Succeed())
			g.Expect(hr.DeletionTimestamp).NotTo(BeNil())
		})
		killProvider(row, deleted, "the deletion began", a)
		By("Flux uninstalls kro while the provider is dead; the Kro keeps its finalizer")
		waitUntil(2*time.Minute, poll, func(g Gomega) { g.Expect(helmReleaseSecrets(g, a)).To(BeEmpty()) })
		kro := getKroOf(Default, a)
		Expect(kro.Finalizers).To(ContainElement(v1alpha1.Finalizer))
		row.note("Flux finished the uninstall meanwhile; the Kro kept its finalizer")
		Expect(fe.RestartProvider(suiteCtx)).To(Succeed())
		restarted := time.Now()
		waitGone(2*time.Minute, a)
		row.converged(time.Since(restarted), "after the restart", time.Since(deleted), "after the deletion began")
		row.finalizerGuard(guard())
		checkLeftovers(row, true, a)
	})
}

// killProvider SIGKILLs the provider, as a crash or an OOM kill would, and notes in the
// row how long after since (what happened then) it died and where Flux stood. A
// failure before the restart still gets the provider restarted for the next fault.
func killProvider(row *faultRow, since time.Time, what string, cp *env.ControlPlane) {
	GinkgoHelper()
	killed := time.Now()
	Expect(fe.KillProvider()).To(Succeed())
	DeferCleanup(restartProviderIfDead)
	row.note("killed %s after %s (%s)", ms(killed.Sub(since)), what, fluxState(cp))
}

// restartProviderIfDead restarts a provider that a failed spec left killed.
func restartProviderIfDead() {
	if fe.Provider.ExitError() != nil {
		Expect(fe.RestartProvider(suiteCtx)).To(Succeed())
	}
}

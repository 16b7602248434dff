//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers"
	"github.com/openmcp-project/service-provider-kro/test/e2e/env"
	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

// The fault suite: the provider in the end-to-end environment, one fault at a time while
// Kros are installed, upgraded or deleted. Each spec records a row of docs/reliability.md
// (see faults_report_test.go): whether the Kros converged, how long that took, and what
// was left once they were gone (env.CheckLeftovers). It has an environment of its own,
// with the standalone grace period shortened to accessGracePeriod.

const (
	// accessGracePeriod is the provider's --access-grace-period in the faults environment.
	accessGracePeriod = 20 * time.Second
	// platformOutage is how long the platform's API server stays down.
	platformOutage = 5 * time.Second
	// kubeconfigGap is how long a kubeconfig secret replaced by delete-and-recreate is
	// missing at least (the provider must have seen it missing first).
	kubeconfigGap = 2 * time.Second
	// poll is how often the fault specs look, fine enough for the times they report.
	poll = 200 * time.Millisecond
)

// loadKros is the number of Kros installed at once while the platform's API server
// restarts (FAULTS_KROS overrides it): the two ControlPlanes of the faults environment
// plus ControlPlanes added for that spec and removed after it.
var loadKros = max(envInt("FAULTS_KROS", 20), 2)

var fe *env.Env // the faults environment

// ContinueOnFailure: every fault gets its row, also when an earlier one failed; each spec
// starts from no Kro on its ControlPlane, and ends there unless it failed.
var _ = Describe("faults", Ordered, ContinueOnFailure, Label("faults"), func() {
	var a, b *env.ControlPlane // a serves most faults; b is given up for good at the end

	BeforeAll(func() {
		backend, err := env.BackendFromEnvironment()
		Expect(err).NotTo(HaveOccurred())
		if backend != env.BackendProcess {
			Skip("the fault suite stops and starts API servers, which only the process backend can")
		}
		report.started = time.Now()
		report.load.start()
		fe, err = env.Start(suiteCtx, env.Options{
			Dir: filepath.Join(logDir, "faults"), Log: GinkgoWriter, Backend: backend,
			ControlPlanes: []env.ControlPlaneRef{{Name: "fault-a", Namespace: "faults-a"}, {Name: "fault-b", Namespace: "faults-b"}},
			ProviderArgs:  []string{"--access-grace-period=" + accessGracePeriod.String()},
		})
		DeferCleanup(func() {
			start := time.Now()
			if err := fe.Stop(); err != nil {
				fmt.Fprintf(GinkgoWriter, "stopping the faults environment: %v\n", err)
			}
			report.teardown = time.Since(start)
			report.finished = time.Now()
			report.load.end()
		})
		Expect(err).NotTo(HaveOccurred())
		report.bringUp = time.Since(report.started)
		timings = append(timings, timing{"faults: bring-up", report.bringUp})
		a, b = fe.ControlPlane("fault-a"), fe.ControlPlane("fault-b")
		for _, ns := range []string{a.Namespace, b.Namespace, loadNamespace} {
			Expect(fe.Onboarding.Client.Create(suiteCtx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
		}
	})

	It("provider killed during an install", func() {
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

	It("helm-controller stopped during an upgrade", func() {
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

	It("ControlPlane API server down during an install", func() {
		row := startRow("The ControlPlane's API server down during an install, then started",
			"the Kro says the ControlPlane does not answer; Ready once it is back")
		cleanUpAfterFailure(a)
		created := createKro(a, "v0.9.3")
		waitUntil(time.Minute, 50*time.Millisecond, func(g Gomega) {
			g.Expect(fe.Platform.Client.Get(suiteCtx, fluxKeyOf(a), &helmv2.HelmRelease{})).To(Succeed())
		})
		Expect(fe.StopControlPlaneAPIServer(a)).To(Succeed())
		DeferCleanup(func() { Expect(fe.StartControlPlaneAPIServer(suiteCtx, a)).To(Succeed()) })
		stopped := time.Now()
		row.note("stopped %s after the Kro was created (%s)", ms(stopped.Sub(created)), fluxState(a))
		var access metav1.Condition
		waitUntil(2*time.Minute, poll, func(g Gomega) {
			kro := getKroOf(g, a)
			access = condition(kro, v1alpha1.ConditionControlPlaneAccessReady)
			g.Expect(access.Status).To(Equal(metav1.ConditionFalse), describeKro(kro))
			g.Expect(condition(kro, v1alpha1.ConditionReady).Status).NotTo(Equal(metav1.ConditionTrue), describeKro(kro))
		})
		hr := condition(getKroOf(Default, a), v1alpha1.ConditionHelmReleaseReady)
		row.note("reported %s after it went down: ControlPlaneAccessReady=%s %s %q; HelmReleaseReady=%s %s",
			ms(time.Since(stopped)), access.Status, access.Reason, access.Message, hr.Status, hr.Reason)
		Expect(fe.StartControlPlaneAPIServer(suiteCtx, a)).To(Succeed())
		restarted := time.Now()
		row.note("down for %s", ms(restarted.Sub(stopped)))
		waitUntil(5*time.Minute, poll, func(g Gomega) { expectKroReady(g, a, "0.9.3") })
		row.note("Ready at 0.9.3 once it was back")
		row.converged(time.Since(restarted), "after the API server started", time.Since(created), "after the Kro was created")
		deleteAndCheck(row, a)
	})

	It("ControlPlane API server down during a deletion", func() {
		row := startRow(fmt.Sprintf("The ControlPlane's API server down during a deletion for longer than the grace period (%s), kubeconfig kept, then started", accessGracePeriod),
			"the deletion waits (DeletionBlocked=True, HelmRelease kept, no ControlPlaneGone); once it is back kro is uninstalled and nothing is orphaned")
		cleanUpAfterFailure(a)
		installReady(a, "v0.9.4")
		uid := getKroOf(Default, a).UID
		Expect(fe.StopControlPlaneAPIServer(a)).To(Succeed())
		DeferCleanup(func() { Expect(fe.StartControlPlaneAPIServer(suiteCtx, a)).To(Succeed()) })
		stopped := time.Now()
		waitUntil(time.Minute, poll, func(g Gomega) {
			kro := getKroOf(g, a)
			g.Expect(condition(kro, v1alpha1.ConditionControlPlaneAccessReady).Status).To(Equal(metav1.ConditionFalse), describeKro(kro))
		})
		row.note("the provider saw it down after %s", ms(time.Since(stopped)))
		guard := guardFinalizer(a)
		Expect(fe.Onboarding.Client.Delete(suiteCtx, kroOf(a))).To(Succeed())
		var blocked metav1.Condition
		waitUntil(time.Minute, poll, func(g Gomega) {
			kro := getKroOf(g, a)
			blocked = condition(kro, v1alpha1.ConditionDeletionBlocked)
			g.Expect(kro.Status.Phase).To(Equal(v1alpha1.PhaseTerminating), describeKro(kro))
			g.Expect(blocked.Status).To(Equal(metav1.ConditionTrue), describeKro(kro))
		})
		row.note("DeletionBlocked=True %s %q", blocked.Reason, blocked.Message)
		By("an unreachable ControlPlane whose kubeconfig is there is not gone: the deletion waits past the grace period")
		hold := accessGracePeriod + 5*time.Second
		Consistently(func(g Gomega) {
			kro := getKroOf(g, a)
			g.Expect(condition(kro, v1alpha1.ConditionDeletionBlocked).Status).To(Equal(metav1.ConditionTrue), describeKro(kro))
			hr := &helmv2.HelmRelease{}
			g.Expect(fe.Platform.Client.Get(suiteCtx, fluxKeyOf(a), hr)).To(Succeed())
			g.Expect(hr.Spec.Suspend).To(BeFalse(), "the HelmRelease was suspended")
			g.Expect(hr.DeletionTimestamp).To(BeNil(), "the HelmRelease is being deleted")
		}).WithContext(suiteCtx).WithTimeout(hold).WithPolling(poll).Should(Succeed())
		Expect(controlPlaneGoneEvents(a, uid)).To(BeEmpty())
		row.note("still blocked %s later, HelmRelease kept and not suspended, no ControlPlaneGone event", ms(hold))
		Expect(fe.StartControlPlaneAPIServer(suiteCtx, a)).To(Succeed())
		restarted := time.Now()
		row.note("down for %s", ms(restarted.Sub(stopped)))
		waitGone(5*time.Minute, a)
		row.converged(time.Since(restarted), "after the API server started", 0, "")
		row.finalizerGuard(guard())
		Expect(controlPlaneGoneEvents(a, uid)).To(BeEmpty())
		checkLeftovers(row, true, a)
	})

	It("kubeconfig deleted and recreated while a deletion is blocked", func() {
		row := startRow("The ControlPlane's kubeconfig secret deleted and created again (same content) while the deletion waits for an RGD",
			"DeletionBlocked goes to ControlPlaneAccessMissing and back; after the RGD is deleted kro is uninstalled (Helm release gone), no ControlPlaneGone, nothing orphaned")
		cleanUpAfterFailure(a)
		installReady(a, "v0.9.4")
		uid := getKroOf(Default, a).UID
		rgd := testenv.ConfigMapRGD("faults-hold", "FaultsHold")
		Expect(a.Client.Create(suiteCtx, rgd)).To(Succeed())
		guard := guardFinalizer(a)
		Expect(fe.Onboarding.Client.Delete(suiteCtx, kroOf(a))).To(Succeed())
		waitUntil(time.Minute, poll, func(g Gomega) {
			expectBlocked(g, a, v1alpha1.ReasonUserResourcesPresent, "faults-hold")
		})
		missing, back := replaceKubeconfig(a)
		row.note("secret missing for %s; meanwhile DeletionBlocked=True %s %q", ms(back.Sub(missing.at)), missing.cond.Reason, missing.cond.Message)
		waitUntil(time.Minute, poll, func(g Gomega) {
			expectBlocked(g, a, v1alpha1.ReasonUserResourcesPresent, "faults-hold")
		})
		row.note("back to %s %s after it was created again", v1alpha1.ReasonUserResourcesPresent, ms(time.Since(back)))
		Expect(a.Client.Delete(suiteCtx, rgd)).To(Succeed())
		rgdDeleted := time.Now()
		waitGone(2*time.Minute, a)
		row.converged(time.Since(rgdDeleted), "after the RGD was deleted", 0, "")
		row.finalizerGuard(guard())
		Expect(controlPlaneGoneEvents(a, uid)).To(BeEmpty(), "kro was dropped instead of uninstalled")
		row.note("uninstalled, no ControlPlaneGone event")
		checkLeftovers(row, true, a)
	})

	It("kubeconfig deleted and recreated while Flux uninstalls", func() {
		row := startRow("The ControlPlane's kubeconfig secret deleted and created again (same content) while Flux uninstalls kro (helm-controller held back)",
			"the HelmRelease is not suspended and kro is uninstalled once helm-controller runs (Helm release gone), no ControlPlaneGone, nothing orphaned")
		cleanUpAfterFailure(a)
		installReady(a, "v0.9.4")
		uid := getKroOf(Default, a).UID
		Expect(fe.StopFluxController(testenv.HelmController.Name)).To(Succeed())
		DeferCleanup(func() { Expect(fe.StartFluxController(suiteCtx, testenv.HelmController.Name)).To(Succeed()) })
		guard := guardFinalizer(a)
		Expect(fe.Onboarding.Client.Delete(suiteCtx, kroOf(a))).To(Succeed())
		waitUntil(time.Minute, poll, func(g Gomega) {
			hr := &helmv2.HelmRelease{}
			g.Expect(fe.Platform.Client.Get(suiteCtx, fluxKeyOf(a), hr)).To(Succeed())
			g.Expect(hr.DeletionTimestamp).NotTo(BeNil())
		})
		missing, back := replaceKubeconfig(a)
		row.note("secret missing for %s during the uninstall; meanwhile DeletionBlocked=%s %s %q", ms(back.Sub(missing.at)),
			missing.cond.Status, missing.cond.Reason, missing.cond.Message)
		hr := &helmv2.HelmRelease{}
		Expect(fe.Platform.Client.Get(suiteCtx, fluxKeyOf(a), hr)).To(Succeed())
		Expect(hr.Spec.Suspend).To(BeFalse(), "the HelmRelease was suspended: kro would be dropped, not uninstalled")
		Expect(fe.StartFluxController(suiteCtx, testenv.HelmController.Name)).To(Succeed())
		started := time.Now()
		waitGone(2*time.Minute, a)
		row.converged(time.Since(started), "after helm-controller started", 0, "")
		row.finalizerGuard(guard())
		Expect(controlPlaneGoneEvents(a, uid)).To(BeEmpty(), "kro was dropped instead of uninstalled")
		row.note("uninstalled, no ControlPlaneGone event")
		checkLeftovers(row, true, a)
	})

	handOverSpecs(func() *env.ControlPlane { return a })

	It("deletion with an RGD and orphaned instances", func() {
		row := startRow("Deletion while an RGD and two instances of its kind exist; the RGD deleted before the instances",
			"blocked by UserResourcesPresent (names the RGD), then by InstancesPresent (names the kind and count); released within about 5 s of the last instance going; nothing orphaned")
		cleanUpAfterFailure(a)
		installReady(a, "v0.9.4")
		Expect(fe.StartKroController(suiteCtx, a)).To(Succeed())
		rgd := testenv.ConfigMapRGD("faults-app", "FaultsApp")
		Expect(a.Client.Create(suiteCtx, rgd)).To(Succeed())
		const crdName = "faultsapps.kro.run"
		waitUntil(2*time.Minute, poll, func(g Gomega) {
			crd := &apiextensionsv1.CustomResourceDefinition{}
			g.Expect(a.Client.Get(suiteCtx, client.ObjectKey{Name: crdName}, crd)).To(Succeed())
			g.Expect(crd.Labels).To(HaveKeyWithValue(env.KroOwnedLabel, "true"))
		})
		one, two := faultsApp("one"), faultsApp("two")
		for _, inst := range []*unstructured.Unstructured{one, two} {
			waitUntil(time.Minute, poll, func(g Gomega) { g.Expect(a.Client.Create(suiteCtx, inst.DeepCopy())).To(Succeed()) })
		}
		waitUntil(time.Minute, poll, func(g Gomega) {
			for _, name := range []string{"faults-one", "faults-two"} {
				g.Expect(a.Client.Get(suiteCtx, client.ObjectKey{Namespace: "default", Name: name}, &corev1.ConfigMap{})).To(Succeed())
			}
		})
		guard := guardFinalizer(a)
		Expect(fe.Onboarding.Client.Delete(suiteCtx, kroOf(a))).To(Succeed())
		var blocked metav1.Condition
		waitUntil(time.Minute, poll, func(g Gomega) {
			blocked = expectBlocked(g, a, v1alpha1.ReasonUserResourcesPresent, "faults-app")
		})
		row.note("DeletionBlocked=True %s %q", blocked.Reason, blocked.Message)

		By("the RGD deleted first: kro keeps its CRD and the instances, the deletion stays blocked by them")
		Expect(a.Client.Delete(suiteCtx, rgd.DeepCopy())).To(Succeed())
		waitUntil(time.Minute, poll, func(g Gomega) {
			err := a.Client.Get(suiteCtx, client.ObjectKeyFromObject(rgd), rgd.DeepCopy())
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the RGD is still there: %v", err)
		})
		Expect(a.Client.Get(suiteCtx, client.ObjectKey{Name: crdName}, &apiextensionsv1.CustomResourceDefinition{})).To(Succeed(), "kro deleted its CRD")
		waitUntil(time.Minute, poll, func(g Gomega) {
			blocked = expectBlocked(g, a, v1alpha1.ReasonInstancesPresent, "FaultsApp")
			g.Expect(blocked.Message).To(MatchRegexp(`\b2\b`), "the message does not count 2 instances")
		})
		row.note("RGD deleted (its CRD and both instances stay): DeletionBlocked=True %s %q", blocked.Reason, blocked.Message)

		By("instance one the way the message says: the RGD recreated, the instance deleted while it exists, the RGD deleted again")
		Expect(a.Client.Create(suiteCtx, testenv.ConfigMapRGD("faults-app", "FaultsApp"))).To(Succeed())
		Expect(a.Client.Delete(suiteCtx, one.DeepCopy())).To(Succeed())
		waitUntil(2*time.Minute, poll, func(g Gomega) {
			err := a.Client.Get(suiteCtx, client.ObjectKeyFromObject(one), one.DeepCopy())
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "instance one is still there: %v", err)
		})
		oneConfigMap := a.Client.Get(suiteCtx, client.ObjectKey{Namespace: "default", Name: "faults-one"}, &corev1.ConfigMap{})
		Expect(a.Client.Delete(suiteCtx, rgd.DeepCopy())).To(Succeed())
		waitUntil(time.Minute, poll, func(g Gomega) {
			blocked = expectBlocked(g, a, v1alpha1.ReasonInstancesPresent, "FaultsApp")
			g.Expect(blocked.Message).To(MatchRegexp(`\b1\b`), "the message does not count 1 instance")
		})
		row.note("instance one deleted by kro with its RGD recreated (its ConfigMap %s), RGD deleted again: %q",
			map[bool]string{true: "removed too", false: "left"}[apierrors.IsNotFound(oneConfigMap)], blocked.Message)

		By("instance two deleted with its RGD gone: kro's finalizer stays until it is removed by hand")
		Expect(a.Client.Delete(suiteCtx, two.DeepCopy())).To(Succeed())
		Consistently(func(g Gomega) {
			got := two.DeepCopy()
			g.Expect(a.Client.Get(suiteCtx, client.ObjectKeyFromObject(two), got)).To(Succeed())
			g.Expect(got.GetDeletionTimestamp()).NotTo(BeNil())
			g.Expect(got.GetFinalizers()).NotTo(BeEmpty())
		}).WithContext(suiteCtx).WithTimeout(3 * time.Second).WithPolling(poll).Should(Succeed())
		got := two.DeepCopy()
		Expect(a.Client.Get(suiteCtx, client.ObjectKeyFromObject(two), got)).To(Succeed())
		finalizers := got.GetFinalizers()
		Expect(a.Client.Patch(suiteCtx, got, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))).To(Succeed())
		waitUntil(time.Minute, 50*time.Millisecond, func(g Gomega) {
			err := a.Client.Get(suiteCtx, client.ObjectKeyFromObject(two), two.DeepCopy())
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "instance two is still there: %v", err)
		})
		lastGone := time.Now()
		released := waitUntil(time.Minute, 50*time.Millisecond, func(g Gomega) {
			hr := &helmv2.HelmRelease{}
			err := fe.Platform.Client.Get(suiteCtx, fluxKeyOf(a), hr)
			g.Expect(apierrors.IsNotFound(err) || err == nil && hr.DeletionTimestamp != nil).To(BeTrue(), "the HelmRelease is not being deleted: %v", err)
		})
		twoConfigMap := a.Client.Get(suiteCtx, client.ObjectKey{Namespace: "default", Name: "faults-two"}, &corev1.ConfigMap{})
		row.note("instance two stuck in deletion with kro's finalizer %v until it was removed by hand (its ConfigMap %s); last instance gone → deletion released (HelmRelease deleted) in %s",
			finalizers, map[bool]string{true: "removed too", false: "left on the ControlPlane"}[apierrors.IsNotFound(twoConfigMap)], ms(released))
		Expect(released).To(BeNumerically("<=", 5*time.Second), "the deletion was released %s after the last instance went", released)
		waitGone(2*time.Minute, a)
		row.converged(released, "from the last instance gone to the deletion released", time.Since(lastGone), "to the Kro gone")
		row.finalizerGuard(guard())
		left := checkLeftovers(row, true, a)
		for _, k := range left.Kept {
			if strings.Contains(k.Why, "generated by kro") {
				row.note("kept by design: CRD %s", k.Name)
			}
		}
		_ = client.IgnoreNotFound(a.Client.Delete(suiteCtx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "faults-two"}}))
	})

	It("platform API server restarted during many installs", func() {
		extra := loadKros - 2
		row := startRow(fmt.Sprintf("The platform cluster's kube-apiserver stopped for %s and started again while %d Kros install", platformOutage, loadKros),
			"every Kro Ready; nothing orphaned after their deletion")
		cleanUpAfterFailure(a, b)
		if extra < 0 {
			extra = 0
		}
		var refs []env.ControlPlaneRef
		for i := range extra {
			refs = append(refs, env.ControlPlaneRef{Name: fmt.Sprintf("load-%02d", i+1), Namespace: loadNamespace})
		}
		addStart := time.Now()
		added, err := fe.AddControlPlanes(suiteCtx, refs...)
		DeferCleanup(func() {
			for _, cp := range added {
				Expect(fe.RemoveControlPlane(suiteCtx, cp.Name)).To(Succeed())
			}
		})
		Expect(err).NotTo(HaveOccurred())
		cleanUpAfterFailure(added...)
		row.note("%d Kros, one per ControlPlane: fault-a, fault-b and %d kwok ControlPlanes added for this fault (in %s) and removed after it",
			loadKros, len(added), ms(time.Since(addStart)))
		cps := append([]*env.ControlPlane{a, b}, added...)[:loadKros]
		created := time.Now()
		for i, cp := range cps {
			createKro(cp, []string{"v0.9.3", "v0.9.4"}[i%2])
		}
		// Stop while the installs are under way: once a quarter of the HelmReleases exist.
		waitUntil(2*time.Minute, 50*time.Millisecond, func(g Gomega) {
			var hrs helmv2.HelmReleaseList
			g.Expect(fe.Platform.Client.List(suiteCtx, &hrs)).To(Succeed())
			g.Expect(len(hrs.Items)).To(BeNumerically(">=", (len(cps)+3)/4))
		})
		var hrs helmv2.HelmReleaseList
		Expect(fe.Platform.Client.List(suiteCtx, &hrs)).To(Succeed())
		readyHRs := 0
		for _, hr := range hrs.Items {
			if fluxReady(hr.Status.Conditions).Status == metav1.ConditionTrue {
				readyHRs++
			}
		}
		stopping := time.Now()
		Expect(fe.StopPlatformAPIServer()).To(Succeed())
		stopped := time.Now()
		time.Sleep(platformOutage) // the outage itself
		Expect(fe.StartPlatformAPIServer()).To(Succeed())
		restarted := time.Now()
		row.note("stopped %s after the Kros were created, when %d HelmReleases existed and %d were Ready; stopping took %s, down %s, starting %s",
			ms(stopping.Sub(created)), len(hrs.Items), readyHRs, ms(stopped.Sub(stopping)), ms(platformOutage), ms(restarted.Sub(stopped)-platformOutage))
		readyAt := map[string]time.Duration{}
		waitUntil(10*time.Minute, 500*time.Millisecond, func(g Gomega) {
			var waiting []string
			for i, cp := range cps {
				if _, ok := readyAt[cp.Name]; ok {
					continue
				}
				// Each Kro on its own, so that every one's time is seen.
				if err := InterceptGomegaFailure(func() {
					expectKroReady(Default, cp, strings.TrimPrefix([]string{"v0.9.3", "v0.9.4"}[i%2], "v"))
				}); err != nil {
					waiting = append(waiting, err.Error())
					continue
				}
				readyAt[cp.Name] = time.Since(restarted)
			}
			g.Expect(waiting).To(BeEmpty(), "%d of %d Kros are not Ready", len(waiting), len(cps))
		})
		var after []time.Duration
		for _, d := range readyAt {
			after = append(after, d)
		}
		slices.Sort(after)
		row.note("all %d Ready, after the API server was back: the first %s, half of them %s, the last %s",
			len(cps), ms(after[0]), ms(after[(len(after)-1)/2]), ms(after[len(after)-1]))
		row.converged(time.Since(restarted), "after the API server was back", time.Since(created), "after the Kros were created")
		deleteAndCheck(row, cps...)
	})

	It("provider killed while a deletion waits out the grace period", func() {
		row := startRow(fmt.Sprintf("Provider SIGKILLed and restarted while a deletion waits out the grace period (%s) of a deleted kubeconfig secret (the deletion held by an RGD before)", accessGracePeriod),
			"the grace period counts from when the kubeconfig went missing, not from the restart: kro is dropped at the announced time with Event ControlPlaneGone; nothing of the Kro left on the platform")
		cleanUpAfterFailure(a)
		installReady(a, "v0.9.4")
		uid := getKroOf(Default, a).UID
		rgd := testenv.ConfigMapRGD("faults-grace", "FaultsGrace")
		Expect(a.Client.Create(suiteCtx, rgd)).To(Succeed())
		DeferCleanup(func() {
			// The ControlPlane is not really gone: give it back its kubeconfig and its RGD up.
			Expect(client.IgnoreAlreadyExists(fe.Platform.Client.Create(suiteCtx, fe.AccessSecret(a)))).To(Succeed())
			Expect(client.IgnoreNotFound(a.Client.Delete(suiteCtx, rgd.DeepCopy()))).To(Succeed())
		})
		Expect(fe.Onboarding.Client.Delete(suiteCtx, kroOf(a))).To(Succeed())
		waitUntil(time.Minute, poll, func(g Gomega) { expectBlocked(g, a, v1alpha1.ReasonUserResourcesPresent, "faults-grace") })
		Expect(fe.Platform.Client.Delete(suiteCtx, fe.AccessSecret(a))).To(Succeed())
		secretDeleted := time.Now()
		since, until, blocked := waitGracePeriod(a)
		row.note("kubeconfig deleted: DeletionBlocked=True %s, dropping announced for %s after it went missing", blocked.Reason, ms(until.Sub(since)))
		Expect(fe.KillProvider()).To(Succeed())
		DeferCleanup(restartProviderIfDead)
		killed := time.Now()
		time.Sleep(5 * time.Second) // the provider stays dead for a while
		Expect(fe.RestartProvider(suiteCtx)).To(Succeed())
		row.note("provider killed %s after the kubeconfig was deleted, restarted %s later", ms(killed.Sub(secretDeleted)), ms(time.Since(killed)))
		since2, until2, _ := waitGracePeriod(a)
		Expect(since2).To(Equal(since), "the grace period started again after the restart")
		Expect(until2).To(Equal(until))
		row.note("after the restart the same times are announced")
		waitGone(2*time.Minute, a)
		gone := time.Now()
		events := controlPlaneGoneEvents(a, uid)
		Expect(events).NotTo(BeEmpty(), "no ControlPlaneGone event on the Kro")
		Expect(gone.Sub(until)).To(BeNumerically("<", 10*time.Second), "the Kro went %s after the announced time", gone.Sub(until))
		row.note("the Kro went %s after the kubeconfig was deleted (%s after the announced time), Event %s %s",
			ms(gone.Sub(secretDeleted)), ms(gone.Sub(until)), events[0].Type, events[0].Reason)
		row.converged(gone.Sub(secretDeleted), "after the kubeconfig was deleted", 0, "")
		checkLeftovers(row, false, a)
		row.note("kro stays on the ControlPlane, as it counts as gone: not looked at")
	})

	It("ControlPlane gone for good during a deletion", func() {
		row := startRow(fmt.Sprintf("The ControlPlane's API server down for good during a deletion, and its kubeconfig secret deleted (grace period %s)", accessGracePeriod),
			"DeletionBlocked=True ControlPlaneAccessMissing until since+grace, then kro is dropped without uninstalling: Event ControlPlaneGone, the Kro gone, nothing of it left on the platform")
		cleanUpAfterFailure(b)
		installReady(b, "v0.9.4")
		uid := getKroOf(Default, b).UID
		Expect(fe.StopControlPlaneAPIServer(b)).To(Succeed()) // for good
		waitUntil(time.Minute, poll, func(g Gomega) {
			kro := getKroOf(g, b)
			g.Expect(condition(kro, v1alpha1.ConditionControlPlaneAccessReady).Status).To(Equal(metav1.ConditionFalse), describeKro(kro))
		})
		Expect(fe.Onboarding.Client.Delete(suiteCtx, kroOf(b))).To(Succeed())
		var waiting metav1.Condition
		waitUntil(time.Minute, poll, func(g Gomega) {
			kro := getKroOf(g, b)
			waiting = condition(kro, v1alpha1.ConditionDeletionBlocked)
			g.Expect(waiting.Status).To(Equal(metav1.ConditionTrue), describeKro(kro))
		})
		row.note("API server down, deletion waits: DeletionBlocked=True %s", waiting.Reason)
		Expect(fe.Platform.Client.Delete(suiteCtx, fe.AccessSecret(b))).To(Succeed())
		secretDeleted := time.Now()
		_, until, blocked := waitGracePeriod(b)
		row.note("kubeconfig deleted: DeletionBlocked=True %s %q", blocked.Reason, blocked.Message)
		By("nothing is dropped before the announced time")
		Consistently(func(g Gomega) {
			g.Expect(controlPlaneGoneEvents(b, uid)).To(BeEmpty())
			g.Expect(fe.Onboarding.Client.Get(suiteCtx, client.ObjectKeyFromObject(kroOf(b)), kroOf(b))).To(Succeed())
		}).WithContext(suiteCtx).WithTimeout(max(time.Until(until.Add(-2*time.Second)), poll)).WithPolling(poll).Should(Succeed())
		waitGone(2*time.Minute, b)
		gone := time.Now()
		events := controlPlaneGoneEvents(b, uid)
		Expect(events).NotTo(BeEmpty(), "no ControlPlaneGone event on the Kro")
		row.note("the Kro went %s after the kubeconfig was deleted (%s after the announced time); Event %s %s: %q",
			ms(gone.Sub(secretDeleted)), ms(gone.Sub(until)), events[0].Type, events[0].Reason, events[0].Message)
		row.converged(gone.Sub(secretDeleted), "after the kubeconfig was deleted", 0, "")
		checkLeftovers(row, false, b)
		row.note("the ControlPlane is gone for good, so what Helm left on it is not looked at")
	})
})

const loadNamespace = "faults-load"

// faultsApp is an instance of the kind of the RGD faults-app, in namespace default; kro
// makes a ConfigMap faults-<name> for it.
func faultsApp(name string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kro.run/v1alpha1",
		"kind":       "FaultsApp",
		"metadata":   map[string]any{"name": name, "namespace": "default"},
		"spec":       map[string]any{"name": "faults-" + name},
	}}
}

func fluxKeyOf(cp *env.ControlPlane) client.ObjectKey {
	return client.ObjectKey{Namespace: cp.TenantNamespace, Name: fe.ProviderName}
}

func getKroOf(g Gomega, cp *env.ControlPlane) *v1alpha1.Kro {
	kro := kroOf(cp)
	g.Expect(fe.Onboarding.Client.Get(suiteCtx, client.ObjectKeyFromObject(kro), kro)).To(Succeed())
	return kro
}

func patchKroOf(cp *env.ControlPlane, patch string) {
	GinkgoHelper()
	Expect(fe.Onboarding.Client.Patch(suiteCtx, kroOf(cp), client.RawPatch(types.MergePatchType, []byte(patch)))).To(Succeed())
}

func createKro(cp *env.ControlPlane, version string) time.Time {
	GinkgoHelper()
	kro := kroOf(cp)
	kro.Spec.Version = version
	Expect(fe.Onboarding.Client.Create(suiteCtx, kro)).To(Succeed())
	return time.Now()
}

// installReady creates the Kro of cp and waits until it is Ready: the starting point of
// the faults that hit an upgrade or a deletion.
func installReady(cp *env.ControlPlane, version string) {
	GinkgoHelper()
	createKro(cp, version)
	waitUntil(3*time.Minute, poll, func(g Gomega) { expectKroReady(g, cp, strings.TrimPrefix(version, "v")) })
}

func expectKroReady(g Gomega, cp *env.ControlPlane, chartVersion string) {
	kro := getKroOf(g, cp)
	g.Expect(kro.Status.ObservedGeneration).To(Equal(kro.Generation), describeKro(kro))
	g.Expect(condition(kro, v1alpha1.ConditionReady).Status).To(Equal(metav1.ConditionTrue), describeKro(kro))
	g.Expect(kro.Status.Phase).To(Equal(v1alpha1.PhaseReady), describeKro(kro))
	g.Expect(kro.Status.ChartVersion).To(Equal(chartVersion), describeKro(kro))
}

// expectBlocked expects the Kro's deletion blocked with that reason and a message that
// contains text, and returns the condition.
func expectBlocked(g Gomega, cp *env.ControlPlane, reason, text string) metav1.Condition {
	kro := getKroOf(g, cp)
	blocked := condition(kro, v1alpha1.ConditionDeletionBlocked)
	g.Expect(kro.Status.Phase).To(Equal(v1alpha1.PhaseTerminating), describeKro(kro))
	g.Expect(blocked.Status).To(Equal(metav1.ConditionTrue), describeKro(kro))
	g.Expect(blocked.Reason).To(Equal(reason), describeKro(kro))
	g.Expect(blocked.Message).To(ContainSubstring(text), describeKro(kro))
	return blocked
}

// waitUntil polls f every interval for up to d and returns how long it took to succeed.
func waitUntil(d, interval time.Duration, f func(g Gomega)) time.Duration {
	GinkgoHelper()
	start := time.Now()
	Eventually(f).WithContext(suiteCtx).WithTimeout(d).WithPolling(interval).Should(Succeed())
	return time.Since(start)
}

func waitGone(d time.Duration, cps ...*env.ControlPlane) {
	GinkgoHelper()
	waitUntil(d, poll, func(g Gomega) {
		for _, cp := range cps {
			kro := kroOf(cp)
			err := fe.Onboarding.Client.Get(suiteCtx, client.ObjectKeyFromObject(kro), kro)
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "still there: %s", describeKro(kro))
		}
	})
}

// deleteAndCheck deletes the Kros of cps, waits until they are gone while guarding their
// finalizers, and checks what they left.
func deleteAndCheck(row *faultRow, cps ...*env.ControlPlane) {
	GinkgoHelper()
	var guards []func() guardResult
	// Two requests per look and Kro: fewer looks when many Kros go at once.
	every := 100 * time.Millisecond * time.Duration(max(1, len(cps)/4))
	for _, cp := range cps {
		guards = append(guards, guardFinalizerEvery(cp, every))
		Expect(fe.Onboarding.Client.Delete(suiteCtx, kroOf(cp))).To(Succeed())
	}
	waitGone(5*time.Minute, cps...)
	for _, g := range guards {
		row.finalizerGuard(g())
	}
	checkLeftovers(row, true, cps...)
}

// checkLeftovers runs the checker for Kros that are gone, records the count in the row
// and fails on anything orphaned.
func checkLeftovers(row *faultRow, checkControlPlanes bool, cps ...*env.ControlPlane) env.Leftovers {
	GinkgoHelper()
	left, err := fe.CheckLeftovers(suiteCtx, checkControlPlanes, cps...)
	Expect(err).NotTo(HaveOccurred())
	row.orphans(left)
	Expect(left.Orphaned).To(BeEmpty(), "orphaned: %s", left.Names())
	return left
}

// helmReleaseSecrets are the storage secrets of kro's Helm release on the ControlPlane.
func helmReleaseSecrets(g Gomega, cp *env.ControlPlane) []string {
	var list corev1.SecretList
	g.Expect(cp.Client.List(suiteCtx, &list, client.InNamespace(controllers.KroNamespace))).To(Succeed())
	var names []string
	for _, s := range list.Items {
		if strings.HasPrefix(s.Name, env.HelmReleaseSecretPrefix) {
			names = append(names, s.Name)
		}
	}
	return names
}

// restartProviderIfDead restarts a provider that a failed spec left killed.
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

func restartProviderIfDead() {
	if fe.Provider.ExitError() != nil {
		Expect(fe.RestartProvider(suiteCtx)).To(Succeed())
	}
}

// cleanUpAfterFailure lets the next fault start from no Kro on these ControlPlanes when
// the running spec fails: their Kros are deleted (their finalizers removed when they do
// not go within two minutes) and so are ResourceGraphDefinitions left on them. Registered
// first, it runs after the spec's other cleanups, which restart what it stopped.
func cleanUpAfterFailure(cps ...*env.ControlPlane) {
	DeferCleanup(func() {
		if !CurrentSpecReport().Failed() {
			return
		}
		for _, cp := range cps {
			rgds := &unstructured.UnstructuredList{}
			rgds.SetAPIVersion("kro.run/v1alpha1")
			rgds.SetKind("ResourceGraphDefinitionList")
			if err := cp.Client.List(suiteCtx, rgds); err == nil {
				for i := range rgds.Items {
					_ = cp.Client.Delete(suiteCtx, &rgds.Items[i])
				}
			}
			_ = client.IgnoreNotFound(fe.Onboarding.Client.Delete(suiteCtx, kroOf(cp)))
		}
		for _, cp := range cps {
			err := wait(2*time.Minute, func() bool {
				return apierrors.IsNotFound(fe.Onboarding.Client.Get(suiteCtx, client.ObjectKeyFromObject(kroOf(cp)), kroOf(cp)))
			})
			if err != nil {
				fmt.Fprintf(GinkgoWriter, "cleanup: the Kro of %s does not go; removing its finalizer\n", cp.Name)
				_ = fe.Onboarding.Client.Patch(suiteCtx, kroOf(cp), client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
			}
		}
	})
}

// wait polls cond until it holds or d has passed.
func wait(d time.Duration, cond func() bool) error {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %s", d)
		}
		time.Sleep(poll)
	}
	return nil
}

// guardResult is what guardFinalizer saw.
type guardResult struct {
	kro string
	// polls counts the looks that found both the Kro and kro's Helm release.
	polls int
	// violation describes the Kro gone while kro's Helm release was still there.
	violation string
}

// guardFinalizer polls, from now until it is stopped, that the Kro of cp exists as long
// as kro's Helm release does on the ControlPlane: the provider must not drop the
// finalizer before Flux has uninstalled kro. It looks at the Kro first and the release
// second, so a release seen after the Kro was seen gone was there after the Kro went.
// A ControlPlane that does not answer is not looked at.
func guardFinalizer(cp *env.ControlPlane) func() guardResult {
	return guardFinalizerEvery(cp, 100*time.Millisecond)
}

// guardFinalizerEvery is guardFinalizer, looking every interval.
func guardFinalizerEvery(cp *env.ControlPlane, interval time.Duration) func() guardResult {
	res := guardResult{kro: cp.Namespace + "/" + cp.Name}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		defer GinkgoRecover()
		for {
			select {
			case <-stop:
				return
			case <-time.After(interval):
			}
			err := fe.Onboarding.Client.Get(suiteCtx, client.ObjectKeyFromObject(kroOf(cp)), kroOf(cp))
			if err != nil && !apierrors.IsNotFound(err) {
				continue
			}
			ctx, cancel := context.WithTimeout(suiteCtx, 2*time.Second)
			var list corev1.SecretList
			lerr := cp.Client.List(ctx, &list, client.InNamespace(controllers.KroNamespace))
			cancel()
			if lerr != nil {
				continue
			}
			var release []string
			for _, s := range list.Items {
				if strings.HasPrefix(s.Name, env.HelmReleaseSecretPrefix) {
					release = append(release, s.Name)
				}
			}
			switch {
			case err == nil && len(release) > 0:
				res.polls++
			case err != nil && len(release) > 0 && res.violation == "":
				res.violation = fmt.Sprintf("the Kro %s was gone at %s while kro's Helm release %v was still on the ControlPlane",
					res.kro, time.Now().UTC().Format(time.RFC3339Nano), release)
			}
		}
	})
	var once sync.Once
	end := func() guardResult {
		once.Do(func() {
			close(stop)
			wg.Wait()
		})
		return res
	}
	DeferCleanup(func() { end() }) // a spec that fails early leaves no guard behind
	return end
}

// kubeconfigGone is what the Kro said while its kubeconfig was missing.
type kubeconfigGone struct {
	at   time.Time
	cond metav1.Condition
}

// replaceKubeconfig deletes the ControlPlane's kubeconfig secret, waits until the Kro
// reports the access missing (at least kubeconfigGap), and creates the secret again
// with the same content. It returns what the Kro said and when the secret was back.
func replaceKubeconfig(cp *env.ControlPlane) (kubeconfigGone, time.Time) {
	GinkgoHelper()
	secret := &corev1.Secret{}
	Expect(fe.Platform.Client.Get(suiteCtx, client.ObjectKeyFromObject(fe.AccessSecret(cp)), secret)).To(Succeed())
	Expect(fe.Platform.Client.Delete(suiteCtx, secret)).To(Succeed())
	gone := kubeconfigGone{at: time.Now()}
	waitUntil(time.Minute, 100*time.Millisecond, func(g Gomega) {
		kro := getKroOf(g, cp)
		gone.cond = condition(kro, v1alpha1.ConditionDeletionBlocked)
		access := condition(kro, v1alpha1.ConditionControlPlaneAccessReady)
		g.Expect(access.Reason).To(Equal(v1alpha1.ReasonControlPlaneAccessMissing), describeKro(kro))
		g.Expect(gone.cond.Reason).To(Equal(v1alpha1.ReasonControlPlaneAccessMissing), describeKro(kro))
	})
	if d := time.Until(gone.at.Add(kubeconfigGap)); d > 0 {
		time.Sleep(d) // the secret stays missing for at least kubeconfigGap
	}
	Expect(fe.Platform.Client.Create(suiteCtx, fe.AccessSecret(cp))).To(Succeed())
	return gone, time.Now()
}

// gracePeriodMessage finds the times in DeletionBlocked's message while a kubeconfig is
// missing during a deletion.
var gracePeriodMessage = regexp.MustCompile(`missing since (\S+); kro will be dropped without uninstalling at ([^\s,;)]+)`)

// waitGracePeriod waits until the deletion of cp's Kro waits out the grace period of a
// missing kubeconfig, and returns the times its message announces: since when the
// kubeconfig is missing and when kro will be dropped. They must be the grace period apart.
func waitGracePeriod(cp *env.ControlPlane) (since, until time.Time, blocked metav1.Condition) {
	GinkgoHelper()
	waitUntil(time.Minute, poll, func(g Gomega) {
		blocked = expectBlocked(g, cp, v1alpha1.ReasonControlPlaneAccessMissing, "kro will be dropped without uninstalling at")
		m := gracePeriodMessage.FindStringSubmatch(blocked.Message)
		g.Expect(m).To(HaveLen(3), "no times in %q", blocked.Message)
		var err error
		since, err = time.Parse(time.RFC3339, m[1])
		g.Expect(err).NotTo(HaveOccurred())
		until, err = time.Parse(time.RFC3339, m[2])
		g.Expect(err).NotTo(HaveOccurred())
	})
	Expect(until.Sub(since)).To(Equal(accessGracePeriod), "the message's times are not the grace period apart: %q", blocked.Message)
	return since, until, blocked
}

// controlPlaneGoneEvents are the events with reason ControlPlaneGone on the Kro with that UID.
func controlPlaneGoneEvents(cp *env.ControlPlane, uid types.UID) []corev1.Event {
	GinkgoHelper()
	var list corev1.EventList
	Expect(fe.Onboarding.Client.List(suiteCtx, &list, client.InNamespace(cp.Namespace))).To(Succeed())
	var out []corev1.Event
	for _, ev := range list.Items {
		if ev.InvolvedObject.UID == uid && ev.Reason == v1alpha1.ReasonControlPlaneGone {
			out = append(out, ev)
		}
	}
	return out
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

// ms rounds a duration for a row.
func ms(d time.Duration) string {
	switch {
	case d < time.Second:
		return d.Round(10 * time.Millisecond).String()
	default:
		return d.Round(100 * time.Millisecond).String()
	}
}

func envInt(name string, def int) int {
	var n int
	if _, err := fmt.Sscan(os.Getenv(name), &n); err != nil || n < 1 {
		return def
	}
	return n
}

//go:build e2e

package e2e

import (
	"fmt"
	"regexp"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/test/e2e/env"
	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

// The ControlPlane unreachable in the fault suite: its API server down during an install
// or a deletion, its kubeconfig secret deleted and created again, and a deletion that
// waits out the grace period of a missing kubeconfig until kro is dropped.

// controlPlaneDownSpecs are the faults of the ControlPlane cpA returns that end with
// it back: its API server stopped and started, its kubeconfig replaced.
func controlPlaneDownSpecs(cpA func() *env.ControlPlane) {
	It("ControlPlane API server down during an install", func() {
		a := cpA()
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
		a := cpA()
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
		a := cpA()
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
		a := cpA()
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
}

// gracePeriodSpecs are the deletions that wait out the grace period of a missing
// kubeconfig: on the ControlPlane cpA returns with the provider killed meanwhile, and
// on the one cpB returns, given up for good. They run last.
func gracePeriodSpecs(cpA, cpB func() *env.ControlPlane) {
	It("provider killed while a deletion waits out the grace period", func() {
		a := cpA()
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
		b := cpB()
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

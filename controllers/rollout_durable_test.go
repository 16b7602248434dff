package controllers

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/openmcp-project/openmcp-operator/api/constants"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/rollout/rollouttest"
)

// Issue 21, holes 1 and 2, against real API servers: the rollout survives the loss of
// the ProviderConfig's status, and admits like a Deployment.

// wipeProviderConfigStatus empties the ProviderConfig's status, as a restore from a
// backup or a ProviderConfig created again leaves it.
func wipeProviderConfigStatus(g Gomega) {
	g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pc := &v1alpha1.ProviderConfig{}
		if err := platform.Client.Get(context.Background(), client.ObjectKey{Name: providerName}, pc); err != nil {
			return err
		}
		pc.Status = v1alpha1.ProviderConfigStatus{}
		return platform.Client.Status().Update(context.Background(), pc)
	})).To(Succeed())
}

// keepsValues asserts for a while that the Kros' HelmReleases keep values holding want.
func keepsValues(g Gomega, want string, kros ...*v1alpha1.Kro) {
	g.Consistently(func(g Gomega) {
		for _, k := range kros {
			g.Expect(valuesOf(g, k)).To(ContainSubstring(want), k.Name)
		}
	}).WithTimeout(3 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
}

// TestALostStatusKeepsTheAdmission: the status wiped while a Kro is being updated, the
// rebuilt status has the same Kro updating since the same time, and nobody else is
// admitted in its place.
func TestALostStatusKeepsTheAdmission(t *testing.T) {
	g := withClusters(t)
	kros, v, _, after := changeUnderRollout(t, g)
	var since metav1.Time
	g.Eventually(func(g Gomega) {
		vs := versionStatus(g, v.Version)
		g.Expect(rollouttest.MemberNames(vs.Updating)).To(Equal([]string{client.ObjectKeyFromObject(kros[0]).String()}))
		since = vs.Updating[0].Since
		hr := getHelmRelease(g, kros[0])
		g.Expect(hr.Annotations).To(HaveKeyWithValue(v1alpha1.AnnotationRevision, after))
		g.Expect(hr.Annotations).To(HaveKey(v1alpha1.AnnotationRolloutAdmission))
	}, timeout, interval).Should(Succeed())
	time.Sleep(1100 * time.Millisecond) // a new admission would be a second later

	wipeProviderConfigStatus(g)
	g.Eventually(func(g Gomega) {
		vs := versionStatus(g, v.Version)
		g.Expect(vs.Updating).To(HaveLen(1))
		g.Expect(vs.Updating[0].Kro).To(Equal(client.ObjectKeyFromObject(kros[0]).String()))
		g.Expect(vs.Updating[0].Since.Time).To(BeTemporally("==", since.Time), "the admission is the one recorded, not a new one")
	}, timeout, interval).Should(Succeed())
	keepsValues(g, "debug", kros[0])
	keepsValues(g, `"info"`, kros[1:]...)
}

// TestALostStatusStaysPaused: a rollout paused by a failure stays paused when its
// status is wiped; the Kros held back keep the last good values.
func TestALostStatusStaysPaused(t *testing.T) {
	g := withClusters(t)
	kros, v, before, after := changeUnderRollout(t, g)
	g.Eventually(func(g Gomega) { g.Expect(valuesOf(g, kros[0])).To(ContainSubstring("debug")) }, timeout, interval).Should(Succeed())
	fluxReady(g, getHelmRelease(g, kros[0]), metav1.ConditionFalse, "Helm upgrade failed: Deployment kro is invalid")
	g.Eventually(func(g Gomega) {
		g.Expect(versionStatus(g, v.Version).Rollout).To(Equal(v1alpha1.RolloutPaused))
		g.Expect(getHelmRelease(g, kros[0]).Annotations).To(HaveKey(v1alpha1.AnnotationRolloutFailed), "the failure is recorded with the release")
	}, timeout, interval).Should(Succeed())

	wipeProviderConfigStatus(g)
	g.Eventually(func(g Gomega) {
		vs := versionStatus(g, v.Version)
		g.Expect(vs.Revision).To(Equal(after))
		g.Expect(vs.Rollout).To(Equal(v1alpha1.RolloutPaused))
		g.Expect(rollouttest.MemberNames(vs.Failed)).To(Equal([]string{client.ObjectKeyFromObject(kros[0]).String()}))
		g.Expect(vs.Updating).To(BeEmpty())
	}, timeout, interval).Should(Succeed())
	keepsValues(g, `"info"`, kros[1:]...)
	g.Expect(versionStatus(g, v.Version).Rollout).To(Equal(v1alpha1.RolloutPaused))

	// A revert takes the failed Kro back to the last good values at once, although its
	// HelmRelease records the broken revision.
	v.HelmValues = rolloutKrosValues
	offerVersion(g, v)
	g.Eventually(func(g Gomega) { g.Expect(valuesOf(g, kros[0])).To(ContainSubstring(`"info"`)) }, timeout, interval).Should(Succeed())
	fluxReady(g, getHelmRelease(g, kros[0]), metav1.ConditionTrue, "Helm rollback succeeded")
	g.Eventually(func(g Gomega) {
		vs := versionStatus(g, v.Version)
		g.Expect(vs.Revision).To(Equal(before))
		g.Expect(vs.Rollout).To(Equal(v1alpha1.RolloutComplete))
	}, timeout, interval).Should(Succeed())
}

// TestARestoredKroIsNoFreePass: a Kro held back whose status lost status.revision (the
// onboarding cluster restored from a backup) keeps the old values, as its HelmRelease
// records the revision it runs.
func TestARestoredKroIsNoFreePass(t *testing.T) {
	g := withClusters(t)
	kros, _, before, _ := changeUnderRollout(t, g)
	last := kros[2]
	eventuallyCondition(g, last, v1alpha1.ConditionVersionResolved, metav1.ConditionTrue, v1alpha1.ReasonRolloutPending)
	g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		k := getKro(g, last)
		k.Status = v1alpha1.KroStatus{}
		return onboarding.Client.Status().Update(context.Background(), k)
	})).To(Succeed())
	// Its next reconcile, asked for as openmcp asks.
	g.Expect(onboarding.Client.Patch(context.Background(), last, client.RawPatch(types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"`+constants.OperationAnnotation+`":"`+constants.OperationAnnotationValueReconcile+`"}}}`)))).To(Succeed())
	eventuallyCondition(g, last, v1alpha1.ConditionVersionResolved, metav1.ConditionTrue, v1alpha1.ReasonRolloutPending, before)
	keepsValues(g, `"info"`, last)
}

// TestAKroUnavailableBeforeTheChangeGoesLast (hole 2): a Kro whose release was failing
// before the change is not admitted first although first by name, takes one place of
// maxUnavailable, is updated last and is no failure of the revision.
func TestAKroUnavailableBeforeTheChangeGoesLast(t *testing.T) {
	g := withClusters(t)
	var sick *v1alpha1.Kro
	fail := func(kros []*v1alpha1.Kro) {
		sick = kros[0]
		fluxReady(g, getHelmRelease(g, sick), metav1.ConditionFalse, "Helm upgrade failed: the ControlPlane is hibernated")
		g.Eventually(func(g Gomega) { g.Expect(getKro(g, sick).Status.Phase).NotTo(Equal(v1alpha1.PhaseReady)) }, timeout, interval).Should(Succeed())
	}
	kros, v, _, after := changeUnderPolicy(t, g, &v1alpha1.RolloutPolicy{MaxUnavailable: ptr.To(intstr.FromInt32(2))}, fail)
	for _, k := range kros[1:] {
		g.Eventually(func(g Gomega) {
			vs := versionStatus(g, v.Version)
			g.Expect(rollouttest.MemberNames(vs.Updating)).To(Equal([]string{client.ObjectKeyFromObject(k).String()}), "one at a time: the sick one takes the other place")
			g.Expect(vs.Message).To(ContainSubstring("updated last"))
		}, timeout, interval).Should(Succeed())
		keepsValues(g, `"info"`, sick)
		fluxReady(g, getHelmRelease(g, k), metav1.ConditionTrue, "Helm upgrade succeeded")
		g.Eventually(func(g Gomega) { g.Expect(getKro(g, k).Status.Revision).To(Equal(after)) }, timeout, interval).Should(Succeed())
	}
	// Last, the sick one gets the new values, and the rollout completes without a failure.
	g.Eventually(func(g Gomega) {
		g.Expect(valuesOf(g, sick)).To(ContainSubstring("debug"))
		vs := versionStatus(g, v.Version)
		g.Expect(vs.Rollout).To(Equal(v1alpha1.RolloutComplete), "%+v %+v", vs, getHelmRelease(g, sick).Annotations)
		g.Expect(vs.Failed).To(BeEmpty())
		g.Expect(vs.Message).To(ContainSubstring("while unavailable"))
	}, timeout, interval).Should(Succeed())
}

// TestMovingOntoAVersionIsNoAdmission (hole 2): a Kro its tenant moves onto a version
// under a rollout policy takes the version's current revision without being admitted.
func TestMovingOntoAVersionIsNoAdmission(t *testing.T) {
	g := withClusters(t)
	kros, _, _, _ := changeUnderRollout(t, g)
	last := kros[2]
	other := v1alpha1.KroVersion{Version: uniq("v-target"), ChartVersion: "0.9.4"}
	offerVersion(g, other)
	t.Cleanup(func() { withdrawVersion(NewWithT(t), other.Version) })
	g.Expect(onboarding.Client.Patch(context.Background(), last,
		client.RawPatch(types.MergePatchType, []byte(`{"spec":{"version":"`+other.Version+`"}}`)))).To(Succeed())
	g.Eventually(func(g Gomega) { g.Expect(getOCIRepository(g, last).Spec.Reference.Tag).To(Equal("0.9.4")) }, timeout, interval).Should(Succeed())
	g.Consistently(func(g Gomega) {
		vs := versionStatus(g, other.Version)
		g.Expect(vs.Updating).To(BeEmpty())
		g.Expect(vs.Failed).To(BeEmpty())
	}).WithTimeout(3 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
}

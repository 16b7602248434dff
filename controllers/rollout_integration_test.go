package controllers

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/rollout"
	"github.com/openmcp-project/service-provider-kro/controllers/rollout/rollouttest"
)

// setRollout sets the suite ProviderConfig's rollout policy, and takes it away at the
// end of the test.
func setRollout(t *testing.T, g Gomega, policy *v1alpha1.RolloutPolicy) {
	t.Helper()
	update := func(p *v1alpha1.RolloutPolicy) error {
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			pc := &v1alpha1.ProviderConfig{}
			if err := platform.Client.Get(context.Background(), client.ObjectKey{Name: providerName}, pc); err != nil {
				return err
			}
			pc.Spec.Rollout = p
			return platform.Client.Update(context.Background(), pc)
		})
	}
	g.Expect(update(policy)).To(Succeed())
	t.Cleanup(func() {
		if err := update(nil); err != nil {
			t.Errorf("removing the rollout policy: %v", err)
		}
	})
}

func versionStatus(g Gomega, version string) v1alpha1.VersionStatus {
	pc := &v1alpha1.ProviderConfig{}
	g.Expect(platform.Client.Get(context.Background(), client.ObjectKey{Name: providerName}, pc)).To(Succeed())
	for _, vs := range pc.Status.Versions {
		if vs.Version == version {
			return vs
		}
	}
	return v1alpha1.VersionStatus{}
}

// valuesOf is the helmValues the Kro's HelmRelease carries, as JSON.
func valuesOf(g Gomega, k *v1alpha1.Kro) string {
	hr := getHelmRelease(g, k)
	if hr.Spec.Values == nil {
		return ""
	}
	return string(hr.Spec.Values.Raw)
}

// rolloutKrosValues are the helmValues of the version rolloutKros makes.
var rolloutKrosValues = &apiextensionsv1.JSON{Raw: []byte(`{"config":{"logLevel":"info"}}`)}

// rolloutKros makes three Kros of a fresh version Ready, and returns them in name order
// with the version's entry. The third is in a Namespace of its own, which sorts after
// the first's, so that a test can make it a canary by its Namespace's labels.
func rolloutKros(t *testing.T, g Gomega) ([]*v1alpha1.Kro, v1alpha1.KroVersion) {
	t.Helper()
	v := v1alpha1.KroVersion{Version: uniq("v-rollout"), ChartVersion: "0.9.3", HelmValues: rolloutKrosValues}
	offerVersion(g, v)
	t.Cleanup(func() { withdrawVersion(NewWithT(t), v.Version) })
	ns := newNamespace(t, g)
	// "z" sorts after "/": the Kro's key sorts after those of the first namespace.
	other := ns + "z"
	g.Expect(onboarding.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: other}})).To(Succeed())
	var kros []*v1alpha1.Kro
	for i, name := range []string{"cp-a", "cp-b", "cp-c"} {
		in := ns
		if i == 2 {
			in = other
		}
		kros = append(kros, readyKro(t, g, in, name, v.Version))
	}
	return kros, v
}

// labelNamespace merges labels (JSON, null removes one) into the labels of the Kro's
// Namespace on the onboarding cluster, as the platform team would.
func labelNamespace(g Gomega, k *v1alpha1.Kro, labels string) {
	g.Expect(onboarding.Client.Patch(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: k.Namespace}},
		client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":`+labels+`}}`)))).To(Succeed())
}

// changeUnderRollout makes three Kros Ready on a fresh version, sets a rollout policy of
// maxUnavailable 1, waits until each Kro reports the version's revision, and changes the
// version's helmValues. It returns the Kros, the changed version and both revisions.
func changeUnderRollout(t *testing.T, g Gomega) (kros []*v1alpha1.Kro, v v1alpha1.KroVersion, before, after string) {
	t.Helper()
	return changeUnderPolicy(t, g, &v1alpha1.RolloutPolicy{MaxUnavailable: ptr.To(intstr.FromInt32(1))}, nil)
}

// changeUnderPolicy is changeUnderRollout with a policy of the test's, and prepare, when
// given, run on the Kros before the policy is set (to label canaries, say).
func changeUnderPolicy(t *testing.T, g Gomega, policy *v1alpha1.RolloutPolicy, prepare func([]*v1alpha1.Kro)) (kros []*v1alpha1.Kro, v v1alpha1.KroVersion, before, after string) {
	t.Helper()
	kros, v = rolloutKros(t, g)
	if prepare != nil {
		prepare(kros)
	}
	setRollout(t, g, policy)
	before, err := rollout.RevisionName(providerName, &v)
	g.Expect(err).NotTo(HaveOccurred())
	for _, k := range kros {
		g.Eventually(func(g Gomega) { g.Expect(getKro(g, k).Status.Revision).To(Equal(before)) }, timeout, interval).Should(Succeed())
	}
	v.HelmValues = &apiextensionsv1.JSON{Raw: []byte(`{"config":{"logLevel":"debug"}}`)}
	offerVersion(g, v)
	after, err = rollout.RevisionName(providerName, &v)
	g.Expect(err).NotTo(HaveOccurred())
	return kros, v, before, after
}

// TestRolloutUpdatesOneKroAtATime changes a version's helmValues under maxUnavailable 1:
// one HelmRelease changes, the others keep the old values and say why, and each next
// one follows only once the one before is Ready with the new revision.
func TestRolloutUpdatesOneKroAtATime(t *testing.T) {
	g := withClusters(t)
	kros, v, before, after := changeUnderRollout(t, g)
	for i, k := range kros {
		g.Eventually(func(g Gomega) {
			vs := versionStatus(g, v.Version)
			g.Expect(vs.Revision).To(Equal(after))
			g.Expect(vs.Rollout).To(Equal(v1alpha1.RolloutProgressing))
			g.Expect(rollouttest.MemberNames(vs.Updating)).To(Equal([]string{client.ObjectKeyFromObject(k).String()}))
			g.Expect(valuesOf(g, k)).To(ContainSubstring("debug"))
		}, timeout, interval).Should(Succeed())
		// The ones not yet admitted keep the old values, and say so.
		for _, other := range kros[i+1:] {
			g.Consistently(func(g Gomega) { g.Expect(valuesOf(g, other)).To(ContainSubstring(`"info"`)) }).
				WithTimeout(time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
			eventuallyCondition(g, other, v1alpha1.ConditionVersionResolved, metav1.ConditionTrue, v1alpha1.ReasonRolloutPending, before, after)
		}
		// Flux upgrades the admitted one: it is Ready with the new revision.
		fluxReady(g, getHelmRelease(g, k), metav1.ConditionTrue, "Helm upgrade succeeded")
		g.Eventually(func(g Gomega) { g.Expect(getKro(g, k).Status.Revision).To(Equal(after)) }, timeout, interval).Should(Succeed())
	}
	g.Eventually(func(g Gomega) {
		vs := versionStatus(g, v.Version)
		g.Expect(vs.Rollout).To(Equal(v1alpha1.RolloutComplete))
		g.Expect(vs.Updated).To(BeEquivalentTo(3))
	}, timeout, interval).Should(Succeed())
	// Both revisions are kept as ControllerRevisions in the provider's namespace.
	for _, name := range []string{before, after} {
		g.Expect(platform.Client.Get(context.Background(), client.ObjectKey{Namespace: podNamespace, Name: name}, &appsv1.ControllerRevision{})).To(Succeed())
	}
}

// TestATenantsVersionChangeIsNotHeldBack: a Kro waiting for the rollout of its version's
// new artifacts moves at once when its tenant picks another version.
func TestATenantsVersionChangeIsNotHeldBack(t *testing.T) {
	g := withClusters(t)
	kros, v, _, _ := changeUnderRollout(t, g)
	last := kros[2]
	eventuallyCondition(g, last, v1alpha1.ConditionVersionResolved, metav1.ConditionTrue, v1alpha1.ReasonRolloutPending)

	other := v1alpha1.KroVersion{Version: uniq("v-other"), ChartVersion: "0.9.4"}
	offerVersion(g, other)
	t.Cleanup(func() { withdrawVersion(NewWithT(t), other.Version) })
	g.Expect(onboarding.Client.Patch(context.Background(), last,
		client.RawPatch(types.MergePatchType, []byte(`{"spec":{"version":"`+other.Version+`"}}`)))).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(getOCIRepository(g, last).Spec.Reference.Tag).To(Equal("0.9.4"))
		g.Expect(valuesOf(g, last)).To(BeEmpty())
	}, timeout, interval).Should(Succeed())
	eventuallyCondition(g, last, v1alpha1.ConditionVersionResolved, metav1.ConditionTrue, v1alpha1.ReasonReconcileSuccess)
	g.Expect(rollouttest.MemberNames(versionStatus(g, v.Version).Updating)).NotTo(ContainElement(client.ObjectKeyFromObject(last).String()))
}

// TestWithoutRolloutEveryKroChangesAtOnce: no policy, no change of behaviour.
func TestWithoutRolloutEveryKroChangesAtOnce(t *testing.T) {
	g := withClusters(t)
	kros, v := rolloutKros(t, g)
	v.HelmValues = &apiextensionsv1.JSON{Raw: []byte(`{"config":{"logLevel":"debug"}}`)}
	offerVersion(g, v)
	for _, k := range kros {
		g.Eventually(func(g Gomega) { g.Expect(valuesOf(g, k)).To(ContainSubstring("debug")) }, timeout, interval).Should(Succeed())
	}
	g.Expect(versionStatus(g, v.Version).Updating).To(BeEmpty())
}

// TestAFailedCanaryGatesTheOthers (issue 21, hole 3): under failureThreshold 2 a canary
// whose upgrade fails does not pause the version, and still no Kro that is not a canary
// gets the new values; the version's status names the failed canary.
func TestAFailedCanaryGatesTheOthers(t *testing.T) {
	g := withClusters(t)
	label := func(kros []*v1alpha1.Kro) { labelNamespace(g, kros[2], `{"ring":"canary"}`) }
	kros, v, _, _ := changeUnderPolicy(t, g, &v1alpha1.RolloutPolicy{MaxUnavailable: ptr.To(intstr.FromInt32(2)), FailureThreshold: ptr.To(int32(2)),
		Canary: &metav1.LabelSelector{MatchLabels: map[string]string{"ring": "canary"}}}, label)
	canary := kros[2]
	g.Eventually(func(g Gomega) {
		g.Expect(rollouttest.MemberNames(versionStatus(g, v.Version).Updating)).To(Equal([]string{client.ObjectKeyFromObject(canary).String()}))
		g.Expect(valuesOf(g, canary)).To(ContainSubstring("debug"))
	}, timeout, interval).Should(Succeed())

	// helm-controller fails the canary's upgrade.
	fluxReady(g, getHelmRelease(g, canary), metav1.ConditionFalse, "Helm upgrade failed: Deployment kro is invalid")
	g.Eventually(func(g Gomega) {
		vs := versionStatus(g, v.Version)
		g.Expect(rollouttest.MemberNames(vs.Failed)).To(Equal([]string{client.ObjectKeyFromObject(canary).String()}))
		g.Expect(vs.Rollout).To(Equal(v1alpha1.RolloutProgressing), "one failure of two allowed")
		g.Expect(vs.Message).To(ContainSubstring("canaries failed"))
	}, timeout, interval).Should(Succeed())
	for _, other := range kros[:2] {
		g.Consistently(func(g Gomega) { g.Expect(valuesOf(g, other)).To(ContainSubstring(`"info"`)) }).
			WithTimeout(2 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
	}
	g.Expect(versionStatus(g, v.Version).Updating).To(BeEmpty())
}

package controllers

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/rollout"
)

// setVersions replaces the versions of the test's ProviderConfig.
func (e *pcEnv) setVersions(g Gomega, versions ...v1alpha1.KroVersion) {
	g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pc := e.get(g)
		pc.Spec.Versions = versions
		return platform.Client.Update(context.Background(), pc)
	})).To(Succeed())
}

// revisionExists tells whether the ControllerRevision is in the test's namespace.
func (e *pcEnv) revisionExists(g Gomega, name string) bool {
	err := platform.Client.Get(context.Background(), client.ObjectKey{Namespace: e.podNamespace, Name: name}, &appsv1.ControllerRevision{})
	if apierrors.IsNotFound(err) {
		return false
	}
	g.Expect(err).NotTo(HaveOccurred())
	return true
}

func mustRevisionName(g Gomega, provider string, v *v1alpha1.KroVersion) string {
	name, err := rollout.RevisionName(provider, v)
	g.Expect(err).NotTo(HaveOccurred())
	return name
}

// runsRevision records in an ignored Kro's status that it runs the revision, Ready.
func runsRevision(g Gomega, k *v1alpha1.Kro, revision string) {
	base := k.DeepCopy()
	k.Status.Revision = revision
	g.Expect(onboarding.Client.Status().Patch(context.Background(), k, client.MergeFrom(base))).To(Succeed())
}

// TestRevisionsOfAWithdrawnVersionAreCollected (issue 21, hole 5): the revisions of a
// version withdrawn from spec.versions go once no Kro runs them, and stay while one
// does, also while that Kro is being deleted; another version's revision stays.
func TestRevisionsOfAWithdrawnVersionAreCollected(t *testing.T) {
	g := withClusters(t)
	ctx := context.Background()
	e := startProviderConfigReconciler(t, g, false)
	vA := v1alpha1.KroVersion{Version: uniq("va"), ChartVersion: "0.9.3"}
	vB := v1alpha1.KroVersion{Version: uniq("vb"), ChartVersion: "0.9.4"}
	e.create(g, vA, vB)
	run, other := mustRevisionName(g, e.name, &vA), mustRevisionName(g, e.name, &vB)
	g.Eventually(func(g Gomega) bool { return e.revisionExists(g, run) && e.revisionExists(g, other) }, timeout, interval).Should(BeTrue())

	// A Kro runs vA's first revision; a finalizer of the test's keeps it while deleted.
	k := ignoredKro(g, newNamespace(t, g), vA.Version, v1alpha1.PhaseReady, false)
	g.Expect(onboarding.Client.Patch(ctx, k, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":["example.com/hold"]}}`)))).To(Succeed())
	runsRevision(g, k, run)
	g.Eventually(func(g Gomega) {
		g.Expect(e.get(g).Status.Versions).To(ContainElement(And(HaveField("Version", vA.Version), HaveField("Updated", BeEquivalentTo(1)))),
			"the reconciler sees the Kro run %s", run)
	}, timeout, interval).Should(Succeed())

	// vA gets a second revision that nobody runs, then is withdrawn.
	vA.HelmValues = &apiextensionsv1.JSON{Raw: []byte(`{"config":{"logLevel":"debug"}}`)}
	unused := mustRevisionName(g, e.name, &vA)
	e.setVersions(g, vA, vB)
	g.Eventually(func(g Gomega) bool { return e.revisionExists(g, unused) }, timeout, interval).Should(BeTrue())
	e.setVersions(g, vB)

	g.Eventually(func(g Gomega) bool { return e.revisionExists(g, unused) }, timeout, interval).Should(BeFalse(),
		"the revision of the withdrawn version that no Kro runs is collected")
	kept := func(g Gomega) {
		g.Expect(e.revisionExists(g, run)).To(BeTrue(), "a Kro runs it")
		g.Expect(e.revisionExists(g, other)).To(BeTrue(), "its version is on offer")
	}
	g.Consistently(kept, 2*time.Second, 200*time.Millisecond).Should(Succeed())

	// Being deleted, the Kro still runs it; a change of the ProviderConfig brings the
	// reconciler back meanwhile.
	g.Expect(onboarding.Client.Delete(ctx, k)).To(Succeed())
	gets := e.platform.gets.Load()
	g.Expect(platform.Client.Patch(ctx, e.get(g), client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"example.com/touch":"1"}}}`)))).To(Succeed())
	g.Eventually(e.platform.gets.Load, timeout, interval).Should(BeNumerically(">", gets))
	g.Consistently(kept, 2*time.Second, 200*time.Millisecond).Should(Succeed())

	// Gone, it runs nothing: its revision goes too.
	g.Expect(onboarding.Client.Patch(ctx, k, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))).To(Succeed())
	g.Eventually(func(g Gomega) bool { return e.revisionExists(g, run) }, timeout, interval).Should(BeFalse(),
		"the revision goes once the Kro that ran it is gone")
	g.Expect(e.revisionExists(g, other)).To(BeTrue())
}

// pauseRollouts sets the annotation that pauses every rollout of the suite's
// ProviderConfig, and takes it away at the end of the test.
func pauseRollouts(t *testing.T, g Gomega) {
	t.Helper()
	annotate := func(value string) error {
		patch := `{"metadata":{"annotations":{"` + v1alpha1.AnnotationRolloutPaused + `":` + value + `}}}`
		return platform.Client.Patch(context.Background(), &v1alpha1.ProviderConfig{ObjectMeta: metav1.ObjectMeta{Name: providerName}},
			client.RawPatch(types.MergePatchType, []byte(patch)))
	}
	g.Expect(annotate(`"true"`)).To(Succeed())
	t.Cleanup(func() {
		if err := annotate("null"); err != nil {
			t.Errorf("resuming rollouts: %v", err)
		}
	})
}

// TestAHeldKrosPullSecretIsChecked (issue 21, hole 5): a Kro that a paused rollout holds
// on its old revision keeps using the old chart pull secret after the version moved to
// a new one. Deleting the old secret turns the ProviderConfig's Ready False, naming the
// secret, the revision and the version, and brings the Kro back (the source secret's
// watch maps the secret to it through its revision), which reports the secret missing.
func TestAHeldKrosPullSecretIsChecked(t *testing.T) {
	g := withClusters(t)
	ctx := context.Background()
	oldSecret, newSecret := uniq("chart-old"), uniq("chart-new")
	for _, name := range []string{oldSecret, newSecret} {
		s := sourceSecret(g, name, corev1.SecretTypeDockerConfigJson, "cHVsbA==")
		t.Cleanup(func() { _ = client.IgnoreNotFound(platform.Client.Delete(context.Background(), s)) })
	}
	v := v1alpha1.KroVersion{Version: uniq("v-held"), ChartVersion: "0.9.3", ChartPullSecret: oldSecret}
	offerVersion(g, v)
	t.Cleanup(func() { withdrawVersion(NewWithT(t), v.Version) })
	k := readyKro(t, g, newNamespace(t, g), "cp-held", v.Version)
	setRollout(t, g, &v1alpha1.RolloutPolicy{MaxUnavailable: ptr.To(intstr.FromInt32(1))})
	before := mustRevisionName(g, providerName, &v)
	g.Eventually(func(g Gomega) { g.Expect(getKro(g, k).Status.Revision).To(Equal(before)) }, timeout, interval).Should(Succeed())

	// The version moves to the new secret; the paused rollout holds the Kro on the old.
	pauseRollouts(t, g)
	v.ChartPullSecret = newSecret
	offerVersion(g, v)
	after := mustRevisionName(g, providerName, &v)
	eventuallyCondition(g, k, v1alpha1.ConditionVersionResolved, metav1.ConditionTrue, v1alpha1.ReasonRolloutPending, before, after)
	eventuallyCondition(g, k, v1alpha1.ConditionPullSecretsReady, metav1.ConditionTrue, v1alpha1.ReasonReconcileSuccess, oldSecret)
	// The reconciles of the change pass, so that only the secret's watch can bring the
	// Kro back below.
	g.Consistently(func(g Gomega) {
		g.Expect(condition(getKro(g, k), v1alpha1.ConditionPullSecretsReady).Status).To(Equal(metav1.ConditionTrue))
	}, time.Second, 200*time.Millisecond).Should(Succeed())

	g.Expect(platform.Client.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: oldSecret, Namespace: podNamespace}})).To(Succeed())
	g.Eventually(func(g Gomega) {
		pc := &v1alpha1.ProviderConfig{}
		g.Expect(platform.Client.Get(ctx, client.ObjectKey{Name: providerName}, pc)).To(Succeed())
		ready := meta.FindStatusCondition(pc.Status.Conditions, v1alpha1.ConditionReady)
		g.Expect(ready).NotTo(BeNil())
		g.Expect(ready.Status).To(Equal(metav1.ConditionFalse), ready.Message)
		g.Expect(ready.Message).To(ContainSubstring(`secret %q (chart pull secret of revision %s of version %s) not found in namespace %s`,
			oldSecret, before, v.Version, podNamespace))
	}, timeout, interval).Should(Succeed())
	eventuallyCondition(g, k, v1alpha1.ConditionPullSecretsReady, metav1.ConditionFalse, v1alpha1.ReasonPullSecretMissing, oldSecret)
	// Still held back: the new secret is not what it uses.
	eventuallyCondition(g, k, v1alpha1.ConditionVersionResolved, metav1.ConditionTrue, v1alpha1.ReasonRolloutPending, before)
}

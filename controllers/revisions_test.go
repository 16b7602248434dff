package controllers

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
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
	name, err := revisionName(provider, v)
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

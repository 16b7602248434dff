//go:build e2e

package e2e

import (
	"strings"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
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
	"github.com/openmcp-project/service-provider-kro/test/e2e/env"
	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

// A deletion blocked by the tenant's work in the fault suite: an RGD and instances of its
// kind on the ControlPlane, the RGD deleted before the instances.

// deletionBlockedSpecs is the deletion of the Kro of the ControlPlane cpA returns while
// an RGD and its instances are there.
func deletionBlockedSpecs(cpA func() *env.ControlPlane) {
	It("deletion with an RGD and orphaned instances", func() {
		a := cpA()
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
}

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

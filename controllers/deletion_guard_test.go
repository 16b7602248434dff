package controllers

import (
	"context"
	"testing"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	. "github.com/onsi/gomega"
	clustersv1alpha1 "github.com/openmcp-project/openmcp-operator/api/clusters/v1alpha1"
	commonapi "github.com/openmcp-project/openmcp-operator/api/common"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/clusters"
	"github.com/openmcp-project/service-provider-kro/controllers/owned"
	"github.com/openmcp-project/service-provider-kro/controllers/step"
	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

// holdRelease puts helm-controller's finalizer on the Kro's HelmRelease, so that the
// test sees whether the provider deletes it for an uninstall or suspends it to drop it.
func holdRelease(g Gomega, k *v1alpha1.Kro) {
	hr := getHelmRelease(g, k)
	hr.Finalizers = append(hr.Finalizers, helmv2.HelmReleaseFinalizer)
	g.Expect(platform.Client.Update(context.Background(), hr)).To(Succeed())
}

// letReleaseGo plays helm-controller finishing with a deleted HelmRelease.
func letReleaseGo(g Gomega, k *v1alpha1.Kro) {
	g.Eventually(func(g Gomega) {
		hr := getHelmRelease(g, k)
		g.Expect(hr.DeletionTimestamp).NotTo(BeNil())
		hr.Finalizers = nil
		g.Expect(platform.Client.Update(context.Background(), hr)).To(Succeed())
	}, timeout, interval).Should(Succeed())
}

// TestKubeconfigReplacedDuringDeletion: a kubeconfig secret deleted and created again
// while a Kro is deleted is no proof that the ControlPlane is gone: kro is uninstalled
// (the HelmRelease is deleted, not suspended), and nothing says the ControlPlane is gone.
func TestKubeconfigReplacedDuringDeletion(t *testing.T) {
	g := withClusters(t)
	ctx := context.Background()
	ns := newNamespace(t, g)
	k := readyKro(t, g, ns, "replaced", baseVersion)
	tenant := tenantNamespace(g, k)
	holdRelease(g, k)
	access := &corev1.Secret{}
	g.Expect(platform.Client.Get(ctx, client.ObjectKey{Namespace: tenant, Name: "controlplane-access"}, access)).To(Succeed())
	rgd := newRGD(g, controlPlane.Client, uniq("kept"))

	g.Expect(platform.Client.Delete(ctx, access)).To(Succeed())
	deleteKro(g, k)
	eventuallyCondition(g, k, v1alpha1.ConditionDeletionBlocked, metav1.ConditionTrue, v1alpha1.ReasonControlPlaneAccessMissing, "missing since")
	// Recreated within the grace period: the ControlPlane is reached again, and its RGD
	// blocks the deletion as it should.
	g.Expect(platform.Client.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: access.Name, Labels: access.Labels}, Data: access.Data,
	})).To(Succeed())
	got := eventuallyCondition(g, k, v1alpha1.ConditionDeletionBlocked, metav1.ConditionTrue, v1alpha1.ReasonUserResourcesPresent, rgd.GetName())
	g.Expect(got.Status.AccessMissingSince).To(BeNil())
	time.Sleep(suiteAccessGrace + time.Second)
	hr := getHelmRelease(g, k)
	g.Expect(hr.Spec.Suspend).To(BeFalse(), "the release is not dropped once the access is back")
	g.Expect(hr.DeletionTimestamp).To(BeNil())

	g.Expect(controlPlane.Client.Delete(ctx, rgd)).To(Succeed())
	letReleaseGo(g, k)
	g.Expect(getHelmReleaseIfAny(g, k)).To(Or(BeNil(), WithTransform(func(hr *helmv2.HelmRelease) bool { return hr.Spec.Suspend }, BeFalse())))
	eventuallyGone(g, onboarding.Client, k)
	g.Expect(kroEvents(g, k)).NotTo(ContainElement(HavePrefix("Warning/" + v1alpha1.ReasonControlPlaneGone)))
}

func getHelmReleaseIfAny(g Gomega, k *v1alpha1.Kro) *helmv2.HelmRelease {
	hr := &helmv2.HelmRelease{}
	if err := platform.Client.Get(context.Background(), fluxKey(g, k), hr); err != nil {
		g.Expect(client.IgnoreNotFound(err)).To(Succeed())
		return nil
	}
	return hr
}

// kroKind creates a CRD on the ControlPlane as kro generates one for an RGD
// (testenv.KroGeneratedCRD) and returns an instance of it, not yet created.
func kroKind(t *testing.T, g Gomega, c client.Client, kind, rgd string) *unstructured.Unstructured {
	ctx := context.Background()
	crd, instance := testenv.KroGeneratedCRD(uniq("things"), kind, rgd)
	g.Expect(c.Create(ctx, crd)).To(Succeed())
	t.Cleanup(func() { _ = c.Delete(context.Background(), crd) })
	g.Eventually(func(g Gomega) {
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(crd), crd)).To(Succeed())
		established := false
		for _, cond := range crd.Status.Conditions {
			established = established || cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue
		}
		g.Expect(established).To(BeTrue())
		// Established is not yet served: the client's mapper must know the kind too, or a
		// create right after fails with "no matches for kind".
		_, err := c.RESTMapper().RESTMapping(instance.GroupVersionKind().GroupKind(), instance.GroupVersionKind().Version)
		g.Expect(err).NotTo(HaveOccurred())
	}, timeout, interval).Should(Succeed())
	return instance
}

// TestDeletionBlockedByOrphanedInstances: instances of a kind kro generated outlive their
// RGD (kro keeps the CRD). Uninstalling kro would leave them unable to finish, so the
// deletion waits, names the kind with its count and what to do, and goes on soon after
// the last one is deleted, without any watch on the kind.
func TestDeletionBlockedByOrphanedInstances(t *testing.T) {
	g := withClusters(t)
	ctx := context.Background()
	ns := newNamespace(t, g)
	k := readyKro(t, g, ns, "instances", baseVersion)
	holdRelease(g, k)
	rgd := newRGD(g, controlPlane.Client, uniq("webapp"))
	kind := "WebApp" + rgd.GetName()[len(rgd.GetName())-6:]
	instance := kroKind(t, g, controlPlane.Client, kind, rgd.GetName())
	var instances []*unstructured.Unstructured
	for _, name := range []string{"a", "b"} {
		u := instance.DeepCopy()
		u.SetName(name)
		g.Expect(controlPlane.Client.Create(ctx, u)).To(Succeed())
		instances = append(instances, u)
	}

	deleteKro(g, k)
	eventuallyCondition(g, k, v1alpha1.ConditionDeletionBlocked, metav1.ConditionTrue, v1alpha1.ReasonUserResourcesPresent,
		rgd.GetName(), "2 "+kind, "delete the instances first")
	// The RGD goes, its instances stay.
	g.Expect(controlPlane.Client.Delete(ctx, rgd)).To(Succeed())
	eventuallyCondition(g, k, v1alpha1.ConditionDeletionBlocked, metav1.ConditionTrue, v1alpha1.ReasonInstancesPresent,
		"2 "+kind, "RGD "+rgd.GetName(), "recreate the RGD")
	eventuallyEvent(g, k, "Warning/"+v1alpha1.ReasonInstancesPresent, kind)
	g.Expect(getHelmRelease(g, k).DeletionTimestamp).To(BeNil())

	g.Expect(controlPlane.Client.Delete(ctx, instances[0])).To(Succeed())
	eventuallyCondition(g, k, v1alpha1.ConditionDeletionBlocked, metav1.ConditionTrue, v1alpha1.ReasonInstancesPresent, "1 "+kind)
	g.Expect(controlPlane.Client.Delete(ctx, instances[1])).To(Succeed())
	deleted := time.Now()
	g.Eventually(func(g Gomega) {
		g.Expect(getHelmRelease(g, k).DeletionTimestamp).NotTo(BeNil())
	}, timeout, 100*time.Millisecond).Should(Succeed())
	t.Logf("last instance deleted → deletion released in %s", time.Since(deleted).Round(10*time.Millisecond))
	letReleaseGo(g, k)
	eventuallyGone(g, onboarding.Client, k)
}

// TestEveryConditionIsAlwaysPresent: a Kro stopped at its first step still carries every
// condition, the later ones Unknown with why they were not checked; what the provider
// made for an earlier version stays listed while it exists; the RGD summary goes while
// the RGDs are not read; and a deletion reports what still exists.
func TestEveryConditionIsAlwaysPresent(t *testing.T) {
	g := withClusters(t)
	ctx := context.Background()
	ns := newNamespace(t, g)
	k := readyKro(t, g, ns, "complete", baseVersion)
	g.Eventually(func(g Gomega) { g.Expect(getKro(g, k).Status.ResourceGraphDefinitions).NotTo(BeNil()) }, timeout, interval).Should(Succeed())
	sum := getKro(g, k).Status.ResourceGraphDefinitions
	g.Expect(sum.ObservedTime.IsZero()).To(BeFalse())

	patch := client.MergeFrom(getKro(g, k))
	changed := getKro(g, k)
	changed.Spec.Version = "v9.9.9"
	g.Expect(onboarding.Client.Patch(ctx, changed, patch)).To(Succeed())
	got := eventuallyCondition(g, k, v1alpha1.ConditionVersionResolved, metav1.ConditionFalse, v1alpha1.ReasonVersionNotOffered, "v9.9.9")
	g.Expect(condition(got, v1alpha1.ConditionReady).Reason).To(Equal(v1alpha1.ReasonReconcileError), "Ready keeps the seed's reason")
	types := make([]string, 0, len(got.Status.Conditions))
	for _, c := range got.Status.Conditions {
		types = append(types, c.Type)
	}
	g.Expect(types).To(Equal(step.ConditionsOf(v1alpha1.PlacementControlPlane)))
	for _, typ := range []string{v1alpha1.ConditionPullSecretsReady, v1alpha1.ConditionOCIRepositoryReady, v1alpha1.ConditionControlPlaneAccessReady,
		v1alpha1.ConditionHelmReleaseReady, v1alpha1.ConditionResourceGraphDefinitionsReady} {
		c := condition(got, typ)
		g.Expect(c.Status).To(Equal(metav1.ConditionUnknown), typ)
		g.Expect(c.Reason).To(Equal(v1alpha1.ReasonNotChecked), typ)
		g.Expect(c.Message).To(Equal("not checked: VersionResolved is False (VersionNotOffered)"), typ)
	}
	g.Expect(condition(got, v1alpha1.ConditionDeletionBlocked).Status).To(Equal(metav1.ConditionFalse))
	g.Expect(got.Status.ResourceGraphDefinitions).To(BeNil(), "not read, so not reported")
	kinds := func(k *v1alpha1.Kro) []string {
		var out []string
		for _, m := range k.Status.ManagedResources {
			out = append(out, m.Cluster+"/"+m.Kind)
		}
		return out
	}
	g.Expect(kinds(got)).To(ContainElements(clusters.Platform+"/OCIRepository", clusters.Platform+"/HelmRelease"),
		"the objects of the last version still exist and are listed")

	// Deleting: what still exists is listed until it is gone.
	holdRelease(g, k)
	deleteKro(g, k)
	g.Eventually(func(g Gomega) {
		got := getKro(g, k)
		g.Expect(got.Status.Phase).To(Equal(v1alpha1.PhaseTerminating))
		g.Expect(kinds(got)).To(ContainElement(clusters.Platform + "/HelmRelease"))
		g.Expect(condition(got, v1alpha1.ConditionVersionResolved).Message).To(Equal("not checked: the Kro is being deleted"))
	}, timeout, interval).Should(Succeed())
	letReleaseGo(g, k)
	eventuallyGone(g, onboarding.Client, k)
}

// TestOpenMCPGoneIsDecidedByTheClusterRequest: under openmcp a missing access secret is
// no proof that the ControlPlane is gone, and the deletion waits; the ControlPlane's
// ClusterRequest being deleted is, and kro is dropped without an uninstall.
func TestOpenMCPGoneIsDecidedByTheClusterRequest(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	env := startOpenMCP(t, g)
	g.Expect(env.onboarding.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "project-a"}})).To(Succeed())
	k := &v1alpha1.Kro{ObjectMeta: metav1.ObjectMeta{Namespace: "project-a", Name: "cp-gone"}, Spec: v1alpha1.KroSpec{Version: baseVersion}}
	g.Expect(env.onboarding.Client.Create(ctx, k)).To(Succeed())
	tenant, err := owned.TenantNamespace(k)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(client.IgnoreAlreadyExists(env.platform.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tenant}}))).To(Succeed())
	cr := &clustersv1alpha1.ClusterRequest{ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: k.Name, Finalizers: []string{"test/hold"}},
		Spec: clustersv1alpha1.ClusterRequestSpec{Purpose: "mcp"}}
	g.Expect(env.platform.Client.Create(ctx, cr)).To(Succeed())
	want, err := clusters.NewAccessRequest(providerName, client.ObjectKeyFromObject(k))
	g.Expect(err).NotTo(HaveOccurred())
	ar := &clustersv1alpha1.AccessRequest{}
	g.Eventually(func() error { return env.platform.Client.Get(ctx, client.ObjectKeyFromObject(want), ar) }, timeout, interval).Should(Succeed())
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: "cp-gone.kubeconfig"}, Data: map[string][]byte{owned.KubeconfigKey: env.controlPlane.Kubeconfig}}
	g.Expect(env.platform.Client.Create(ctx, secret)).To(Succeed())
	ar.Status.Phase = clustersv1alpha1.REQUEST_GRANTED
	ar.Status.SecretRef = &commonapi.LocalObjectReference{Name: secret.Name}
	g.Expect(env.platform.Client.Status().Update(ctx, ar)).To(Succeed())
	hr := getHelmReleaseOn(g, env.platform, tenant)
	hr.Finalizers = append(hr.Finalizers, helmv2.HelmReleaseFinalizer)
	g.Expect(env.platform.Client.Update(ctx, hr)).To(Succeed())

	kroCond := func(g Gomega, typ string) *metav1.Condition {
		got := &v1alpha1.Kro{}
		g.Expect(env.onboarding.Client.Get(ctx, client.ObjectKeyFromObject(k), got)).To(Succeed())
		c := condition(got, typ)
		g.Expect(c).NotTo(BeNil())
		return c
	}
	g.Expect(env.platform.Client.Delete(ctx, secret)).To(Succeed())
	g.Expect(env.onboarding.Client.Delete(ctx, k)).To(Succeed())
	g.Eventually(func(g Gomega) {
		c := kroCond(g, v1alpha1.ConditionDeletionBlocked)
		g.Expect(c.Status).To(Equal(metav1.ConditionTrue), c.Message)
		g.Expect(c.Message).To(ContainSubstring("does not exist"))
	}, timeout, interval).Should(Succeed())
	g.Consistently(func(g Gomega) {
		hr := getHelmReleaseOn(g, env.platform, tenant)
		g.Expect(hr.Spec.Suspend).To(BeFalse())
		g.Expect(hr.DeletionTimestamp).To(BeNil())
	}, 2*time.Second, 200*time.Millisecond).Should(Succeed())

	// The ControlPlane is being deleted: its ClusterRequest says so.
	g.Expect(env.platform.Client.Delete(ctx, cr)).To(Succeed())
	g.Eventually(func(g Gomega) {
		hr := getHelmReleaseOn(g, env.platform, tenant)
		g.Expect(hr.Spec.Suspend).To(BeTrue())
		g.Expect(hr.DeletionTimestamp).NotTo(BeNil())
		c := kroCond(g, v1alpha1.ConditionDeletionBlocked)
		g.Expect(c.Reason).To(Equal(v1alpha1.ReasonControlPlaneGone), c.Message)
		g.Expect(c.Message).To(ContainSubstring("ClusterRequest " + tenant + "/" + k.Name + " is being deleted"))
	}, timeout, interval).Should(Succeed())
	hr = getHelmReleaseOn(g, env.platform, tenant)
	hr.Finalizers = nil
	g.Expect(env.platform.Client.Update(ctx, hr)).To(Succeed())
	eventuallyGone(g, env.onboarding.Client, k)
	eventuallyGone(g, env.platform.Client, want)
}

package controllers

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	krov1alpha1 "github.com/kubernetes-sigs/kro/api/v1alpha1"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/owned"
	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

// The suite's pollInterval is ten minutes: everything these tests wait for comes by watch
// from the ControlPlanes' engaged caches.

// startControlPlane starts an extra ControlPlane for one test.
func startControlPlane(t *testing.T, g Gomega, name string, withKro bool) *testenv.Cluster {
	t.Helper()
	o := testenv.ClusterOptions{Name: name}
	if withKro {
		dir, err := testenv.KroCRDDir(context.Background())
		g.Expect(err).NotTo(HaveOccurred())
		o.CRDDirs = []string{dir}
	}
	cs, err := testenv.StartClusters(context.Background(), o)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { testenv.StopClusters(cs...) })
	return cs[0]
}

func rgdSummary(g Gomega, k *v1alpha1.Kro) *v1alpha1.ResourceGraphDefinitionSummary {
	got := getKro(g, k)
	g.Expect(got.Status.ResourceGraphDefinitions).NotTo(BeNil())
	return got.Status.ResourceGraphDefinitions
}

// setRGDReady sets an RGD's Ready condition through its status, the way kro does.
func setRGDReady(g Gomega, c client.Client, name string, status metav1.ConditionStatus, reason, message string) {
	g.Eventually(func(g Gomega) {
		rgd := &krov1alpha1.ResourceGraphDefinition{}
		g.Expect(c.Get(context.Background(), client.ObjectKey{Name: name}, rgd)).To(Succeed())
		rgd.Status.Conditions = krov1alpha1.Conditions{{
			Type: "Ready", Status: status, Reason: &reason, Message: &message,
			LastTransitionTime: &metav1.Time{Time: time.Now()}, ObservedGeneration: rgd.Generation,
		}}
		g.Expect(c.Status().Update(context.Background(), rgd)).To(Succeed())
	}, timeout, interval).Should(Succeed())
}

func TestLastRGDDeletedReleasesTheDeletionByWatch(t *testing.T) {
	g := withClusters(t)
	ctx := context.Background()
	ns := newNamespace(t, g)
	k := readyKro(t, g, ns, "guarded", baseVersion)
	rgd := newRGD(g, controlPlane.Client, uniq("last"))

	deleteKro(g, k)
	eventuallyCondition(g, k, v1alpha1.ConditionDeletionBlocked, metav1.ConditionTrue, v1alpha1.ReasonUserResourcesPresent, "1 ResourceGraphDefinitions", rgd.GetName())

	deleted := time.Now()
	g.Expect(controlPlane.Client.Delete(ctx, rgd)).To(Succeed())
	eventuallyGone(g, onboarding.Client, k)
	t.Logf("last RGD deleted -> Kro gone in %s (pollInterval %s)", time.Since(deleted).Round(time.Millisecond), suitePollInterval)
}

func TestReplicatedSecretOnControlPlaneIsRestored(t *testing.T) {
	g := withClusters(t)
	ctx := context.Background()
	ns := newNamespace(t, g)
	version, image := uniq("v1"), uniq("image")
	sourceSecret(g, image, corev1.SecretTypeDockerConfigJson, "original")
	offerVersion(g, v1alpha1.KroVersion{Version: version, ChartVersion: "0.9.3", HelmValues: helmValues(image)})
	readyKro(t, g, ns, "repaired", version)
	key := client.ObjectKey{Namespace: owned.KroNamespace, Name: image}
	cp := &corev1.Secret{}
	g.Expect(controlPlane.Client.Get(ctx, key, cp)).To(Succeed())
	want := cp.Data[corev1.DockerConfigJsonKey]

	deleted := time.Now()
	g.Expect(controlPlane.Client.Delete(ctx, cp)).To(Succeed())
	g.Eventually(func(g Gomega) {
		got := &corev1.Secret{}
		g.Expect(controlPlane.Client.Get(ctx, key, got)).To(Succeed())
		g.Expect(got.UID).NotTo(Equal(cp.UID))
		g.Expect(got.Data[corev1.DockerConfigJsonKey]).To(Equal(want))
	}, timeout, interval).Should(Succeed())
	t.Logf("copy deleted on the ControlPlane -> restored in %s", time.Since(deleted).Round(time.Millisecond))

	// An edit is undone as well.
	g.Expect(controlPlane.Client.Get(ctx, key, cp)).To(Succeed())
	cp.Data[corev1.DockerConfigJsonKey] = []byte(`{"auths":{}}`)
	g.Expect(controlPlane.Client.Update(ctx, cp)).To(Succeed())
	g.Eventually(func(g Gomega) {
		got := &corev1.Secret{}
		g.Expect(controlPlane.Client.Get(ctx, key, got)).To(Succeed())
		g.Expect(got.Data[corev1.DockerConfigJsonKey]).To(Equal(want))
	}, timeout, interval).Should(Succeed())
}

func TestRGDReadinessInTheKroStatus(t *testing.T) {
	g := withClusters(t)
	ctx := context.Background()
	ns := newNamespace(t, g)
	k := readyKro(t, g, ns, "tenant-view", baseVersion)
	g.Eventually(func(g Gomega) { g.Expect(rgdSummary(g, k).Total).To(BeZero()) }, timeout, interval).Should(Succeed())
	k = eventuallyCondition(g, k, v1alpha1.ConditionResourceGraphDefinitionsReady, metav1.ConditionTrue, v1alpha1.ReasonReconcileSuccess, "0 ResourceGraphDefinitions")

	good, bad := newRGD(g, controlPlane.Client, uniq("good")), newRGD(g, controlPlane.Client, uniq("bad"))
	t.Cleanup(func() {
		_ = controlPlane.Client.Delete(ctx, good)
		_ = controlPlane.Client.Delete(ctx, bad)
	})
	setRGDReady(g, controlPlane.Client, good.GetName(), metav1.ConditionTrue, "Ready", "")
	setRGDReady(g, controlPlane.Client, bad.GetName(), metav1.ConditionFalse, "InvalidResourceGraph", "resource web: unknown field spec.replica")

	k = eventuallyCondition(g, k, v1alpha1.ConditionResourceGraphDefinitionsReady, metav1.ConditionFalse, v1alpha1.ReasonResourceGraphDefinitionsNotReady,
		"1 of 2 ResourceGraphDefinitions", bad.GetName()+" (InvalidResourceGraph)")
	g.Expect(k.Status.ResourceGraphDefinitions.ObservedTime.IsZero()).To(BeFalse(), "the figures carry the time they were observed")
	g.Expect(k.Status.ResourceGraphDefinitions).To(Equal(&v1alpha1.ResourceGraphDefinitionSummary{
		ObservedTime: k.Status.ResourceGraphDefinitions.ObservedTime, Total: 2, Ready: 1,
		NotReady: []v1alpha1.ResourceGraphDefinitionState{{Name: bad.GetName(), Reason: "InvalidResourceGraph", Message: "resource web: unknown field spec.replica"}},
	}))
	// The tenant's definitions do not make kro's installation less ready.
	g.Expect(k.Status.Phase).To(Equal(v1alpha1.PhaseReady))

	g.Expect(controlPlane.Client.Delete(ctx, bad)).To(Succeed())
	eventuallyCondition(g, k, v1alpha1.ConditionResourceGraphDefinitionsReady, metav1.ConditionTrue, v1alpha1.ReasonReconcileSuccess, "1 ResourceGraphDefinitions on the ControlPlane, all Ready")
	sum := rgdSummary(g, k)
	g.Expect(sum).To(Equal(&v1alpha1.ResourceGraphDefinitionSummary{ObservedTime: sum.ObservedTime, Total: 1, Ready: 1}))
}

func TestRGDCRDInstalledAfterEngagement(t *testing.T) {
	g := withClusters(t)
	ctx := context.Background()
	late := startControlPlane(t, g, "late-kro", false)
	ns := newNamespace(t, g)
	k := readyKroOn(t, g, late, ns, "late", baseVersion)
	k = eventuallyCondition(g, k, v1alpha1.ConditionResourceGraphDefinitionsReady, metav1.ConditionTrue, v1alpha1.ReasonReconcileSuccess, "0 ResourceGraphDefinitions")

	dir, err := testenv.KroCRDDir(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(testenv.InstallCRDDir(ctx, late, dir)).To(Succeed())
	rgd := newRGD(g, late.Client, uniq("first"))
	g.Eventually(func(g Gomega) { g.Expect(rgdSummary(g, k).Total).To(Equal(int32(1))) }, timeout, interval).Should(Succeed())
	eventuallyCondition(g, k, v1alpha1.ConditionResourceGraphDefinitionsReady, metav1.ConditionFalse, v1alpha1.ReasonResourceGraphDefinitionsNotReady, rgd.GetName()+" (Pending)")
}

func TestUnreachableControlPlane(t *testing.T) {
	g := withClusters(t)
	ctx := context.Background()
	flaky := startControlPlane(t, g, "flaky", true)
	ns := newNamespace(t, g)
	version, image := uniq("v1"), uniq("image")
	sourceSecret(g, image, corev1.SecretTypeDockerConfigJson, "x")
	offerVersion(g, v1alpha1.KroVersion{Version: version, ChartVersion: "0.9.3", HelmValues: helmValues(image)})
	down := readyKroOn(t, g, flaky, ns, "down", version)
	up := readyKro(t, g, ns, "up", version)

	g.Expect(flaky.StopAPIServer()).To(Succeed())
	down = eventuallyCondition(g, down, v1alpha1.ConditionControlPlaneAccessReady, metav1.ConditionFalse, v1alpha1.ReasonControlPlaneUnreachable, "the ControlPlane does not answer", "connection refused")
	g.Expect(down.Status.Phase).To(Equal(v1alpha1.PhaseProgressing))
	g.Expect(condition(down, v1alpha1.ConditionReady).Message).To(ContainSubstring("does not answer"))

	// The other ControlPlane keeps being looked after.
	key := client.ObjectKey{Namespace: owned.KroNamespace, Name: image}
	g.Expect(controlPlane.Client.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}})).To(Succeed())
	g.Eventually(func() error { return controlPlane.Client.Get(ctx, key, &corev1.Secret{}) }, timeout, interval).Should(Succeed())
	g.Expect(condition(getKro(g, up), v1alpha1.ConditionReady).Status).To(Equal(metav1.ConditionTrue))

	// Deleting while the ControlPlane cannot be checked holds, and says why.
	deleteKro(g, down)
	eventuallyCondition(g, down, v1alpha1.ConditionDeletionBlocked, metav1.ConditionTrue, v1alpha1.ReasonControlPlaneUnreachable, "cannot check the ControlPlane", "does not answer")
	g.Consistently(func(g Gomega) {
		g.Expect(getHelmRelease(g, down).DeletionTimestamp).To(BeNil())
	}, time.Second, 200*time.Millisecond).Should(Succeed())

	// Back again: no RGDs there, so the deletion goes through.
	g.Expect(flaky.StartAPIServer()).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(onboarding.Client.Get(ctx, client.ObjectKeyFromObject(down), &v1alpha1.Kro{}))
	}, 40*time.Second, interval).Should(BeTrue(), "the Kro is deleted once its ControlPlane answers again")
	eventuallyGone(g, flaky.Client, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}})
}

func TestRotatedKubeconfigWithRevokedToken(t *testing.T) {
	g := withClusters(t)
	ctx := context.Background()
	cp := startControlPlane(t, g, "rotating", true)
	first, err := cp.TokenKubeconfig(ctx, "provider-a")
	g.Expect(err).NotTo(HaveOccurred())
	ns := newNamespace(t, g)
	version, image := uniq("v1"), uniq("image")
	sourceSecret(g, image, corev1.SecretTypeDockerConfigJson, "x")
	offerVersion(g, v1alpha1.KroVersion{Version: version, ChartVersion: "0.9.3", HelmValues: helmValues(image)})

	k := newKro(g, ns, "rotating", version)
	tenant := tenantNamespace(g, k)
	g.Expect(client.IgnoreAlreadyExists(platform.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tenant}}))).To(Succeed())
	access := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "controlplane-access", Namespace: tenant, Labels: map[string]string{v1alpha1.LabelControlPlaneKubeconfig: "true"}},
		Data:       map[string][]byte{owned.KubeconfigKey: first},
	}
	g.Expect(platform.Client.Create(ctx, access)).To(Succeed())
	g.Eventually(func(g Gomega) { getHelmRelease(g, k) }, timeout, interval).Should(Succeed())
	key := client.ObjectKey{Namespace: owned.KroNamespace, Name: image}
	g.Eventually(func() error { return cp.Client.Get(ctx, key, &corev1.Secret{}) }, timeout, interval).Should(Succeed())

	second, err := cp.TokenKubeconfig(ctx, "provider-b")
	g.Expect(err).NotTo(HaveOccurred())
	access.Data[owned.KubeconfigKey] = second
	g.Expect(platform.Client.Update(ctx, access)).To(Succeed())
	g.Expect(cp.RevokeToken(ctx, "provider-a")).To(Succeed())

	// With the first token revoked, only the new credentials can restore the copy.
	g.Expect(cp.Client.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}})).To(Succeed())
	g.Eventually(func() error { return cp.Client.Get(ctx, key, &corev1.Secret{}) }, timeout, interval).Should(Succeed())
	k = eventuallyCondition(g, k, v1alpha1.ConditionControlPlaneAccessReady, metav1.ConditionTrue, v1alpha1.ReasonReconcileSuccess)
	g.Expect(getHelmRelease(g, k).Spec.KubeConfig.SecretRef.Name).To(Equal("controlplane-access"))
}

func TestForceDeletedKroIsDisengaged(t *testing.T) {
	g := withClusters(t)
	ctx := context.Background()
	engaged := func(g Gomega) float64 {
		return metricValue(g, "service_provider_kro_controlplanes", map[string]string{"phase": "Engaged"})
	}
	ns := newNamespace(t, g)
	k := readyKro(t, g, ns, "forced", baseVersion)
	before := engaged(g)

	// Someone removes the finalizer by hand and the Kro goes without cleanup.
	k = getKro(g, k)
	k.Finalizers = nil
	g.Expect(onboarding.Client.Update(ctx, k)).To(Succeed())
	deleteKro(g, k)
	eventuallyGone(g, onboarding.Client, k)
	g.Eventually(engaged, timeout, interval).Should(Equal(before - 1))
}

func TestBrokenKubeconfigIsReported(t *testing.T) {
	g := withClusters(t)
	ctx := context.Background()
	ns := newNamespace(t, g)
	k := newKro(g, ns, "broken-access", baseVersion)
	tenant := tenantNamespace(g, k)
	g.Expect(client.IgnoreAlreadyExists(platform.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tenant}}))).To(Succeed())
	access := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "controlplane-access", Namespace: tenant, Labels: map[string]string{v1alpha1.LabelControlPlaneKubeconfig: "true"}},
		Data:       map[string][]byte{owned.KubeconfigKey: []byte("apiVersion: v1\nclusters: [oops")},
	}
	g.Expect(platform.Client.Create(ctx, access)).To(Succeed())
	k = eventuallyCondition(g, k, v1alpha1.ConditionControlPlaneAccessReady, metav1.ConditionFalse, v1alpha1.ReasonKubeconfigInvalid,
		"kubeconfig in secret "+tenant+"/controlplane-access is unusable", "cannot be parsed")
	g.Expect(string(mustJSON(g, k.Status))).NotTo(ContainSubstring("oops"), "the secret's content stays out of the status")

	// Fixed by writing a working kubeconfig.
	access.Data[owned.KubeconfigKey] = controlPlane.Kubeconfig
	g.Expect(platform.Client.Update(ctx, access)).To(Succeed())
	eventuallyCondition(g, k, v1alpha1.ConditionControlPlaneAccessReady, metav1.ConditionTrue, v1alpha1.ReasonReconcileSuccess)
}

func mustJSON(g Gomega, v any) []byte {
	data, err := json.Marshal(v)
	g.Expect(err).NotTo(HaveOccurred())
	return data
}

func TestEditedFluxObjectIsRepairedAndIdleSendsNoApply(t *testing.T) {
	g := withClusters(t)
	ctx := context.Background()
	ns := newNamespace(t, g)
	k := readyKro(t, g, ns, "drift", baseVersion)

	hr := getHelmRelease(g, k)
	want := hr.Spec.ReleaseName
	rv := hr.ResourceVersion
	// Nothing to change: the provider does not even apply (the resourceVersion stays, and
	// no other manager's entry appears).
	g.Consistently(func(g Gomega) { g.Expect(getHelmRelease(g, k).ResourceVersion).To(Equal(rv)) }, time.Second, 200*time.Millisecond).Should(Succeed())

	hr.Spec.ReleaseName = "someone-elses"
	g.Expect(platform.Client.Update(ctx, hr)).To(Succeed())
	g.Eventually(func(g Gomega) { g.Expect(getHelmRelease(g, k).Spec.ReleaseName).To(Equal(want)) }, timeout, interval).Should(Succeed())
}

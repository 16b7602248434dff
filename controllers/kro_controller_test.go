package controllers

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	. "github.com/onsi/gomega"
	"github.com/openmcp-project/openmcp-operator/api/constants"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/owned"
)

func TestHappyPathToReady(t *testing.T) {
	g := withClusters(t)
	ctx := context.Background()
	ns := newNamespace(t, g)
	version := uniq("v1")
	chartSecret, imageSecret := uniq("chart-pull"), uniq("image-pull")
	sourceSecret(g, chartSecret, corev1.SecretTypeDockerConfigJson, "Y2hhcnQ=")
	sourceSecret(g, imageSecret, corev1.SecretTypeDockerConfigJson, "aW1hZ2U=")
	offerVersion(g, v1alpha1.KroVersion{
		Version: version, ChartVersion: "0.9.3", ChartURL: "registry.example.com/charts/kro",
		ChartPullSecret: chartSecret, HelmValues: helmValues(imageSecret),
	})

	k := newKro(g, ns, "cp-1", version)
	// Without access to the ControlPlane, the Kro says what it waits for. The chart source
	// waits with it: it is applied together with the HelmRelease.
	k = eventuallyCondition(g, k, v1alpha1.ConditionControlPlaneAccessReady, metav1.ConditionFalse, v1alpha1.ReasonControlPlaneAccessMissing, "kubeconfig", v1alpha1.LabelControlPlaneKubeconfig)
	g.Expect(k.Status.Phase).To(Equal(v1alpha1.PhaseProgressing))
	g.Expect(condition(k, v1alpha1.ConditionOCIRepositoryReady).Message).To(Equal("not checked: ControlPlaneAccessReady is False (ControlPlaneAccessMissing)"))
	g.Expect(apierrors.IsNotFound(platform.Client.Get(ctx, fluxKey(g, k), &sourcev1.OCIRepository{}))).To(BeTrue(), "no OCIRepository before the ControlPlane can be reached")

	tenant := tenantNamespace(g, k)
	// The tenant namespace did not exist: the provider created it, labelled as its own.
	tenantNS := &corev1.Namespace{}
	g.Expect(platform.Client.Get(ctx, client.ObjectKey{Name: tenant}, tenantNS)).To(Succeed())
	g.Expect(tenantNS.Labels).To(HaveKeyWithValue(v1alpha1.LabelManagedBy, v1alpha1.ManagedByValue))

	copied := &corev1.Secret{}
	g.Expect(platform.Client.Get(ctx, client.ObjectKey{Namespace: tenant, Name: providerName + "-" + chartSecret}, copied)).To(Succeed())
	g.Expect(copied.Type).To(Equal(corev1.SecretTypeDockerConfigJson))
	g.Expect(string(copied.Data[corev1.DockerConfigJsonKey])).To(ContainSubstring("Y2hhcnQ="))
	g.Expect(copied.Labels).To(HaveKeyWithValue(v1alpha1.LabelRole, v1alpha1.RoleChartPullSecret))

	grantAccess(g, k, controlPlane)
	g.Eventually(func(g Gomega) { getHelmRelease(g, k) }, timeout, interval).Should(Succeed())
	repo := getOCIRepository(g, k)
	g.Expect(repo.Spec.URL).To(Equal("oci://registry.example.com/charts/kro"))
	g.Expect(repo.Spec.Reference).To(Equal(&sourcev1.OCIRepositoryRef{Tag: "0.9.3"}))
	g.Expect(repo.Spec.SecretRef).NotTo(BeNil())
	g.Expect(repo.Spec.SecretRef.Name).To(Equal(providerName + "-" + chartSecret))
	g.Expect(repo.Spec.Interval.Duration).To(Equal(suitePollInterval))
	g.Expect(repo.Labels).To(HaveKeyWithValue(v1alpha1.LabelKroName, "cp-1"))
	g.Expect(repo.Labels).To(HaveKeyWithValue(v1alpha1.LabelKroNamespace, ns))
	g.Expect(repo.Labels).To(HaveKeyWithValue(v1alpha1.LabelManagedBy, v1alpha1.ManagedByValue))

	hr := getHelmRelease(g, k)
	g.Expect(hr.Spec.ChartRef).To(Equal(&helmv2.CrossNamespaceSourceReference{APIVersion: "source.toolkit.fluxcd.io/v1", Kind: "OCIRepository", Name: repo.Name}))
	g.Expect(hr.Spec.KubeConfig.SecretRef.Name).To(Equal("controlplane-access"))
	g.Expect(hr.Spec.KubeConfig.SecretRef.Key).To(Equal(owned.KubeconfigKey))
	g.Expect(hr.Spec.ReleaseName).To(Equal("kro"))
	g.Expect(hr.Spec.TargetNamespace).To(Equal("kro-system"))
	g.Expect(hr.Spec.StorageNamespace).To(Equal("kro-system"))
	g.Expect(hr.Spec.Install.CreateNamespace).To(BeTrue())
	g.Expect(hr.Spec.Install.CRDs).To(Equal(helmv2.CreateReplace))
	g.Expect(hr.Spec.Upgrade.CRDs).To(Equal(helmv2.CreateReplace))
	g.Expect(hr.Spec.Upgrade.CleanupOnFail).To(BeTrue())
	g.Expect(hr.Spec.Upgrade.Remediation.Retries).To(BeNumerically(">", 0))
	g.Expect(*hr.Spec.Upgrade.Remediation.Strategy).To(Equal(helmv2.RollbackRemediationStrategy))
	g.Expect(hr.Spec.Install.Remediation.Retries).To(BeNumerically(">", 0))
	g.Expect(hr.Spec.Interval.Duration).To(Equal(suitePollInterval))
	g.Expect(string(hr.Spec.Values.Raw)).To(ContainSubstring(`"logLevel":"debug"`))
	g.Expect(string(hr.Spec.Values.Raw)).To(ContainSubstring(imageSecret))

	imageCopy := &corev1.Secret{}
	g.Eventually(func() error {
		return controlPlane.Client.Get(ctx, client.ObjectKey{Namespace: owned.KroNamespace, Name: imageSecret}, imageCopy)
	}, timeout, interval).Should(Succeed())
	g.Expect(string(imageCopy.Data[corev1.DockerConfigJsonKey])).To(ContainSubstring("aW1hZ2U="))
	g.Expect(imageCopy.Labels).To(HaveKeyWithValue(v1alpha1.LabelManagedBy, v1alpha1.ManagedByValue))

	// Flux has not reported yet: Progressing, waiting for the HelmRelease.
	k = eventuallyCondition(g, k, v1alpha1.ConditionHelmReleaseReady, metav1.ConditionUnknown, v1alpha1.ReasonReconciling, "waiting for Flux")
	g.Expect(k.Status.Phase).To(Equal(v1alpha1.PhaseProgressing))

	// The OCIRepository alone does not make the Kro Ready.
	fluxReady(g, repo, metav1.ConditionTrue, "stored artifact")
	k = eventuallyCondition(g, k, v1alpha1.ConditionOCIRepositoryReady, metav1.ConditionTrue, v1alpha1.ReasonReconcileSuccess)
	g.Expect(condition(k, v1alpha1.ConditionReady).Status).To(Equal(metav1.ConditionFalse))

	// A failing release shows through, within a second and without polling.
	fluxReady(g, hr, metav1.ConditionFalse, "install retries exhausted")
	g.Eventually(func(g Gomega) {
		k := getKro(g, k)
		g.Expect(condition(k, v1alpha1.ConditionHelmReleaseReady).Message).To(ContainSubstring("install retries exhausted"))
	}, 2*time.Second, 50*time.Millisecond).Should(Succeed())

	start := time.Now()
	fluxReady(g, hr, metav1.ConditionTrue, "Helm install succeeded")
	k = eventuallyCondition(g, k, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReconcileSuccess)
	g.Expect(time.Since(start)).To(BeNumerically("<", 3*time.Second))
	g.Expect(k.Status.Phase).To(Equal(v1alpha1.PhaseReady))
	g.Expect(k.Status.ObservedGeneration).To(Equal(k.Generation))
	g.Expect(k.Status.ChartVersion).To(Equal("0.9.3"))
	g.Expect(k.Finalizers).To(ContainElement(v1alpha1.Finalizer))
	for _, typ := range []string{v1alpha1.ConditionVersionResolved, v1alpha1.ConditionPullSecretsReady, v1alpha1.ConditionOCIRepositoryReady, v1alpha1.ConditionControlPlaneAccessReady, v1alpha1.ConditionHelmReleaseReady} {
		g.Expect(condition(k, typ)).NotTo(BeNil(), typ)
		g.Expect(condition(k, typ).Status).To(Equal(metav1.ConditionTrue), typ)
	}
	g.Expect(k.Status.ManagedResources).To(ContainElements(
		v1alpha1.ManagedResource{Cluster: "platform", APIVersion: "v1", Kind: "Secret", Namespace: tenant, Name: providerName + "-" + chartSecret, Ready: metav1.ConditionTrue},
		v1alpha1.ManagedResource{Cluster: "platform", APIVersion: "source.toolkit.fluxcd.io/v1", Kind: "OCIRepository", Namespace: tenant, Name: providerName, Ready: metav1.ConditionTrue, Message: "stored artifact"},
		v1alpha1.ManagedResource{Cluster: "controlplane", APIVersion: "v1", Kind: "Secret", Namespace: owned.KroNamespace, Name: imageSecret, Ready: metav1.ConditionTrue},
		v1alpha1.ManagedResource{Cluster: "platform", APIVersion: "helm.toolkit.fluxcd.io/v2", Kind: "HelmRelease", Namespace: tenant, Name: providerName, Ready: metav1.ConditionTrue, Message: "Helm install succeeded"},
	))

	// Events on transitions, with the condition reasons.
	eventuallyEvent(g, k, "Normal/"+v1alpha1.ReasonControlPlaneAccessMissing, v1alpha1.ConditionControlPlaneAccessReady)
	eventuallyEvent(g, k, "Warning/"+v1alpha1.ReasonReleaseFailed, v1alpha1.ConditionHelmReleaseReady, "install retries exhausted")
	eventuallyEvent(g, k, "Normal/"+v1alpha1.ReasonReconcileSuccess)
	// No secret material anywhere in the status or the events.
	statusJSON, err := json.Marshal(k.Status)
	g.Expect(err).NotTo(HaveOccurred())
	raw := string(statusJSON)
	for _, e := range kroEvents(g, k) {
		raw += e
	}
	g.Expect(raw).NotTo(ContainSubstring("Y2hhcnQ="))
	g.Expect(raw).NotTo(ContainSubstring("aW1hZ2U="))
}

func TestIdleReconcileWritesNothing(t *testing.T) {
	g := withClusters(t)
	ctx := context.Background()
	ns := newNamespace(t, g)
	version := uniq("v1")
	chartSecret, imageSecret := uniq("chart-pull"), uniq("image-pull")
	sourceSecret(g, chartSecret, corev1.SecretTypeDockerConfigJson, "a")
	sourceSecret(g, imageSecret, corev1.SecretTypeDockerConfigJson, "b")
	offerVersion(g, v1alpha1.KroVersion{Version: version, ChartVersion: "0.9.3", ChartPullSecret: chartSecret, HelmValues: helmValues(imageSecret)})
	k := readyKro(t, g, ns, "idle", version)
	tenant := tenantNamespace(g, k)

	objects := map[string]struct {
		c   client.Client
		obj client.Object
	}{
		"ocirepository": {platform.Client, &sourcev1.OCIRepository{ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: providerName}}},
		"helmrelease":   {platform.Client, &helmv2.HelmRelease{ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: providerName}}},
		"chart copy":    {platform.Client, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: providerName + "-" + chartSecret}}},
		"image copy":    {controlPlane.Client, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: owned.KroNamespace, Name: imageSecret}}},
		"tenant ns":     {platform.Client, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tenant}}},
	}
	versions := func(g Gomega) map[string]string {
		out := map[string]string{}
		for name, o := range objects {
			g.Expect(o.c.Get(ctx, client.ObjectKeyFromObject(o.obj), o.obj)).To(Succeed())
			out[name] = o.obj.GetResourceVersion()
		}
		return out
	}
	// Let the reconciles caused by the test's own status writes settle.
	var before map[string]string
	g.Eventually(func(g Gomega) {
		first := versions(g)
		time.Sleep(time.Second)
		g.Expect(versions(g)).To(Equal(first))
		before = first
	}, timeout, interval).Should(Succeed())
	kroBefore := getKro(g, k)

	// A forced reconcile (the operation annotation) runs every step and applies every object again.
	patch := client.MergeFrom(kroBefore.DeepCopy())
	annotated := kroBefore.DeepCopy()
	annotated.Annotations = map[string]string{constants.OperationAnnotation: constants.OperationAnnotationValueReconcile}
	g.Expect(onboarding.Client.Patch(ctx, annotated, patch)).To(Succeed())
	var consumedRV string
	g.Eventually(func(g Gomega) {
		got := getKro(g, k)
		g.Expect(got.Annotations).NotTo(HaveKey(constants.OperationAnnotation))
		consumedRV = got.ResourceVersion
	}, timeout, interval).Should(Succeed())

	g.Consistently(func(g Gomega) {
		g.Expect(versions(g)).To(Equal(before))
		after := getKro(g, k)
		g.Expect(after.Status).To(Equal(kroBefore.Status))
		// The removal of the annotation was the only write to the Kro: no status patch.
		g.Expect(after.ResourceVersion).To(Equal(consumedRV))
	}, 2*time.Second, 200*time.Millisecond).Should(Succeed())
}

func TestUnknownVersionFixedByProviderConfig(t *testing.T) {
	g := withClusters(t)
	ns := newNamespace(t, g)
	version := uniq("v9")
	k := newKro(g, ns, "unknown", version)
	k = eventuallyCondition(g, k, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonReconcileError,
		`version "`+version+`" is not offered`, baseVersion)
	g.Expect(k.Status.Phase).To(Equal(v1alpha1.PhaseProgressing))
	g.Expect(condition(k, v1alpha1.ConditionVersionResolved).Reason).To(Equal(v1alpha1.ReasonVersionNotOffered))
	eventuallyEvent(g, k, "Warning/"+v1alpha1.ReasonVersionNotOffered, "not offered")
	// Nothing else progresses.
	g.Expect(condition(k, v1alpha1.ConditionOCIRepositoryReady).Reason).To(Equal(v1alpha1.ReasonNotChecked))
	g.Consistently(func(g Gomega) {
		repos := &sourcev1.OCIRepositoryList{}
		g.Expect(platform.Client.List(context.Background(), repos, client.InNamespace(tenantNamespace(g, k)))).To(Succeed())
		g.Expect(repos.Items).To(BeEmpty())
	}, time.Second, 200*time.Millisecond).Should(Succeed())

	// Invalid input is no error: no backoff, the poll interval as the safety net.
	direct := &KroReconciler{
		Onboarding: onboarding.Client, Platform: platform.Client, PlatformReader: platform.Client,
		Recorder: events.NewFakeRecorder(10), ProviderName: providerName, PodNamespace: podNamespace,
	}
	res, err := direct.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(k)})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.RequeueAfter).To(Equal(suitePollInterval))

	// Offering the version fixes it at once, by watch.
	grantAccess(g, k, controlPlane)
	offerVersion(g, v1alpha1.KroVersion{Version: version, ChartVersion: "1.2.3"})
	eventuallyCondition(g, k, v1alpha1.ConditionVersionResolved, metav1.ConditionTrue, v1alpha1.ReasonReconcileSuccess, "1.2.3")
	g.Eventually(func(g Gomega) {
		g.Expect(getOCIRepository(g, k).Spec.Reference.Tag).To(Equal("1.2.3"))
	}, timeout, interval).Should(Succeed())

	// Editing the Kro to an unknown version stops it again, and back.
	g.Expect(onboarding.Client.Patch(context.Background(), k, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"version":"v-nope"}}`)))).To(Succeed())
	eventuallyCondition(g, k, v1alpha1.ConditionVersionResolved, metav1.ConditionFalse, v1alpha1.ReasonVersionNotOffered, `"v-nope"`, version)
}

func TestSwitchingVersions(t *testing.T) {
	g := withClusters(t)
	ctx := context.Background()
	ns := newNamespace(t, g)
	v1, v2 := uniq("v1"), uniq("v2")
	chartA, chartB, imageX, imageY := uniq("chart-a"), uniq("chart-b"), uniq("image-x"), uniq("image-y")
	for _, s := range []string{chartA, chartB, imageX, imageY} {
		sourceSecret(g, s, corev1.SecretTypeDockerConfigJson, s)
	}
	offerVersion(g, v1alpha1.KroVersion{Version: v1, ChartVersion: "0.9.1", ChartPullSecret: chartA, HelmValues: helmValues(imageX)})
	offerVersion(g, v1alpha1.KroVersion{Version: v2, ChartVersion: "0.9.3", ChartURL: "oci://other.example.com/kro", ChartPullSecret: chartB, HelmValues: helmValues(imageY)})
	k := readyKro(t, g, ns, "switch", v1)
	tenant := tenantNamespace(g, k)

	k.Spec.Version = v2
	g.Expect(onboarding.Client.Update(ctx, k)).To(Succeed())
	g.Eventually(func(g Gomega) {
		repo := getOCIRepository(g, k)
		g.Expect(repo.Spec.URL).To(Equal("oci://other.example.com/kro"))
		g.Expect(repo.Spec.Reference.Tag).To(Equal("0.9.3"))
		g.Expect(repo.Spec.SecretRef.Name).To(Equal(providerName + "-" + chartB))
		g.Expect(string(getHelmRelease(g, k).Spec.Values.Raw)).To(ContainSubstring(imageY))
	}, timeout, interval).Should(Succeed())
	// Stale copies are removed, on the platform and on the ControlPlane.
	eventuallyGone(g, platform.Client, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: providerName + "-" + chartA}})
	eventuallyGone(g, controlPlane.Client, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: owned.KroNamespace, Name: imageX}})
	g.Expect(controlPlane.Client.Get(ctx, client.ObjectKey{Namespace: owned.KroNamespace, Name: imageY}, &corev1.Secret{})).To(Succeed())
	g.Expect(platform.Client.Get(ctx, client.ObjectKey{Namespace: tenant, Name: providerName + "-" + chartB}, &corev1.Secret{})).To(Succeed())
	k = eventuallyCondition(g, k, v1alpha1.ConditionVersionResolved, metav1.ConditionTrue, v1alpha1.ReasonReconcileSuccess, v2)
	// The new generation is not Ready until Flux has reconciled it.
	g.Expect(condition(k, v1alpha1.ConditionReady).Status).To(Equal(metav1.ConditionFalse))

	// A version without pull secrets removes the copies, too.
	offerVersion(g, v1alpha1.KroVersion{Version: v2, ChartVersion: "0.9.3"})
	eventuallyGone(g, platform.Client, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: providerName + "-" + chartB}})
	eventuallyGone(g, controlPlane.Client, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: owned.KroNamespace, Name: imageY}})
	g.Eventually(func(g Gomega) {
		g.Expect(getOCIRepository(g, k).Spec.SecretRef).To(BeNil())
	}, timeout, interval).Should(Succeed())
}

func TestSourceSecretRotation(t *testing.T) {
	g := withClusters(t)
	ctx := context.Background()
	ns := newNamespace(t, g)
	version := uniq("v1")
	chartSecret, imageSecret := uniq("chart"), uniq("image")
	chartSrc := sourceSecret(g, chartSecret, corev1.SecretTypeDockerConfigJson, "old-chart")
	imageSrc := sourceSecret(g, imageSecret, corev1.SecretTypeDockerConfigJson, "old-image")
	offerVersion(g, v1alpha1.KroVersion{Version: version, ChartVersion: "0.9.3", ChartPullSecret: chartSecret, HelmValues: helmValues(imageSecret)})
	k := readyKro(t, g, ns, "rotate", version)
	tenant := tenantNamespace(g, k)

	chartSrc.Data[corev1.DockerConfigJsonKey] = []byte(`{"auths":{"example.com":{"auth":"new-chart"}}}`)
	g.Expect(platform.Client.Update(ctx, chartSrc)).To(Succeed())
	imageSrc.Data[corev1.DockerConfigJsonKey] = []byte(`{"auths":{"example.com":{"auth":"new-image"}}}`)
	g.Expect(platform.Client.Update(ctx, imageSrc)).To(Succeed())

	g.Eventually(func(g Gomega) {
		s := &corev1.Secret{}
		g.Expect(platform.Client.Get(ctx, client.ObjectKey{Namespace: tenant, Name: providerName + "-" + chartSecret}, s)).To(Succeed())
		g.Expect(string(s.Data[corev1.DockerConfigJsonKey])).To(ContainSubstring("new-chart"))
		g.Expect(controlPlane.Client.Get(ctx, client.ObjectKey{Namespace: owned.KroNamespace, Name: imageSecret}, s)).To(Succeed())
		g.Expect(string(s.Data[corev1.DockerConfigJsonKey])).To(ContainSubstring("new-image"))
	}, 5*time.Second, interval).Should(Succeed())

	// A copy that someone changes is put back.
	copied := &corev1.Secret{}
	g.Expect(platform.Client.Get(ctx, client.ObjectKey{Namespace: tenant, Name: providerName + "-" + chartSecret}, copied)).To(Succeed())
	copied.Data[corev1.DockerConfigJsonKey] = []byte(`{}`)
	g.Expect(platform.Client.Update(ctx, copied)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(platform.Client.Get(ctx, client.ObjectKeyFromObject(copied), copied)).To(Succeed())
		g.Expect(string(copied.Data[corev1.DockerConfigJsonKey])).To(ContainSubstring("new-chart"))
	}, 5*time.Second, interval).Should(Succeed())
}

func TestMissingAndWrongTypedSecrets(t *testing.T) {
	g := withClusters(t)
	ctx := context.Background()
	ns := newNamespace(t, g)
	version := uniq("v1")
	chartSecret, imageSecret := uniq("chart"), uniq("image")
	offerVersion(g, v1alpha1.KroVersion{Version: version, ChartVersion: "0.9.3", ChartPullSecret: chartSecret, HelmValues: helmValues(imageSecret)})
	k := newKro(g, ns, "secrets", version)

	k = eventuallyCondition(g, k, v1alpha1.ConditionPullSecretsReady, metav1.ConditionFalse, v1alpha1.ReasonPullSecretMissing,
		`secret "`+chartSecret+`"`, "not found in namespace "+podNamespace, `secret "`+imageSecret+`"`)
	g.Expect(condition(k, v1alpha1.ConditionReady).Reason).To(Equal(v1alpha1.ReasonReconcileError))
	eventuallyEvent(g, k, "Warning/"+v1alpha1.ReasonPullSecretMissing, chartSecret, "not found")
	g.Expect(condition(k, v1alpha1.ConditionOCIRepositoryReady).Reason).To(Equal(v1alpha1.ReasonNotChecked))

	// Wrong type: named, with what is wrong. The watch on source secrets brings it back.
	sourceSecret(g, chartSecret, corev1.SecretTypeOpaque, "x")
	eventuallyCondition(g, k, v1alpha1.ConditionPullSecretsReady, metav1.ConditionFalse, v1alpha1.ReasonPullSecretWrongType,
		chartSecret, `has type "Opaque", expected kubernetes.io/dockerconfigjson`)
	eventuallyEvent(g, k, "Warning/"+v1alpha1.ReasonPullSecretWrongType, "Opaque")

	g.Expect(platform.Client.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: podNamespace, Name: chartSecret}})).To(Succeed())
	sourceSecret(g, chartSecret, corev1.SecretTypeDockerConfigJson, "x")
	sourceSecret(g, imageSecret, corev1.SecretTypeDockerConfigJson, "y")
	grantAccess(g, k, controlPlane)
	eventuallyCondition(g, k, v1alpha1.ConditionPullSecretsReady, metav1.ConditionTrue, v1alpha1.ReasonReconcileSuccess, imageSecret, "copied to kro-system")
}

func TestDeletionBlockedByResourceGraphDefinitions(t *testing.T) {
	g := withClusters(t)
	ctx := context.Background()
	ns := newNamespace(t, g)
	version := uniq("v1")
	chartSecret, imageSecret := uniq("chart"), uniq("image")
	sourceSecret(g, chartSecret, corev1.SecretTypeDockerConfigJson, "a")
	sourceSecret(g, imageSecret, corev1.SecretTypeDockerConfigJson, "b")
	offerVersion(g, v1alpha1.KroVersion{Version: version, ChartVersion: "0.9.3", ChartPullSecret: chartSecret, HelmValues: helmValues(imageSecret)})
	k := readyKro(t, g, ns, "blocked", version)
	tenant := tenantNamespace(g, k)

	var rgds []client.Object
	for i := range 12 {
		rgds = append(rgds, newRGD(g, controlPlane.Client, uniq(string(rune('a'+i))+"-rgd")))
	}
	// Flux holds the HelmRelease while it uninstalls.
	hr := getHelmRelease(g, k)
	hr.Finalizers = append(hr.Finalizers, helmv2.HelmReleaseFinalizer)
	g.Expect(platform.Client.Update(ctx, hr)).To(Succeed())

	deleteKro(g, k)
	k = eventuallyCondition(g, k, v1alpha1.ConditionDeletionBlocked, metav1.ConditionTrue, v1alpha1.ReasonUserResourcesPresent,
		"12 ResourceGraphDefinitions", "and 2 more")
	g.Expect(k.Status.Phase).To(Equal(v1alpha1.PhaseTerminating))
	g.Expect(condition(k, v1alpha1.ConditionReady).Reason).To(Equal(v1alpha1.ReasonTerminating))
	eventuallyEvent(g, k, "Warning/"+v1alpha1.ReasonUserResourcesPresent, "12 ResourceGraphDefinitions")
	// Nothing is removed while tenants' RGDs exist.
	g.Consistently(func(g Gomega) {
		g.Expect(getHelmRelease(g, k).DeletionTimestamp).To(BeNil())
	}, time.Second, 200*time.Millisecond).Should(Succeed())

	for _, rgd := range rgds {
		g.Expect(controlPlane.Client.Delete(ctx, rgd)).To(Succeed())
	}
	// The HelmRelease is deleted, and the Kro waits for Flux to uninstall.
	g.Eventually(func(g Gomega) {
		g.Expect(getHelmRelease(g, k).DeletionTimestamp).NotTo(BeNil())
	}, timeout, interval).Should(Succeed())
	k = eventuallyCondition(g, k, v1alpha1.ConditionDeletionBlocked, metav1.ConditionFalse, v1alpha1.ReasonUninstalling)
	g.Expect(condition(k, v1alpha1.ConditionReady).Message).To(ContainSubstring("waiting for Flux to uninstall"))
	g.Consistently(func(g Gomega) { getOCIRepository(g, k) }, time.Second, 200*time.Millisecond).Should(Succeed())

	// Flux is done: the rest goes, then the Kro.
	hr = getHelmRelease(g, k)
	hr.Finalizers = nil
	g.Expect(platform.Client.Update(ctx, hr)).To(Succeed())
	eventuallyGone(g, onboarding.Client, k)
	eventuallyGone(g, platform.Client, &sourcev1.OCIRepository{ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: providerName}})
	eventuallyGone(g, platform.Client, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: providerName + "-" + chartSecret}})
	eventuallyGone(g, controlPlane.Client, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: owned.KroNamespace, Name: imageSecret}})
}

func TestDeletionAfterVersionWithdrawn(t *testing.T) {
	g := withClusters(t)
	ns := newNamespace(t, g)
	version := uniq("v1")
	chartSecret := uniq("chart")
	sourceSecret(g, chartSecret, corev1.SecretTypeDockerConfigJson, "a")
	offerVersion(g, v1alpha1.KroVersion{Version: version, ChartVersion: "0.9.3", ChartPullSecret: chartSecret})
	k := readyKro(t, g, ns, "withdrawn", version)
	tenant := tenantNamespace(g, k)

	withdrawVersion(g, version)
	eventuallyCondition(g, k, v1alpha1.ConditionVersionResolved, metav1.ConditionFalse, v1alpha1.ReasonVersionNotOffered, "not offered")
	deleteKro(g, k)
	eventuallyGone(g, onboarding.Client, k)
	eventuallyGone(g, platform.Client, &helmv2.HelmRelease{ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: providerName}})
	eventuallyGone(g, platform.Client, &sourcev1.OCIRepository{ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: providerName}})
	eventuallyGone(g, platform.Client, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: providerName + "-" + chartSecret}})
}

func TestAccessSecretGoneDuringDeletion(t *testing.T) {
	g := withClusters(t)
	ctx := context.Background()
	ns := newNamespace(t, g)
	k := readyKro(t, g, ns, "gone", baseVersion)
	tenant := tenantNamespace(g, k)
	hr := getHelmRelease(g, k)
	hr.Finalizers = append(hr.Finalizers, helmv2.HelmReleaseFinalizer)
	g.Expect(platform.Client.Update(ctx, hr)).To(Succeed())
	// RGDs on a ControlPlane that cannot be reached any more do not block.
	rgd := newRGD(g, controlPlane.Client, uniq("orphan"))
	defer func() { _ = controlPlane.Client.Delete(ctx, rgd) }()

	g.Expect(platform.Client.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: "controlplane-access"}})).To(Succeed())
	deleteKro(g, k)
	// One read without the kubeconfig is no proof: the grace period runs first, and says so.
	blocked := eventuallyCondition(g, k, v1alpha1.ConditionDeletionBlocked, metav1.ConditionTrue, v1alpha1.ReasonControlPlaneAccessMissing,
		"the ControlPlane's access has been missing since", "kro will be dropped without uninstalling at")
	g.Expect(blocked.Status.AccessMissingSince).NotTo(BeNil())
	g.Expect(getHelmRelease(g, k).DeletionTimestamp).To(BeNil(), "nothing is dropped during the grace period")
	g.Eventually(func(g Gomega) {
		hr := getHelmRelease(g, k)
		g.Expect(hr.Spec.Suspend).To(BeTrue())
		g.Expect(hr.DeletionTimestamp).NotTo(BeNil())
	}, timeout, interval).Should(Succeed())
	eventuallyEvent(g, k, "Warning/"+v1alpha1.ReasonControlPlaneGone, "suspended")

	// Flux skips the uninstall of a suspended release and lets it go.
	hr = getHelmRelease(g, k)
	hr.Finalizers = nil
	g.Expect(platform.Client.Update(ctx, hr)).To(Succeed())
	eventuallyGone(g, onboarding.Client, k)
	eventuallyGone(g, platform.Client, &sourcev1.OCIRepository{ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: providerName}})
}

func TestDeletionWithoutResourceGraphDefinitionCRD(t *testing.T) {
	g := withClusters(t)
	ns := newNamespace(t, g)
	k := newKro(g, ns, "bare", baseVersion)
	grantAccess(g, k, bareControlPlane)
	g.Eventually(func(g Gomega) { getHelmRelease(g, k) }, timeout, interval).Should(Succeed())
	deleteKro(g, k)
	eventuallyGone(g, onboarding.Client, k)
}

func TestOperationAnnotations(t *testing.T) {
	g := withClusters(t)
	ctx := context.Background()
	ns := newNamespace(t, g)
	k := readyKro(t, g, ns, "ops", baseVersion)

	// ignore: nothing happens, not even status.
	k.Annotations = map[string]string{constants.OperationAnnotation: constants.OperationAnnotationValueIgnore, "keep": "me"}
	g.Expect(onboarding.Client.Update(ctx, k)).To(Succeed())
	k.Spec.Version = "v-not-offered"
	g.Expect(onboarding.Client.Update(ctx, k)).To(Succeed())
	g.Consistently(func(g Gomega) {
		got := getKro(g, k)
		g.Expect(got.Status.ObservedGeneration).NotTo(Equal(got.Generation))
		g.Expect(got.Status.Phase).To(Equal(v1alpha1.PhaseReady))
		g.Expect(getOCIRepository(g, k).Spec.Reference.Tag).To(Equal("0.9.3"))
	}, 2*time.Second, 200*time.Millisecond).Should(Succeed())

	// reconcile: runs now, then only that annotation is removed.
	k = getKro(g, k)
	k.Annotations[constants.OperationAnnotation] = constants.OperationAnnotationValueReconcile
	g.Expect(onboarding.Client.Update(ctx, k)).To(Succeed())
	eventuallyCondition(g, k, v1alpha1.ConditionVersionResolved, metav1.ConditionFalse, v1alpha1.ReasonVersionNotOffered, "v-not-offered")
	g.Eventually(func(g Gomega) {
		got := getKro(g, k)
		g.Expect(got.Annotations).NotTo(HaveKey(constants.OperationAnnotation))
		g.Expect(got.Annotations).To(HaveKeyWithValue("keep", "me"))
	}, timeout, interval).Should(Succeed())
}

func TestLongNames(t *testing.T) {
	g := withClusters(t)
	ctx := context.Background()
	longNS := "t-" + strings.Repeat("n", 54) + "-" + uniq("x")[2:]
	g.Expect(len(longNS)).To(Equal(63))
	g.Expect(onboarding.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: longNS}})).To(Succeed())
	name := strings.Repeat("k", 63)
	version := uniq("v1")
	chartSecret := uniq("c") + "-" + strings.Repeat("s", 253-9)
	g.Expect(len(chartSecret)).To(Equal(253))
	sourceSecret(g, chartSecret, corev1.SecretTypeDockerConfigJson, "long")
	offerVersion(g, v1alpha1.KroVersion{Version: version, ChartVersion: "0.9.3", ChartPullSecret: chartSecret})

	k := readyKro(t, g, longNS, name, version)
	tenant := tenantNamespace(g, k)
	g.Expect(validation.IsDNS1123Label(tenant)).To(BeEmpty())
	repo := getOCIRepository(g, k)
	g.Expect(validation.IsDNS1123Subdomain(repo.Spec.SecretRef.Name)).To(BeEmpty())
	g.Expect(repo.Spec.SecretRef.Name).To(HavePrefix(providerName + "-"))
	g.Expect(repo.Labels).To(HaveKeyWithValue(v1alpha1.LabelKroName, name))
	g.Expect(repo.Labels).To(HaveKeyWithValue(v1alpha1.LabelKroNamespace, longNS))
	g.Expect(platform.Client.Get(ctx, client.ObjectKey{Namespace: tenant, Name: repo.Spec.SecretRef.Name}, &corev1.Secret{})).To(Succeed())

	deleteKro(g, k)
	eventuallyGone(g, onboarding.Client, k)
	eventuallyGone(g, platform.Client, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: repo.Spec.SecretRef.Name}})
}

func TestProviderConfigMissing(t *testing.T) {
	g := withClusters(t)
	ctx := context.Background()
	ns := newNamespace(t, g)
	pc := &v1alpha1.ProviderConfig{}
	var spec v1alpha1.ProviderConfigSpec
	// Held by a finalizer, the ProviderConfig is first only being deleted. The provider
	// writes its status meanwhile: retry on a conflict.
	g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := platform.Client.Get(ctx, client.ObjectKey{Name: providerName}, pc); err != nil {
			return err
		}
		spec = *pc.Spec.DeepCopy()
		pc.Finalizers = append(pc.Finalizers, "test.example.com/hold")
		return platform.Client.Update(ctx, pc)
	})).To(Succeed())
	g.Expect(platform.Client.Delete(ctx, pc)).To(Succeed())
	restored := false
	restore := func() {
		if restored {
			return
		}
		restored = true
		again := &v1alpha1.ProviderConfig{ObjectMeta: metav1.ObjectMeta{Name: providerName}, Spec: spec}
		g.Eventually(func() error { return platform.Client.Create(ctx, again) }, timeout, interval).Should(Succeed())
	}
	defer restore()

	k := newKro(g, ns, "nopc", baseVersion)
	eventuallyCondition(g, k, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonReconcileError, `ProviderConfig "kro" is being deleted`)
	g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := platform.Client.Get(ctx, client.ObjectKey{Name: providerName}, pc); err != nil {
			return err
		}
		pc.Finalizers = nil
		return platform.Client.Update(ctx, pc)
	})).To(Succeed())
	k = eventuallyCondition(g, k, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonReconcileError, `ProviderConfig "kro" not found`)
	g.Expect(k.Status.Phase).To(Equal(v1alpha1.PhaseProgressing))

	restore()
	eventuallyCondition(g, k, v1alpha1.ConditionVersionResolved, metav1.ConditionTrue, v1alpha1.ReasonReconcileSuccess)
}

func TestSourceSecretMapsToExactlyItsKros(t *testing.T) {
	g := withClusters(t)
	ns := newNamespace(t, g)
	v1, v2 := uniq("v1"), uniq("v2")
	chart, image := uniq("chart"), uniq("image")
	offerVersion(g, v1alpha1.KroVersion{Version: v1, ChartVersion: "0.9.3", ChartPullSecret: chart})
	offerVersion(g, v1alpha1.KroVersion{Version: v2, ChartVersion: "0.9.3", HelmValues: helmValues(image)})
	a := newKro(g, ns, "a", v1)
	b := newKro(g, ns, "b", v2)
	newKro(g, ns, "c", baseVersion)

	r := &KroReconciler{Onboarding: onboarding.Client, Platform: platform.Client, ProviderName: providerName, PodNamespace: podNamespace}
	secret := func(name string) client.Object {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: podNamespace, Name: name}}
	}
	g.Expect(r.steps().watches.krosOfSecret(context.Background(), secret(chart))).To(ConsistOf(ctrl.Request{NamespacedName: client.ObjectKeyFromObject(a)}))
	g.Expect(r.steps().watches.krosOfSecret(context.Background(), secret(image))).To(ConsistOf(ctrl.Request{NamespacedName: client.ObjectKeyFromObject(b)}))
	g.Expect(r.steps().watches.krosOfSecret(context.Background(), secret(uniq("unused")))).To(BeEmpty())
}

package controllers

import (
	"context"
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
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/handover"
	"github.com/openmcp-project/service-provider-kro/controllers/owned"
	"github.com/openmcp-project/service-provider-kro/controllers/reach"
	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

// helmServiceAccount puts kro's ServiceAccount on the suite's ControlPlane as Helm
// installs it with the release kro: Helm's label and annotations, none of the provider's.
func helmServiceAccount(t *testing.T, g Gomega) *corev1.ServiceAccount {
	ctx := context.Background()
	g.Expect(client.IgnoreAlreadyExists(controlPlane.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: owned.KroNamespace}}))).To(Succeed())
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{
		Namespace:   owned.KroNamespace,
		Name:        owned.KroServiceAccountName,
		Labels:      map[string]string{handover.HelmManagedByLabel: "Helm", "app.kubernetes.io/instance": owned.ReleaseName},
		Annotations: map[string]string{handover.HelmReleaseNameAnnotation: owned.ReleaseName, "meta.helm.sh/release-namespace": owned.KroNamespace},
	}}
	g.Expect(controlPlane.Client.Create(ctx, sa)).To(Succeed())
	t.Cleanup(func() { _ = client.IgnoreNotFound(controlPlane.Client.Delete(ctx, sa)) })
	return sa
}

// expectHelmsOwn checks that the ServiceAccount is still Helm's: the same object, with
// none of the provider's labels.
func expectHelmsOwn(g Gomega, sa *corev1.ServiceAccount) {
	got := &corev1.ServiceAccount{}
	g.Expect(controlPlane.Client.Get(context.Background(), client.ObjectKeyFromObject(sa), got)).To(Succeed())
	g.Expect(got.UID).To(Equal(sa.UID))
	g.Expect(got.Labels).To(Equal(sa.Labels), "Helm's labels, none of the provider's")
	g.Expect(got.Annotations).NotTo(HaveKey(v1alpha1.AnnotationKro))
}

// workloadAccess gives the Kro's tenant namespace the workload cluster's kubeconfig (the
// suite's bare API server).
func workloadAccess(g Gomega, k *v1alpha1.Kro) {
	g.Expect(platform.Client.Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "workload-access", Namespace: tenantNamespace(g, k), Labels: map[string]string{v1alpha1.LabelWorkloadClusterKubeconfig: "true"}},
		Data:       map[string][]byte{owned.KubeconfigKey: bareControlPlane.Kubeconfig},
	})).To(Succeed())
}

// absent tells whether obj (namespace and name set) does not exist on the platform cluster.
func absent(obj client.Object) bool {
	return apierrors.IsNotFound(platform.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), obj))
}

// TestHandOverToAWorkloadClusterUninstallsTheEarlierKroFirst: with a version placed on a
// workload cluster, the earlier provider's kro on the ControlPlane is uninstalled through
// its own release, resumed and then deleted, and nothing of kro starts on the workload
// cluster (the provider's Flux objects, kro's parts and ServiceAccount on the
// ControlPlane) until that release is gone: one kro at a time. Helm's ServiceAccount
// never gets the provider's labels; it goes with the uninstall.
func TestHandOverToAWorkloadClusterUninstallsTheEarlierKroFirst(t *testing.T) {
	g := withClusters(t)
	ctx := context.Background()
	ns := newNamespace(t, g)
	chart := sourceSecret(g, uniq("hw-chart"), corev1.SecretTypeDockerConfigJson, "chart")
	image := sourceSecret(g, uniq("hw-image"), corev1.SecretTypeDockerConfigJson, "image")
	version := uniq("wl-handover")
	offerVersion(g, v1alpha1.KroVersion{Version: version, ChartVersion: "0.9.4", ChartURL: "registry.example.com/charts/kro",
		ChartPullSecret: chart.Name, Placement: v1alpha1.PlacementWorkloadCluster, HelmValues: helmValues(image.Name)})
	t.Cleanup(func() { withdrawVersion(NewWithT(t), version) })

	e := earlierFor(g, ns, "cp-hw", chart, image)
	helmSA := helmServiceAccount(t, g)
	k := kroWithFinalizer(g, ns, "cp-hw", version)
	grantAccess(g, k, controlPlane)
	workloadAccess(g, k)

	t.Log("the earlier release is resumed and deleted, so that Flux uninstalls its kro")
	g.Eventually(func(g Gomega) {
		old, err := earlierRelease(e)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(old.DeletionTimestamp).NotTo(BeNil())
		g.Expect(old.Spec.Suspend).To(BeFalse(), "Flux skips the uninstall of a suspended release")
	}, timeout, interval).Should(Succeed())
	k = eventuallyCondition(g, k, v1alpha1.ConditionEarlierReleaseSuspended, metav1.ConditionFalse, v1alpha1.ReasonMovingPlacement,
		"uninstalling it through the earlier HelmRelease", "two kros never reconcile")
	expectLegacy(g, k, v1alpha1.ConditionEarlierReleaseSuspended)
	g.Expect(condition(k, v1alpha1.ConditionHandOver).Reason).To(Equal(v1alpha1.ReasonHandingOver))
	eventuallyEvent(g, k, "Normal/"+v1alpha1.ReasonHandingOver, "resumed and deleted the earlier provider's HelmRelease")
	eventuallyGone(g, controlPlane.Client, e.ImageSecretCopies()[0])

	t.Log("nothing of kro starts on the workload cluster while the earlier kro is there")
	g.Consistently(func(g Gomega) {
		g.Expect(absent(&helmv2.HelmRelease{ObjectMeta: metav1.ObjectMeta{Namespace: e.TenantNamespace, Name: providerName}})).To(BeTrue(), "the provider's HelmRelease")
		g.Expect(absent(&sourcev1.OCIRepository{ObjectMeta: metav1.ObjectMeta{Namespace: e.TenantNamespace, Name: providerName}})).To(BeTrue(), "the provider's OCIRepository")
		expectHelmsOwn(g, helmSA)
		old, err := earlierRelease(e)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(old.Spec.Suspend).To(BeFalse())
	}, 2*time.Second, interval).Should(Succeed())

	t.Log("helm-controller uninstalls the earlier release: Helm's objects go with it")
	g.Expect(controlPlane.Client.Delete(ctx, helmSA)).To(Succeed())
	old, err := earlierRelease(e)
	g.Expect(err).NotTo(HaveOccurred())
	letGo(g, old)
	eventuallyGone(g, platform.Client, e.HelmRelease())

	t.Log("then kro starts on the workload cluster, with a ServiceAccount of the provider's own")
	eventuallyCondition(g, k, v1alpha1.ConditionWorkloadClusterReady, metav1.ConditionFalse, v1alpha1.ReasonReconciling, "waiting for source-controller")
	url, digest := serveKroChart(t, g)
	playArtifact(g, k, url, digest)
	workloadNS, err := reach.WorkloadNamespace(client.ObjectKeyFromObject(k))
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func(g Gomega) {
		g.Expect(getHelmRelease(g, k).Spec.TargetNamespace).To(Equal(workloadNS))
	}, timeout, interval).Should(Succeed())
	sa := &corev1.ServiceAccount{}
	g.Expect(controlPlane.Client.Get(ctx, client.ObjectKeyFromObject(helmSA), sa)).To(Succeed())
	g.Expect(sa.UID).NotTo(Equal(helmSA.UID))
	g.Expect(sa.Labels).To(HaveKeyWithValue(v1alpha1.LabelManagedBy, v1alpha1.ManagedByValue))
	fluxReady(g, getOCIRepository(g, k), metav1.ConditionTrue, "stored artifact")
	playWorkloadKro(g, bareControlPlane.Client, workloadNS)
	fluxReady(g, getHelmRelease(g, k), metav1.ConditionTrue, "Helm install succeeded")
	eventuallyCondition(g, k, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReconcileSuccess)
	for _, o := range []client.Object{e.OCIRepository(), e.AccessRequest(ns), e.AccessSecret(), e.ChartSecretCopy()} {
		eventuallyGone(g, platform.Client, o)
	}
	eventuallyEvent(g, k, "Normal/"+v1alpha1.ReasonHandOverComplete)

	deleteKro(g, k)
	eventuallyGone(g, onboarding.Client, k)
	g.Expect(apierrors.IsNotFound(controlPlane.Client.Get(ctx, client.ObjectKeyFromObject(helmSA), &corev1.ServiceAccount{}))).To(BeTrue())
}

// TestHelmsServiceAccountIsNotRelabelled: a kro that Helm installed on the ControlPlane
// outside any HelmRelease (its ServiceAccount carries Helm's marks) is not taken over by
// a version on a workload cluster: the provider writes none of its labels onto Helm's
// objects and says what stands in the way; once that is gone, kro starts.
func TestHelmsServiceAccountIsNotRelabelled(t *testing.T) {
	g := withClusters(t)
	ctx := context.Background()
	ns := newNamespace(t, g)
	version := uniq("wl-helm")
	offerVersion(g, v1alpha1.KroVersion{Version: version, ChartVersion: "0.9.4", ChartURL: "registry.example.com/charts/kro",
		Placement: v1alpha1.PlacementWorkloadCluster})
	t.Cleanup(func() { withdrawVersion(NewWithT(t), version) })
	helmSA := helmServiceAccount(t, g)
	k := newKro(g, ns, "cp-helm", version)
	grantAccess(g, k, controlPlane)
	workloadAccess(g, k)
	eventuallyCondition(g, k, v1alpha1.ConditionWorkloadClusterReady, metav1.ConditionFalse, v1alpha1.ReasonReconciling, "waiting for source-controller")
	url, digest := serveKroChart(t, g)
	playArtifact(g, k, url, digest)

	k = eventuallyCondition(g, k, v1alpha1.ConditionControlPlanePartsReady, metav1.ConditionFalse, v1alpha1.ReasonOwnershipConflict,
		"ServiceAccount kro-system/kro of Helm release \"kro\"", "uninstall that release")
	expectLegacy(g, k, v1alpha1.ConditionControlPlanePartsReady)
	g.Consistently(func(g Gomega) {
		expectHelmsOwn(g, helmSA)
		g.Expect(absent(&helmv2.HelmRelease{ObjectMeta: metav1.ObjectMeta{Namespace: tenantNamespace(g, k), Name: providerName}})).To(BeTrue())
	}, 2*time.Second, interval).Should(Succeed())

	// ServiceAccounts on the ControlPlane are not watched: the Kro comes back with its
	// recheck, or at once when asked to.
	g.Expect(controlPlane.Client.Delete(ctx, helmSA)).To(Succeed())
	g.Expect(onboarding.Client.Patch(ctx, getKro(g, k), client.RawPatch(types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"`+constants.OperationAnnotation+`":"`+constants.OperationAnnotationValueReconcile+`"}}}`)))).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(getHelmRelease(g, k).Spec.ReleaseName).NotTo(BeEmpty())
	}, timeout, interval).Should(Succeed())
	deleteKro(g, k)
	eventuallyGone(g, onboarding.Client, k)
}

// inHandOver sets up a Kro (cp-<prefix>, with the provider's finalizer) in the middle of
// a hand-over: the earlier provider's installation with its pull secrets, a version of
// chartVersion offered until the test ends, the ControlPlane's access granted, and the
// provider's HelmRelease made beside the earlier one, which it suspended.
func inHandOver(t *testing.T, g Gomega, prefix, chartVersion string) (string, testenv.EarlierInstallation, *v1alpha1.Kro) {
	t.Helper()
	ns := newNamespace(t, g)
	chart := sourceSecret(g, uniq(prefix+"-chart"), corev1.SecretTypeDockerConfigJson, "chart")
	image := sourceSecret(g, uniq(prefix+"-image"), corev1.SecretTypeDockerConfigJson, "image")
	version := uniq("v-" + prefix)
	offerVersion(g, v1alpha1.KroVersion{Version: version, ChartVersion: chartVersion, ChartPullSecret: chart.Name, HelmValues: helmValues(image.Name)})
	t.Cleanup(func() { withdrawVersion(NewWithT(t), version) })

	e := earlierFor(g, ns, "cp-"+prefix, chart, image)
	k := kroWithFinalizer(g, ns, "cp-"+prefix, version)
	grantAccess(g, k, controlPlane)
	g.Eventually(func(g Gomega) {
		getHelmRelease(g, k)
		old, err := earlierRelease(e)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(old.Spec.Suspend).To(BeTrue())
	}, timeout, interval).Should(Succeed())
	return ns, e, k
}

// TestDeletionMidHandOverUninstallsThroughTheEarlierRelease: a Kro deleted while the
// provider's HelmRelease has not written a revision of the release (its chart tag does
// not exist, so it never became Ready) still has kro uninstalled: the provider's
// HelmRelease goes first, which helm-controller lets go without an uninstall, while the
// earlier one stays suspended; then the earlier one is resumed and deleted, and Flux
// uninstalls kro through it.
func TestDeletionMidHandOverUninstallsThroughTheEarlierRelease(t *testing.T) {
	g := withClusters(t)
	ctx := context.Background()
	ns, e, k := inHandOver(t, g, "hm", "0.0.0-no-such-tag")
	// What Flux reports of a chart tag that does not exist: no artifact, no revision.
	fluxReady(g, getOCIRepository(g, k), metav1.ConditionFalse, "failed to determine artifact digest: tag 0.0.0-no-such-tag not found")
	own := getHelmRelease(g, k)
	controllerutil.AddFinalizer(own, playFluxFinalizer)
	g.Expect(platform.Client.Update(ctx, own)).To(Succeed())
	fluxReady(g, getHelmRelease(g, k), metav1.ConditionFalse, "latest generation of object has not been reconciled")
	g.Expect(getHelmRelease(g, k).Status.History.Latest()).To(BeNil())

	deleteKro(g, k)
	t.Log("the provider's HelmRelease goes first; the earlier one stays suspended meanwhile")
	g.Eventually(func(g Gomega) {
		g.Expect(getHelmRelease(g, k).DeletionTimestamp).NotTo(BeNil())
	}, timeout, interval).Should(Succeed())
	g.Consistently(func(g Gomega) {
		old, err := earlierRelease(e)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(old.DeletionTimestamp).To(BeNil(), "deleted while suspended, the earlier release would be let go without an uninstall")
		g.Expect(old.Spec.Suspend).To(BeTrue(), "one release drives kro at a time")
	}, 2*time.Second, interval).Should(Succeed())
	letGo(g, getHelmRelease(g, k)) // no revision in its history: helm-controller uninstalls nothing

	t.Log("then the earlier release, resumed and deleted, uninstalls kro")
	g.Eventually(func(g Gomega) {
		old, err := earlierRelease(e)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(old.DeletionTimestamp).NotTo(BeNil())
		g.Expect(old.Spec.Suspend).To(BeFalse(), "Flux skips the uninstall of a suspended release")
	}, timeout, interval).Should(Succeed())
	old, err := earlierRelease(e)
	g.Expect(err).NotTo(HaveOccurred())
	letGo(g, old)

	eventuallyGone(g, onboarding.Client, k)
	for _, o := range []client.Object{e.HelmRelease(), e.OCIRepository(), e.AccessRequest(ns), e.AccessSecret(), e.ChartSecretCopy()} {
		eventuallyGone(g, platform.Client, o)
	}
	eventuallyGone(g, controlPlane.Client, e.ImageSecretCopies()[0]) // adopted by the provider, removed with its copies
}

// TestDeletionAfterTakeOverUninstallsThroughTheProvidersRelease: once the provider's
// HelmRelease has written a revision of the release, a deletion in the middle of the
// hand-over lets the suspended earlier HelmRelease go at once, without an uninstall, and
// uninstalls kro through the provider's own.
func TestDeletionAfterTakeOverUninstallsThroughTheProvidersRelease(t *testing.T) {
	g := withClusters(t)
	ctx := context.Background()
	ns, e, k := inHandOver(t, g, "ht", "0.9.3")
	// helm-controller upgraded the release in place, but the upgrade failed: a revision
	// in the history, not Ready.
	own := getHelmRelease(g, k)
	controllerutil.AddFinalizer(own, playFluxFinalizer)
	g.Expect(platform.Client.Update(ctx, own)).To(Succeed())
	own = getHelmRelease(g, k)
	own.Status.StorageNamespace = owned.KroNamespace
	own.Status.History = helmv2.Snapshots{{Name: owned.ReleaseName, Namespace: owned.KroNamespace, Version: 2, Status: "failed", ChartName: "kro", ChartVersion: "0.9.3",
		ConfigDigest: "sha256:0", Digest: "sha256:0", FirstDeployed: metav1.Now(), LastDeployed: metav1.Now()}}
	g.Expect(platform.Client.Status().Update(ctx, own)).To(Succeed())

	deleteKro(g, k)
	g.Eventually(func(g Gomega) {
		old, err := earlierRelease(e)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(old.DeletionTimestamp).NotTo(BeNil())
		g.Expect(old.Spec.Suspend).To(BeTrue(), "the provider's release uninstalls kro")
		g.Expect(getHelmRelease(g, k).DeletionTimestamp).NotTo(BeNil())
	}, timeout, interval).Should(Succeed())
	old, err := earlierRelease(e)
	g.Expect(err).NotTo(HaveOccurred())
	letGo(g, old)
	letGo(g, getHelmRelease(g, k))
	eventuallyGone(g, onboarding.Client, k)
	for _, o := range []client.Object{e.HelmRelease(), e.OCIRepository(), e.AccessRequest(ns), e.AccessSecret(), e.ChartSecretCopy()} {
		eventuallyGone(g, platform.Client, o)
	}
}

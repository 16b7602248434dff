package controllers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	"github.com/fluxcd/pkg/apis/meta"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/owned"
	"github.com/openmcp-project/service-provider-kro/controllers/reach"
	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

// workloadChart is the version of kro's chart the workload-placement tests serve.
const workloadChart = "0.9.4"

// serveKroChart packages kro's real chart at workloadChart and serves it as
// source-controller serves an artifact; it returns the artifact's URL and digest.
func serveKroChart(t *testing.T, g Gomega) (url, digest string) {
	t.Helper()
	dir := t.TempDir()
	helm, err := testenv.NewHelmCLI(context.Background(), os.Stderr, filepath.Join(dir, "helm"))
	g.Expect(err).NotTo(HaveOccurred())
	archive, err := helm.PackageKroChart(context.Background(), workloadChart, filepath.Join(dir, "charts"))
	g.Expect(err).NotTo(HaveOccurred())
	data, err := os.ReadFile(archive)
	g.Expect(err).NotTo(HaveOccurred())
	sum := sha256.Sum256(data)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(data) }))
	t.Cleanup(srv.Close)
	return srv.URL + "/ocirepository/kro.tar.gz", "sha256:" + hex.EncodeToString(sum[:])
}

// playArtifact records the chart's artifact in the OCIRepository's status, as
// source-controller does once it has fetched the chart.
func playArtifact(g Gomega, k *v1alpha1.Kro, url, digest string) {
	g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		repo := getOCIRepository(g, k)
		repo.Status.Artifact = &meta.Artifact{Path: "kro.tar.gz", URL: url, Revision: workloadChart + "@" + digest, Digest: digest, LastUpdateTime: metav1.Now()}
		return platform.Client.Status().Update(context.Background(), repo)
	})).To(Succeed())
}

// TestWorkloadPlacement: a version placed on a workload cluster (the suite's bare API
// server plays it) installs kro into the tenant's namespace there, puts kro's CRDs, RBAC
// and service account on the ControlPlane from the chart Flux fetched, gives kro its own
// credential, holds a change of placement, and removes what it made when the Kro goes.
func TestWorkloadPlacement(t *testing.T) {
	g := withClusters(t)
	ctx := context.Background()
	ns := newNamespace(t, g)
	version, imageSecret := uniq("wl"), uniq("image-pull")
	sourceSecret(g, imageSecret, corev1.SecretTypeDockerConfigJson, "aW1hZ2U=")
	wl := v1alpha1.KroVersion{Version: version, ChartVersion: "0.9.4", ChartURL: "registry.example.com/charts/kro",
		Placement: v1alpha1.PlacementWorkloadCluster, HelmValues: helmValues(imageSecret)}
	offerVersion(g, wl)
	k := newKro(g, ns, "cp-wl", version)
	grantAccess(g, k, controlPlane)
	tenant := tenantNamespace(g, k)

	got := eventuallyCondition(g, k, v1alpha1.ConditionWorkloadClusterReady, metav1.ConditionFalse, v1alpha1.ReasonWorkloadClusterMissing, v1alpha1.LabelWorkloadClusterKubeconfig, tenant)
	g.Expect(condition(got, v1alpha1.ConditionReady).Reason).To(Equal(v1alpha1.ReasonReconcileError))
	g.Expect(got.Status.Placement).To(Equal(v1alpha1.PlacementWorkloadCluster))

	g.Expect(platform.Client.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "workload-access", Namespace: tenant, Labels: map[string]string{v1alpha1.LabelWorkloadClusterKubeconfig: "true"}},
		Data:       map[string][]byte{owned.KubeconfigKey: bareControlPlane.Kubeconfig},
	})).To(Succeed())
	expectLegacy(g, eventuallyCondition(g, k, v1alpha1.ConditionControlPlanePartsReady, metav1.ConditionFalse, v1alpha1.ReasonReconciling, "waiting for source-controller"),
		v1alpha1.ConditionControlPlanePartsReady)
	workloadNS, err := reach.WorkloadNamespace(client.ObjectKeyFromObject(k))
	g.Expect(err).NotTo(HaveOccurred())
	copied := &corev1.Secret{}
	g.Expect(bareControlPlane.Client.Get(ctx, client.ObjectKey{Namespace: workloadNS, Name: imageSecret}, copied)).To(Succeed(), "the image pull secret goes where kro runs")
	g.Expect(apierrors.IsNotFound(controlPlane.Client.Get(ctx, client.ObjectKey{Namespace: owned.KroNamespace, Name: imageSecret}, &corev1.Secret{}))).To(BeTrue())

	url, digest := serveKroChart(t, g)
	playArtifact(g, k, url, digest)
	eventuallyCondition(g, k, v1alpha1.ConditionWorkloadClusterReady, metav1.ConditionTrue, v1alpha1.ReasonReconcileSuccess, workloadNS)
	eventuallyCondition(g, k, v1alpha1.ConditionControlPlanePartsReady, metav1.ConditionTrue, v1alpha1.ReasonReconcileSuccess, "applied to the ControlPlane")
	eventuallyCondition(g, k, v1alpha1.ConditionKroCredentialReady, metav1.ConditionTrue, v1alpha1.ReasonReconcileSuccess, workloadNS+"/"+owned.KroCredentialSecretName)

	t.Log("kro's RBAC from the chart, bound to kro's own service account, is on the ControlPlane")
	var roles rbacv1.ClusterRoleBindingList
	g.Expect(controlPlane.Client.List(ctx, &roles, client.MatchingLabels{v1alpha1.LabelRole: v1alpha1.RoleKroParts, v1alpha1.LabelKroNamespace: ns})).To(Succeed())
	g.Expect(roles.Items).To(HaveLen(1))
	g.Expect(roles.Items[0].Subjects).To(ConsistOf(rbacv1.Subject{Kind: "ServiceAccount", Name: owned.KroServiceAccountName, Namespace: owned.KroNamespace}))
	g.Expect(controlPlane.Client.Get(ctx, client.ObjectKey{Namespace: owned.KroNamespace, Name: owned.KroServiceAccountName}, &corev1.ServiceAccount{})).To(Succeed())
	credential := &corev1.Secret{}
	g.Expect(bareControlPlane.Client.Get(ctx, client.ObjectKey{Namespace: workloadNS, Name: owned.KroCredentialSecretName}, credential)).To(Succeed())
	g.Expect(credential.Data).To(HaveKey("token"))

	t.Log("the HelmRelease installs kro into the tenant's namespace on the workload cluster")
	hr := getHelmRelease(g, k)
	g.Expect(hr.Spec.KubeConfig.SecretRef.Name).To(Equal("workload-access"))
	g.Expect(hr.Spec.TargetNamespace).To(Equal(workloadNS))
	g.Expect(hr.Spec.Install.CRDs).To(Equal(helmv2.Skip))
	g.Expect(string(hr.Spec.Values.Raw)).To(ContainSubstring(`"extraEnv"`), "chart 0.9.4 offers the values")
	fluxReady(g, getOCIRepository(g, k), metav1.ConditionTrue, "stored artifact")
	playWorkloadKro(g, bareControlPlane.Client, workloadNS)
	fluxReady(g, getHelmRelease(g, k), metav1.ConditionTrue, "Helm install succeeded")
	got = eventuallyCondition(g, k, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReconcileSuccess)
	g.Expect(got.Status.ManagedResources).To(ContainElement(HaveField("Cluster", reach.WorkloadClusterLabel)))

	t.Log("a change of the version's placement moves kro: uninstalled from the workload cluster, then installed on the ControlPlane")
	oldHR := getHelmRelease(g, k)
	wl.Placement = v1alpha1.PlacementControlPlane
	offerVersion(g, wl)
	g.Eventually(func(g Gomega) {
		hr := getHelmRelease(g, k)
		g.Expect(hr.UID).NotTo(Equal(oldHR.UID), "a new HelmRelease, once the old one is gone")
		g.Expect(hr.Spec.TargetNamespace).To(Equal(owned.KroNamespace))
		g.Expect(hr.Spec.ReleaseName).To(Equal(owned.ReleaseName))
		g.Expect(hr.Spec.KubeConfig.SecretRef.Name).To(Equal("controlplane-access"))
	}, timeout, interval).Should(Succeed())
	g.Expect(apierrors.IsNotFound(controlPlane.Client.Get(ctx, client.ObjectKey{Namespace: owned.KroNamespace, Name: owned.KroServiceAccountName}, &corev1.ServiceAccount{}))).To(BeTrue(),
		"kro's ServiceAccount of the workload placement is gone before the chart's own is installed")
	g.Expect(controlPlane.Client.List(ctx, &roles, client.MatchingLabels{v1alpha1.LabelRole: v1alpha1.RoleKroParts, v1alpha1.LabelKroNamespace: ns})).To(Succeed())
	g.Expect(roles.Items).To(BeEmpty())
	finalizeNamespace(g, bareControlPlane.Client, workloadNS)
	fluxReady(g, getHelmRelease(g, k), metav1.ConditionTrue, "Helm install succeeded")
	got = eventuallyCondition(g, k, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReconcileSuccess)
	g.Expect(got.Status.Placement).To(Equal(v1alpha1.PlacementControlPlane))
	g.Expect(controlPlane.Client.Get(ctx, client.ObjectKey{Namespace: owned.KroNamespace, Name: imageSecret}, &corev1.Secret{})).To(Succeed())

	t.Log("and back: the image pull secret copy leaves kro-system on the ControlPlane")
	wl.Placement = v1alpha1.PlacementWorkloadCluster
	offerVersion(g, wl)
	g.Eventually(func(g Gomega) {
		g.Expect(getHelmRelease(g, k).Spec.TargetNamespace).To(Equal(workloadNS))
	}, timeout, interval).Should(Succeed())
	g.Expect(apierrors.IsNotFound(controlPlane.Client.Get(ctx, client.ObjectKey{Namespace: owned.KroNamespace, Name: imageSecret}, &corev1.Secret{}))).To(BeTrue())
	playWorkloadKro(g, bareControlPlane.Client, workloadNS)
	fluxReady(g, getHelmRelease(g, k), metav1.ConditionTrue, "Helm install succeeded")
	got = eventuallyCondition(g, k, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReconcileSuccess)
	g.Expect(got.Status.Placement).To(Equal(v1alpha1.PlacementWorkloadCluster))

	t.Log("the deletion removes kro's service account and RBAC from the ControlPlane and its namespace from the workload cluster; kro's CRDs stay")
	g.Expect(onboarding.Client.Delete(ctx, k)).To(Succeed())
	eventuallyGone(g, onboarding.Client, k)
	g.Expect(apierrors.IsNotFound(controlPlane.Client.Get(ctx, client.ObjectKey{Namespace: owned.KroNamespace, Name: owned.KroServiceAccountName}, &corev1.ServiceAccount{}))).To(BeTrue())
	g.Expect(controlPlane.Client.List(ctx, &roles, client.MatchingLabels{v1alpha1.LabelRole: v1alpha1.RoleKroParts, v1alpha1.LabelKroNamespace: ns})).To(Succeed())
	g.Expect(roles.Items).To(BeEmpty())
	var crs rbacv1.ClusterRoleList
	g.Expect(controlPlane.Client.List(ctx, &crs, client.MatchingLabels{v1alpha1.LabelRole: v1alpha1.RoleKroParts, v1alpha1.LabelKroNamespace: ns})).To(Succeed())
	g.Expect(crs.Items).To(BeEmpty())
	nsObj := &corev1.Namespace{}
	err = bareControlPlane.Client.Get(ctx, client.ObjectKey{Name: workloadNS}, nsObj)
	g.Expect(apierrors.IsNotFound(err) || !nsObj.DeletionTimestamp.IsZero()).To(BeTrue(), "namespace %s on the workload cluster: %v", workloadNS, err)
	g.Expect(apierrors.IsNotFound(platform.Client.Get(ctx, fluxKey(g, k), &sourcev1.OCIRepository{}))).To(BeTrue())
}

// finalizeNamespace ends the deletion of a namespace, which the suite's API servers,
// without a namespace controller, never finish.
func finalizeNamespace(g Gomega, c client.Client, name string) {
	ns := &corev1.Namespace{}
	g.Eventually(func(g Gomega) {
		g.Expect(c.Get(context.Background(), client.ObjectKey{Name: name}, ns)).To(Succeed())
		g.Expect(ns.DeletionTimestamp.IsZero()).To(BeFalse(), "namespace %s is not being deleted", name)
	}, timeout, interval).Should(Succeed())
	ns.Spec.Finalizers = nil
	g.Expect(c.SubResource("finalize").Update(context.Background(), ns)).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(c.Get(context.Background(), client.ObjectKey{Name: name}, &corev1.Namespace{}))
	}, timeout, interval).Should(BeTrue())
}

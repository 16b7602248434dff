package controllers

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/owned"
	"github.com/openmcp-project/service-provider-kro/controllers/placement/credentialtest"
	"github.com/openmcp-project/service-provider-kro/controllers/reach"
)

// workloadKro is a Kro whose kro runs on the suite's workload cluster (the bare API
// server), Ready, with what the test needs to check that nothing of it is left.
type workloadKro struct {
	kro *v1alpha1.Kro
	// version is the Kro's version as offered.
	version v1alpha1.KroVersion
	// namespace is the tenant's namespace on the workload cluster.
	namespace string
	// token is kro's token for the ControlPlane, from its credential there.
	token string
}

// placeWorkloadKro creates a Kro of a version placed on the workload cluster, with the
// kubeconfig secret of the suite's workload cluster, and plays source-controller's
// artifact of kro's chart.
func placeWorkloadKro(t *testing.T, g Gomega, ns, name string) (*v1alpha1.Kro, v1alpha1.KroVersion) {
	return placeWorkloadKroVia(t, g, ns, name, controlPlane.Kubeconfig)
}

// placeWorkloadKroVia is placeWorkloadKro with the ControlPlane reached through
// kubeconfig (the suite's ControlPlane through a proxy, say).
func placeWorkloadKroVia(t *testing.T, g Gomega, ns, name string, kubeconfig []byte) (*v1alpha1.Kro, v1alpha1.KroVersion) {
	t.Helper()
	ctx := context.Background()
	wl := v1alpha1.KroVersion{Version: uniq("wl"), ChartVersion: "0.9.4", ChartURL: "registry.example.com/charts/kro",
		Placement: v1alpha1.PlacementWorkloadCluster}
	offerVersion(g, wl)
	k := newKro(g, ns, name, wl.Version)
	grantKubeconfig(g, k, kubeconfig)
	g.Expect(platform.Client.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "workload-access", Namespace: tenantNamespace(g, k), Labels: map[string]string{v1alpha1.LabelWorkloadClusterKubeconfig: "true"}},
		Data:       map[string][]byte{owned.KubeconfigKey: bareControlPlane.Kubeconfig},
	})).To(Succeed())
	g.Eventually(func(g Gomega) { getOCIRepository(g, k) }, timeout, interval).Should(Succeed())
	url, digest := serveKroChart(t, g)
	playArtifact(g, k, url, digest)
	return k, wl
}

// readyWorkloadKro brings a Kro of a version placed on the workload cluster to Ready,
// with Flux played, and checks that kro's token works.
func readyWorkloadKro(t *testing.T, g Gomega, ns, name string) *workloadKro {
	return readyWorkloadKroVia(t, g, ns, name, controlPlane.Kubeconfig)
}

// readyWorkloadKroVia is readyWorkloadKro with the ControlPlane reached through kubeconfig.
func readyWorkloadKroVia(t *testing.T, g Gomega, ns, name string, kubeconfig []byte) *workloadKro {
	t.Helper()
	ctx := context.Background()
	k, wl := placeWorkloadKroVia(t, g, ns, name, kubeconfig)
	g.Eventually(func(g Gomega) { getHelmRelease(g, k) }, timeout, interval).Should(Succeed())
	fluxReady(g, getOCIRepository(g, k), metav1.ConditionTrue, "stored artifact")
	kroNS, err := reach.WorkloadNamespace(client.ObjectKeyFromObject(k))
	g.Expect(err).NotTo(HaveOccurred())
	playWorkloadKro(g, bareControlPlane.Client, kroNS)
	fluxReady(g, getHelmRelease(g, k), metav1.ConditionTrue, "Helm install succeeded")
	got := eventuallyCondition(g, k, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReconcileSuccess)
	g.Expect(got.Status.Placement).To(Equal(v1alpha1.PlacementWorkloadCluster))
	workloadNS, err := reach.WorkloadNamespace(client.ObjectKeyFromObject(k))
	g.Expect(err).NotTo(HaveOccurred())
	token := string(credentialtest.Get(g, bareControlPlane.Client, workloadNS).Data[owned.KroCredentialTokenKey])
	_, err = credentialtest.WhoAmI(ctx, tokenConfig(token))
	g.Expect(err).NotTo(HaveOccurred(), "kro's token works on the ControlPlane")
	return &workloadKro{kro: k, version: wl, namespace: workloadNS, token: token}
}

// tokenConfig reaches the suite's ControlPlane with a bearer token.
func tokenConfig(token string) *rest.Config {
	return &rest.Config{Host: controlPlane.Config.Host, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAData: controlPlane.Config.CAData}}
}

// expectWorkloadSideGone checks that nothing the provider made for kro on the workload
// cluster is left: the tenant's namespace there and kro's credential, kro's ServiceAccount
// and RBAC on the ControlPlane; and that kro's token no longer authenticates.
func (w *workloadKro) expectWorkloadSideGone(g Gomega) {
	ctx := context.Background()
	ns := &corev1.Namespace{}
	err := bareControlPlane.Client.Get(ctx, client.ObjectKey{Name: w.namespace}, ns)
	g.Expect(apierrors.IsNotFound(err) || !ns.DeletionTimestamp.IsZero()).To(BeTrue(), "namespace %s on the workload cluster: %v", w.namespace, err)
	err = bareControlPlane.Client.Get(ctx, client.ObjectKey{Namespace: w.namespace, Name: owned.KroCredentialSecretName}, &corev1.Secret{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "secret %s on the workload cluster: %v", owned.KroCredentialSecretName, err)
	err = controlPlane.Client.Get(ctx, owned.KroServiceAccount, &corev1.ServiceAccount{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "kro's ServiceAccount on the ControlPlane: %v", err)
	labels := client.MatchingLabels{v1alpha1.LabelRole: v1alpha1.RoleKroParts, v1alpha1.LabelKroNamespace: w.kro.Namespace}
	var bindings rbacv1.ClusterRoleBindingList
	g.Expect(controlPlane.Client.List(ctx, &bindings, labels)).To(Succeed())
	g.Expect(bindings.Items).To(BeEmpty())
	var roles rbacv1.ClusterRoleList
	g.Expect(controlPlane.Client.List(ctx, &roles, labels)).To(Succeed())
	g.Expect(roles.Items).To(BeEmpty())
	g.Eventually(func() bool {
		_, err := credentialtest.WhoAmI(ctx, tokenConfig(w.token))
		return apierrors.IsUnauthorized(err)
	}, credentialtest.RevocationTimeout, interval).Should(BeTrue(), "kro's token is revoked")
}

// switchVersion points the Kro at another version.
func switchVersion(g Gomega, k *v1alpha1.Kro, version string) {
	g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		got := getKro(g, k)
		got.Spec.Version = version
		return onboarding.Client.Update(context.Background(), got)
	})).To(Succeed())
}

// TestDeletionCleansUpWhereKroIsInstalled: a Kro on a workload-cluster version switched to
// a ControlPlane version whose pull secret is missing waits before the move, so kro stays
// on the workload cluster, and so does the record of it. Deleted then, the Kro leaves
// nothing on the workload cluster or the ControlPlane, and kro's token is revoked.
func TestDeletionCleansUpWhereKroIsInstalled(t *testing.T) {
	g := withClusters(t)
	ns := newNamespace(t, g)
	w := readyWorkloadKro(t, g, ns, "cp-rec-del")

	missing := uniq("missing-pull")
	cp := v1alpha1.KroVersion{Version: uniq("cp"), ChartVersion: "0.9.4", ChartURL: "registry.example.com/charts/kro", ChartPullSecret: missing}
	offerVersion(g, cp)
	// Its missing secret would be named in the ProviderConfig's Ready for the rest of the run.
	t.Cleanup(func() { withdrawVersion(NewWithT(t), cp.Version) })
	switchVersion(g, w.kro, cp.Version)
	g.Eventually(func(g Gomega) {
		got := getKro(g, w.kro)
		c := condition(got, v1alpha1.ConditionPullSecretsReady)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.ObservedGeneration).To(Equal(got.Generation))
		g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(c.Message).To(ContainSubstring(missing))
	}, timeout, interval).Should(Succeed())
	got := getKro(g, w.kro)
	g.Expect(got.Status.Placement).To(Equal(v1alpha1.PlacementWorkloadCluster), "kro is still installed on the workload cluster")
	g.Expect(getHelmRelease(g, w.kro).Spec.TargetNamespace).To(Equal(w.namespace))

	deleteKro(g, w.kro)
	eventuallyGone(g, onboarding.Client, w.kro)
	w.expectWorkloadSideGone(g)
}

// TestInterruptedMoveCleansUpTheOldSide: a move from the workload cluster to the
// ControlPlane whose ControlPlane becomes unreachable (hibernated) between the
// HelmRelease's deletion and its disappearance still removes what kro had on the workload
// cluster before kro is installed on the ControlPlane; the deletion after leaves nothing.
func TestInterruptedMoveCleansUpTheOldSide(t *testing.T) {
	g := withClusters(t)
	ctx := context.Background()
	ns := newNamespace(t, g)
	w := readyWorkloadKro(t, g, ns, "cp-rec-move")
	k := w.kro
	tenant := tenantNamespace(g, k)
	holdRelease(g, k)
	oldHR := getHelmRelease(g, k)

	t.Log("the version moves to the ControlPlane: the HelmRelease is deleted, Flux uninstalls")
	w.version.Placement = v1alpha1.PlacementControlPlane
	offerVersion(g, w.version)
	expectLegacy(g, eventuallyCondition(g, k, v1alpha1.ConditionPlacementMoved, metav1.ConditionFalse, v1alpha1.ReasonMovingPlacement), v1alpha1.ConditionPlacementMoved)
	g.Expect(getHelmRelease(g, k).DeletionTimestamp).NotTo(BeNil())

	t.Log("the ControlPlane hibernates before the uninstall is done")
	access := &corev1.Secret{}
	g.Expect(platform.Client.Get(ctx, client.ObjectKey{Namespace: tenant, Name: "controlplane-access"}, access)).To(Succeed())
	g.Expect(platform.Client.Delete(ctx, access)).To(Succeed())
	got := eventuallyCondition(g, k, v1alpha1.ConditionControlPlaneAccessReady, metav1.ConditionFalse, v1alpha1.ReasonControlPlaneAccessMissing)
	g.Expect(got.Status.Placement).To(Equal(v1alpha1.PlacementWorkloadCluster), "kro has not left the workload cluster")
	letReleaseGo(g, k)
	g.Eventually(func(g Gomega) { g.Expect(getHelmReleaseIfAny(g, k)).To(BeNil()) }, timeout, interval).Should(Succeed())

	t.Log("the ControlPlane is back: the provider leaves the workload cluster, then installs kro on the ControlPlane")
	g.Expect(platform.Client.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: access.Name, Labels: access.Labels}, Data: access.Data,
	})).To(Succeed())
	g.Eventually(func(g Gomega) {
		hr := getHelmRelease(g, k)
		g.Expect(hr.UID).NotTo(Equal(oldHR.UID))
		g.Expect(hr.Spec.TargetNamespace).To(Equal(owned.KroNamespace))
	}, timeout, interval).Should(Succeed())
	w.expectWorkloadSideGone(g)
	g.Expect(getKro(g, k).Status.Placement).To(Equal(v1alpha1.PlacementControlPlane))
	finalizeNamespace(g, bareControlPlane.Client, w.namespace)

	t.Log("the deletion leaves nothing on either side")
	fluxReady(g, getHelmRelease(g, k), metav1.ConditionTrue, "Helm install succeeded")
	eventuallyCondition(g, k, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReconcileSuccess)
	deleteKro(g, k)
	eventuallyGone(g, onboarding.Client, k)
	w.expectWorkloadSideGone(g)
	g.Expect(getHelmReleaseIfAny(g, k)).To(BeNil())
}

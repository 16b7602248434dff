package controllers

import (
	"context"
	"regexp"
	"testing"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/clusters"
	"github.com/openmcp-project/service-provider-kro/config/crd"
	"github.com/openmcp-project/service-provider-kro/controllers/owned"
	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

// A ControlPlane that stops answering after Flux has uninstalled kro still holds the
// provider's objects: the deletion waits for it for the grace period, and names what it
// leaves when it gives up.

// proxiedKubeconfig is cp's kubeconfig through proxy.
func proxiedKubeconfig(cp *testenv.Cluster, proxy *testenv.Proxy) []byte {
	return regexp.MustCompile(`server: \S+`).ReplaceAll(cp.Kubeconfig, []byte("server: "+proxy.Config(cp.Config).Host))
}

// holdReleaseOn gives the HelmRelease helm-controller's finalizer, so that it stays while
// the test plays Flux's uninstall; letReleaseOn ends it.
func holdReleaseOn(g Gomega, c client.Client, hr *helmv2.HelmRelease) {
	g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(hr), hr); err != nil {
			return err
		}
		hr.Finalizers = append(hr.Finalizers, helmv2.HelmReleaseFinalizer)
		return c.Update(context.Background(), hr)
	})).To(Succeed())
}

func letReleaseOn(g Gomega, c client.Client, hr *helmv2.HelmRelease) {
	g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(hr), hr); err != nil {
			return client.IgnoreNotFound(err)
		}
		hr.Finalizers = nil
		return c.Update(context.Background(), hr)
	})).To(Succeed())
}

// managedOnControlPlane are the names of the Kro's status.managedResources on the
// ControlPlane, as "Kind namespace/name" or "Kind name".
func managedOnControlPlane(k *v1alpha1.Kro) []string {
	var out []string
	for _, m := range k.Status.ManagedResources {
		if m.Cluster == owned.ControlPlaneCluster {
			name := m.Name
			if m.Namespace != "" {
				name = m.Namespace + "/" + name
			}
			out = append(out, m.Kind+" "+name)
		}
	}
	return out
}

// TestDeletionGivesUpOnUnreachableControlPlane: a Kro on a workload cluster is deleted;
// once Flux has uninstalled kro, its ControlPlane no longer answers. The deletion waits
// and says so, and after the suite's grace period names kro's ServiceAccount and RBAC
// that it leaves on the ControlPlane in a Warning event; the workload cluster and the
// platform cluster are cleaned up.
func TestDeletionGivesUpOnUnreachableControlPlane(t *testing.T) {
	g := withClusters(t)
	ctx := context.Background()
	ns := newNamespace(t, g)
	proxy, err := testenv.StartProxy(controlPlane.Config)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = proxy.Close() })
	w := readyWorkloadKroVia(t, g, ns, "cp-cut-wl", proxiedKubeconfig(controlPlane, proxy))
	k := w.kro
	tenant := tenantNamespace(g, k)
	t.Cleanup(func() { removeKroParts(controlPlane.Client, ns) })

	hr := getHelmRelease(g, k)
	holdReleaseOn(g, platform.Client, hr)
	deleteKro(g, k)
	g.Eventually(func(g Gomega) {
		g.Expect(getHelmRelease(g, k).DeletionTimestamp).NotTo(BeNil())
		g.Expect(managedOnControlPlane(getKro(g, k))).To(ContainElement("ServiceAccount "+owned.KroServiceAccount.String()),
			"the deletion records kro's ServiceAccount while the ControlPlane answers")
	}, timeout, interval).Should(Succeed())
	recorded := managedOnControlPlane(getKro(g, k))
	g.Expect(recorded).To(ContainElement(HavePrefix("ClusterRole ")))
	g.Expect(recorded).To(ContainElement(HavePrefix("ClusterRoleBinding ")))

	proxy.Cut()
	eventuallyCondition(g, k, v1alpha1.ConditionDeletionBlocked, metav1.ConditionTrue, v1alpha1.ReasonUninstallStuck, "does not answer")
	letReleaseOn(g, platform.Client, hr)

	// The grace period (the suite's 4 s) counts from when the ControlPlane stopped
	// answering, so on a busy machine it can be over before the first reconcile after the
	// uninstall: the wait and its event are TestDeletionWaitsForUnreachableControlPlane's.
	eventuallyGone(g, onboarding.Client, k)
	parts := append([]string{v1alpha1.LabelKroNamespace + "=" + ns}, recorded...)
	eventuallyEvent(g, k, "Warning/"+v1alpha1.ReasonControlPlaneLeftovers, parts...)

	// What was left is there, as the event says; everything else is gone.
	g.Expect(controlPlane.Client.Get(ctx, owned.KroServiceAccount, &corev1.ServiceAccount{})).To(Succeed())
	var bindings rbacv1.ClusterRoleBindingList
	g.Expect(controlPlane.Client.List(ctx, &bindings, client.MatchingLabels{v1alpha1.LabelRole: v1alpha1.RoleKroParts, v1alpha1.LabelKroNamespace: ns})).To(Succeed())
	g.Expect(bindings.Items).NotTo(BeEmpty())
	nsObj := &corev1.Namespace{}
	err = bareControlPlane.Client.Get(ctx, client.ObjectKey{Name: w.namespace}, nsObj)
	g.Expect(apierrors.IsNotFound(err) || !nsObj.DeletionTimestamp.IsZero()).To(BeTrue(), "namespace %s on the workload cluster: %v", w.namespace, err)
	eventuallyGone(g, platform.Client, &sourcev1.OCIRepository{ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: providerName}})
}

// removeKroParts removes what a test left on the suite's ControlPlane on purpose: kro's
// ServiceAccount and the RBAC of the Kros of namespace ns.
func removeKroParts(c client.Client, ns string) {
	ctx := context.Background()
	_ = c.Delete(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: owned.KroServiceAccount.Namespace, Name: owned.KroServiceAccount.Name}})
	labels := client.MatchingLabels{v1alpha1.LabelRole: v1alpha1.RoleKroParts, v1alpha1.LabelKroNamespace: ns}
	_ = c.DeleteAllOf(ctx, &rbacv1.ClusterRoleBinding{}, labels)
	_ = c.DeleteAllOf(ctx, &rbacv1.ClusterRole{}, labels)
}

// TestDeletionWaitsForUnreachableControlPlane: with a grace period longer than the test,
// a deletion whose ControlPlane stops answering after the uninstall keeps the finalizer
// and says why: the ControlPlane and the image pull secret copy still to be removed
// there. Once the ControlPlane answers again, the copy is removed and the Kro goes,
// without an event of anything left.
func TestDeletionWaitsForUnreachableControlPlane(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ob, err := crd.ForCluster(clusters.Onboarding)
	g.Expect(err).NotTo(HaveOccurred())
	pl, err := crd.ForCluster(clusters.Platform)
	g.Expect(err).NotTo(HaveOccurred())
	flux, err := testenv.FluxCRDDirs(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	cs, err := testenv.StartClusters(ctx,
		testenv.ClusterOptions{Name: "wait-onboarding", CRDs: ob},
		testenv.ClusterOptions{Name: "wait-platform", CRDs: pl, CRDDirs: flux},
		testenv.ClusterOptions{Name: "wait-controlplane"},
	)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { testenv.StopClusters(cs...) })
	ob1, pf, cp := cs[0], cs[1], cs[2]

	imageSecret := "image-pull"
	g.Expect(pf.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: podNamespace}})).To(Succeed())
	g.Expect(pf.Client.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: imageSecret, Namespace: podNamespace}, Type: corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"auths":{"example.com":{"auth":"aW1hZ2U="}}}`)},
	})).To(Succeed())
	g.Expect(pf.Client.Create(ctx, &v1alpha1.ProviderConfig{
		ObjectMeta: metav1.ObjectMeta{Name: providerName},
		Spec: v1alpha1.ProviderConfigSpec{
			PollInterval: &metav1.Duration{Duration: suitePollInterval},
			Versions:     []v1alpha1.KroVersion{{Version: baseVersion, ChartVersion: "0.9.3", HelmValues: helmValues(imageSecret)}},
		},
	})).To(Succeed())
	mgr := newTestManager(g, ob1.Config)
	g.Expect(Setup(ctx, mgr, pf.Config, Options{
		ProviderName: providerName, PodNamespace: podNamespace,
		ProbeInterval: 500 * time.Millisecond, MaxBackoff: 2 * time.Second,
		AccessGracePeriod: time.Hour, // longer than the test: only the ControlPlane's answer ends the wait
	})).To(Succeed())
	runTestManager(t, ctx, cancel, mgr)

	proxy, err := testenv.StartProxy(cp.Config)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = proxy.Close() })
	g.Expect(ob1.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "project-a"}})).To(Succeed())
	k := &v1alpha1.Kro{ObjectMeta: metav1.ObjectMeta{Namespace: "project-a", Name: "cut"}, Spec: v1alpha1.KroSpec{Version: baseVersion}}
	g.Expect(ob1.Client.Create(ctx, k)).To(Succeed())
	tenant := tenantNamespace(g, k)
	g.Expect(pf.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tenant}})).To(Succeed())
	g.Expect(pf.Client.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "controlplane-access", Namespace: tenant, Labels: map[string]string{v1alpha1.LabelControlPlaneKubeconfig: "true"}},
		Data:       map[string][]byte{owned.KubeconfigKey: proxiedKubeconfig(cp, proxy)},
	})).To(Succeed())

	getKroOn := func(g Gomega) *v1alpha1.Kro {
		got := &v1alpha1.Kro{}
		g.Expect(ob1.Client.Get(ctx, client.ObjectKeyFromObject(k), got)).To(Succeed())
		return got
	}
	blockedBy := func(g Gomega, reason string, parts ...string) *v1alpha1.Kro {
		var got *v1alpha1.Kro
		g.Eventually(func(g Gomega) {
			got = getKroOn(g)
			c := condition(got, v1alpha1.ConditionDeletionBlocked)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(metav1.ConditionTrue), c.Message)
			g.Expect(c.Reason).To(Equal(reason), c.Message)
			for _, p := range parts {
				g.Expect(c.Message).To(ContainSubstring(p))
			}
		}, timeout, interval).Should(Succeed())
		return got
	}
	hr := getHelmReleaseOn(g, pf, tenant)
	repo := &sourcev1.OCIRepository{}
	g.Eventually(func() error { return pf.Client.Get(ctx, client.ObjectKeyFromObject(hr), repo) }, timeout, interval).Should(Succeed())
	fluxReadyOn(g, pf.Client, repo, metav1.ConditionTrue, "stored artifact")
	fluxReadyOn(g, pf.Client, hr, metav1.ConditionTrue, "Helm install succeeded")
	copyKey := client.ObjectKey{Namespace: owned.KroNamespace, Name: imageSecret}
	g.Eventually(func(g Gomega) {
		g.Expect(cp.Client.Get(ctx, copyKey, &corev1.Secret{})).To(Succeed())
		g.Expect(managedOnControlPlane(getKroOn(g))).To(ContainElement("Secret " + copyKey.String()))
	}, timeout, interval).Should(Succeed())

	holdReleaseOn(g, pf.Client, hr)
	g.Expect(ob1.Client.Delete(ctx, k)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(pf.Client.Get(ctx, client.ObjectKeyFromObject(hr), hr)).To(Succeed())
		g.Expect(hr.DeletionTimestamp).NotTo(BeNil())
	}, timeout, interval).Should(Succeed())
	proxy.Cut()
	blockedBy(g, v1alpha1.ReasonUninstallStuck, "does not answer")
	letReleaseOn(g, pf.Client, hr)

	got := blockedBy(g, v1alpha1.ReasonControlPlaneUnreachable,
		"kro is uninstalled, but ControlPlane project-a/cut cannot be reached", "Secret "+copyKey.String(), "goes on when it answers again")
	g.Expect(got.Status.ControlPlaneUnreachableSince).NotTo(BeNil())
	g.Expect(got.Finalizers).To(ContainElement(v1alpha1.Finalizer))
	g.Expect(managedOnControlPlane(got)).To(ContainElement("Secret "+copyKey.String()), "the copy is still listed, as last seen")
	g.Consistently(func(g Gomega) {
		g.Expect(getKroOn(g).Finalizers).To(ContainElement(v1alpha1.Finalizer))
	}, 2*time.Second, 200*time.Millisecond).Should(Succeed())

	proxy.Heal()
	g.Eventually(func() bool {
		return apierrors.IsNotFound(ob1.Client.Get(ctx, client.ObjectKeyFromObject(k), &v1alpha1.Kro{}))
	}, timeout, interval).Should(BeTrue(), "the Kro goes once its ControlPlane answers")
	g.Expect(apierrors.IsNotFound(cp.Client.Get(ctx, copyKey, &corev1.Secret{}))).To(BeTrue(), "the image pull secret copy is removed from the ControlPlane")
	g.Expect(apierrors.IsNotFound(pf.Client.Get(ctx, client.ObjectKeyFromObject(hr), &sourcev1.OCIRepository{}))).To(BeTrue())
	events := &corev1.EventList{}
	g.Expect(ob1.Client.List(ctx, events, client.InNamespace("project-a"))).To(Succeed())
	for _, e := range events.Items {
		g.Expect(e.Reason).NotTo(Equal(v1alpha1.ReasonControlPlaneLeftovers), e.Message)
	}
}

package controllers

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	. "github.com/onsi/gomega"
	clustersv1alpha1 "github.com/openmcp-project/openmcp-operator/api/clusters/v1alpha1"
	commonapi "github.com/openmcp-project/openmcp-operator/api/common"
	openmcpconst "github.com/openmcp-project/openmcp-operator/api/constants"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/clusters"
	"github.com/openmcp-project/service-provider-kro/config/crd"
	"github.com/openmcp-project/service-provider-kro/controllers/owned"
	"github.com/openmcp-project/service-provider-kro/controllers/reach"
	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

// OpenMCPModule holds the AccessRequest CRD.
const openMCPModule = "github.com/openmcp-project/openmcp-operator/api@v1.3.0"

// TestOpenMCPAccessRequest runs a second provider in openmcp mode on clusters of its own:
// it requests access with an AccessRequest, waits until openmcp (played by the test)
// grants it, engages the ControlPlane from the secret the grant names, and withdraws the
// request at the end of the deletion.
func TestOpenMCPAccessRequest(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	env := startOpenMCP(t, g)
	ob2, pf2, cp2 := env.onboarding, env.platform, env.controlPlane

	g.Expect(ob2.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "project-a"}})).To(Succeed())
	k := &v1alpha1.Kro{ObjectMeta: metav1.ObjectMeta{Namespace: "project-a", Name: "cp-1"}, Spec: v1alpha1.KroSpec{Version: baseVersion}}
	g.Expect(ob2.Client.Create(ctx, k)).To(Succeed())
	tenant, err := owned.TenantNamespace(k)
	g.Expect(err).NotTo(HaveOccurred())
	// openmcp creates the tenant namespace with the ControlPlane.
	g.Expect(client.IgnoreAlreadyExists(pf2.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tenant}}))).To(Succeed())

	want, err := clusters.NewAccessRequest(providerName, client.ObjectKeyFromObject(k))
	g.Expect(err).NotTo(HaveOccurred())
	ar := &clustersv1alpha1.AccessRequest{}
	g.Eventually(func() error { return pf2.Client.Get(ctx, client.ObjectKeyFromObject(want), ar) }, timeout, interval).Should(Succeed())
	g.Expect(ar.Namespace).To(Equal(tenant))
	g.Expect(ar.Spec.RequestRef).To(Equal(&commonapi.ObjectReference{Name: "cp-1", Namespace: tenant}))
	g.Expect(ar.Labels).To(HaveKeyWithValue(openmcpconst.OnboardingNameLabel, "cp-1"))

	getKro2 := func(g Gomega) *v1alpha1.Kro {
		out := &v1alpha1.Kro{}
		g.Expect(ob2.Client.Get(ctx, client.ObjectKeyFromObject(k), out)).To(Succeed())
		return out
	}
	g.Eventually(func(g Gomega) {
		c := condition(getKro2(g), v1alpha1.ConditionControlPlaneAccessReady)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Message).To(ContainSubstring("waiting for openmcp to grant AccessRequest " + tenant + "/" + ar.Name))
	}, timeout, interval).Should(Succeed())

	// openmcp grants the request: a kubeconfig secret, then the status.
	g.Expect(pf2.Client.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: "cp-1.kubeconfig"},
		Data:       map[string][]byte{owned.KubeconfigKey: cp2.Kubeconfig},
	})).To(Succeed())
	ar.Status.Phase = clustersv1alpha1.REQUEST_GRANTED
	ar.Status.SecretRef = &commonapi.LocalObjectReference{Name: "cp-1.kubeconfig"}
	g.Expect(pf2.Client.Status().Update(ctx, ar)).To(Succeed())

	g.Eventually(func(g Gomega) {
		c := condition(getKro2(g), v1alpha1.ConditionControlPlaneAccessReady)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Status).To(Equal(metav1.ConditionTrue), c.Message)
	}, timeout, interval).Should(Succeed())
	hr := getHelmReleaseOn(g, pf2, tenant)
	g.Expect(hr.Spec.KubeConfig.SecretRef.Name).To(Equal("cp-1.kubeconfig"))
	g.Expect(hr.Spec.KubeConfig.SecretRef.Key).To(Equal(owned.KubeconfigKey))

	// Deleting the Kro withdraws the AccessRequest last.
	g.Expect(ob2.Client.Delete(ctx, k)).To(Succeed())
	eventuallyGone(g, ob2.Client, k)
	eventuallyGone(g, pf2.Client, want)
}

// openMCPEnv is a provider in openmcp mode with clusters of its own.
type openMCPEnv struct {
	onboarding, platform, controlPlane *testenv.Cluster
}

// startOpenMCP starts an onboarding, a platform (with openmcp's AccessRequest CRD) and a
// ControlPlane cluster, and a provider in openmcp mode on them, all stopped at the end of
// the test.
func startOpenMCP(t *testing.T, g Gomega) *openMCPEnv {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)

	apiDir, err := testenv.ModuleDir(ctx, openMCPModule)
	g.Expect(err).NotTo(HaveOccurred())
	flux, err := testenv.FluxCRDDirs(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	ob, err := crd.ForCluster(clusters.Onboarding)
	g.Expect(err).NotTo(HaveOccurred())
	pl, err := crd.ForCluster(clusters.Platform)
	g.Expect(err).NotTo(HaveOccurred())
	cs, err := testenv.StartClusters(ctx,
		testenv.ClusterOptions{Name: "openmcp-onboarding", CRDs: ob},
		testenv.ClusterOptions{Name: "openmcp-platform", CRDs: pl,
			CRDDirs: append(flux,
				filepath.Join(apiDir, "crds", "manifests", "clusters.openmcp.cloud_accessrequests.yaml"),
				filepath.Join(apiDir, "crds", "manifests", "clusters.openmcp.cloud_clusterrequests.yaml"),
				filepath.Join(apiDir, "crds", "manifests", "clusters.openmcp.cloud_clusters.yaml"))},
		testenv.ClusterOptions{Name: "openmcp-controlplane"},
	)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { testenv.StopClusters(cs...) })
	env := &openMCPEnv{onboarding: cs[0], platform: cs[1], controlPlane: cs[2]}

	g.Expect(env.platform.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: podNamespace}})).To(Succeed())
	g.Expect(env.platform.Client.Create(ctx, &v1alpha1.ProviderConfig{
		ObjectMeta: metav1.ObjectMeta{Name: providerName},
		Spec: v1alpha1.ProviderConfigSpec{
			PollInterval: &metav1.Duration{Duration: suitePollInterval},
			Versions:     []v1alpha1.KroVersion{{Version: baseVersion, ChartVersion: "0.9.3"}},
		},
	})).To(Succeed())
	mgr := newTestManager(g, env.onboarding.Config)
	g.Expect(Setup(ctx, mgr, env.platform.Config, Options{
		ProviderName: providerName, PodNamespace: podNamespace, Access: reach.AccessOpenMCP,
		ProbeInterval: 500 * time.Millisecond, MaxBackoff: 2 * time.Second,
	})).To(Succeed())
	runTestManager(t, ctx, cancel, mgr)
	return env
}

func getHelmReleaseOn(g Gomega, pf *testenv.Cluster, namespace string) *helmv2.HelmRelease {
	hr := &helmv2.HelmRelease{}
	g.Eventually(func() error {
		return pf.Client.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: providerName}, hr)
	}, timeout, interval).Should(Succeed())
	return hr
}

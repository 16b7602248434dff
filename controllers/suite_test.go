package controllers

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/clusters"
	"github.com/openmcp-project/service-provider-kro/config/crd"
	"github.com/openmcp-project/service-provider-kro/controllers/owned"
	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

const (
	providerName = "kro"
	podNamespace = "provider-system"
	// baseVersion is on offer for the whole run.
	baseVersion = "v0.9.3"
	// suitePollInterval is ten minutes: every reaction the tests wait for must come from
	// a watch, never from the safety-net poll.
	suitePollInterval = 10 * time.Minute
	// suiteAccessGrace is the provider's --access-grace-period in the suite: long enough
	// for a test to replace a kubeconfig secret, short enough to wait for its end.
	suiteAccessGrace = 4 * time.Second
)

var (
	onboarding, platform, controlPlane, bareControlPlane *testenv.Cluster
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctrl.SetLogger(logr.Discard())
	if os.Getenv("TEST_VERBOSE_LOGS") != "" {
		ctrl.SetLogger(zap.New(zap.UseDevMode(true)))
	}
	code := m.Run()
	if err := suite.stop(); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	return code
}

// suite is the shared environment of the integration tests: four API servers and the
// provider's manager on them. It starts with the first test that asks for it
// (withClusters), so that the pure tests of this package run without any API server.
var suite suiteEnv

type suiteEnv struct {
	once     sync.Once
	err      error
	cancel   context.CancelFunc
	clusters []*testenv.Cluster
	mgrDone  chan error
}

// withClusters starts the suite's clusters and the provider on first use and returns a
// Gomega for t; a test that needs them calls it first.
func withClusters(t testing.TB) Gomega {
	t.Helper()
	suite.once.Do(func() { suite.err = startSuite() })
	if suite.err != nil {
		t.Fatalf("starting the suite's clusters and the provider: %v", suite.err)
	}
	return NewWithT(t)
}

func startSuite() error {
	ctx, cancel := context.WithCancel(context.Background())
	suite.cancel = cancel
	cs, err := startClusters(ctx)
	if err != nil {
		return fmt.Errorf("starting clusters: %w", err)
	}
	suite.clusters = cs
	onboarding, platform, controlPlane, bareControlPlane = cs[0], cs[1], cs[2], cs[3]
	if err := prepare(ctx); err != nil {
		return fmt.Errorf("preparing clusters: %w", err)
	}
	suite.mgrDone = make(chan error, 1)
	if err := startManager(ctx, suite.mgrDone); err != nil {
		return fmt.Errorf("starting the manager: %w", err)
	}
	return nil
}

// stop ends what startSuite started, if anything: the manager, then the clusters.
func (s *suiteEnv) stop() error {
	if s.cancel == nil {
		return nil
	}
	s.cancel()
	var err error
	if s.mgrDone != nil {
		if mgrErr := <-s.mgrDone; mgrErr != nil {
			err = fmt.Errorf("manager: %w", mgrErr)
		}
	}
	testenv.StopClusters(s.clusters...)
	return err
}

func startClusters(ctx context.Context) ([]*testenv.Cluster, error) {
	ob, err := crd.ForCluster(clusters.Onboarding)
	if err != nil {
		return nil, err
	}
	pl, err := crd.ForCluster(clusters.Platform)
	if err != nil {
		return nil, err
	}
	flux, err := testenv.FluxCRDDirs(ctx)
	if err != nil {
		return nil, err
	}
	kroCRDs, err := testenv.KroCRDDir(ctx)
	if err != nil {
		return nil, err
	}
	// The earlier provider's AccessRequests (handover_test.go) need openmcp's CRD.
	openmcpAPI, err := testenv.ModuleDir(ctx, openMCPModule)
	if err != nil {
		return nil, err
	}
	flux = append(flux, filepath.Join(openmcpAPI, "crds", "manifests", "clusters.openmcp.cloud_accessrequests.yaml"))
	return testenv.StartClusters(ctx,
		testenv.ClusterOptions{Name: "onboarding", CRDs: ob},
		testenv.ClusterOptions{Name: "platform", CRDs: pl, CRDDirs: flux},
		testenv.ClusterOptions{Name: "controlplane", CRDDirs: []string{kroCRDs}},
		testenv.ClusterOptions{Name: "bare-controlplane", CRDs: []*apiextensionsv1.CustomResourceDefinition{}},
	)
}

func prepare(ctx context.Context) error {
	if err := platform.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: podNamespace}}); err != nil {
		return err
	}
	// A rollout's gate reads kro's Deployment (rollout/health.go, kro_rollout.go).
	if err := testenv.PlayKroDeployment(ctx, controlPlane.Client); err != nil {
		return fmt.Errorf("creating kro's Deployment on the ControlPlane: %w", err)
	}
	pc := &v1alpha1.ProviderConfig{
		ObjectMeta: metav1.ObjectMeta{Name: providerName},
		Spec: v1alpha1.ProviderConfigSpec{
			PollInterval: &metav1.Duration{Duration: suitePollInterval},
			Versions:     []v1alpha1.KroVersion{{Version: baseVersion, ChartVersion: "0.9.3"}},
		},
	}
	return platform.Client.Create(ctx, pc)
}

func startManager(ctx context.Context, done chan<- error) error {
	mgr, err := ctrl.NewManager(onboarding.Config, ctrl.Options{
		Scheme:                 clusters.Scheme,
		Cache:                  owned.OnboardingCacheOptions(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		return err
	}
	if err := Setup(ctx, mgr, platform.Config, Options{ProviderName: providerName, PodNamespace: podNamespace, ProbeInterval: 500 * time.Millisecond, MaxBackoff: 2 * time.Second,
		AccessGracePeriod: suiteAccessGrace}); err != nil {
		return err
	}
	go func() { done <- mgr.Start(ctx) }()
	return nil
}

// --- helpers -------------------------------------------------------------

// newTestManager is a manager on the onboarding cluster of cfg for one test, without
// metrics or probes, whose controllers may repeat the names of the suite's.
func newTestManager(g Gomega, cfg *rest.Config) ctrl.Manager {
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 clusters.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	})
	g.Expect(err).NotTo(HaveOccurred())
	return mgr
}

// runTestManager starts mgr and returns a function that cancels ctx, waits for the
// manager to end and reports its error; the end of the test calls it too, and a second
// call does nothing.
func runTestManager(t *testing.T, ctx context.Context, cancel context.CancelFunc, mgr ctrl.Manager) (stop func()) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("manager: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

const (
	timeout  = 20 * time.Second
	interval = 100 * time.Millisecond
)

// newNamespace creates a namespace on the onboarding cluster for one test.
func newNamespace(t *testing.T, g Gomega) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "t-"}}
	g.Expect(onboarding.Client.Create(context.Background(), ns)).To(Succeed())
	return ns.Name
}

func uniq(prefix string) string { return prefix + "-" + rand.String(6) }

// offerVersion adds (or replaces) a version in the ProviderConfig.
func offerVersion(g Gomega, v v1alpha1.KroVersion) {
	g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pc := &v1alpha1.ProviderConfig{}
		if err := platform.Client.Get(context.Background(), client.ObjectKey{Name: providerName}, pc); err != nil {
			return err
		}
		out := pc.Spec.Versions[:0:0]
		for _, existing := range pc.Spec.Versions {
			if existing.Version != v.Version {
				out = append(out, existing)
			}
		}
		pc.Spec.Versions = append(out, v)
		return platform.Client.Update(context.Background(), pc)
	})).To(Succeed())
}

// withdrawVersion removes a version from the ProviderConfig.
func withdrawVersion(g Gomega, version string) {
	g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pc := &v1alpha1.ProviderConfig{}
		if err := platform.Client.Get(context.Background(), client.ObjectKey{Name: providerName}, pc); err != nil {
			return err
		}
		out := pc.Spec.Versions[:0:0]
		for _, existing := range pc.Spec.Versions {
			if existing.Version != version {
				out = append(out, existing)
			}
		}
		pc.Spec.Versions = out
		return platform.Client.Update(context.Background(), pc)
	})).To(Succeed())
}

func helmValues(imagePullSecrets ...string) *apiextensionsv1.JSON {
	var items []string
	for _, s := range imagePullSecrets {
		items = append(items, fmt.Sprintf(`{"name":%q}`, s))
	}
	return &apiextensionsv1.JSON{Raw: []byte(`{"config":{"logLevel":"debug"},"imagePullSecrets":[` + strings.Join(items, ",") + `]}`)}
}

// sourceSecret creates a pull secret in the provider's namespace.
func sourceSecret(g Gomega, name string, typ corev1.SecretType, payload string) *corev1.Secret {
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: podNamespace},
		Type:       typ,
		Data:       map[string][]byte{},
	}
	if typ == corev1.SecretTypeDockerConfigJson {
		s.Data[corev1.DockerConfigJsonKey] = []byte(`{"auths":{"example.com":{"auth":"` + payload + `"}}}`)
	} else {
		s.Data["token"] = []byte(payload)
	}
	g.Expect(platform.Client.Create(context.Background(), s)).To(Succeed())
	return s
}

func newKro(g Gomega, namespace, name, version string) *v1alpha1.Kro {
	k := &v1alpha1.Kro{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec:       v1alpha1.KroSpec{Version: version},
	}
	g.Expect(onboarding.Client.Create(context.Background(), k)).To(Succeed())
	return k
}

func tenantNamespace(g Gomega, k *v1alpha1.Kro) string {
	ns, err := owned.TenantNamespace(k)
	g.Expect(err).NotTo(HaveOccurred())
	return ns
}

// grantAccess puts the ControlPlane's kubeconfig into the tenant namespace, the way an
// operator does in standalone mode.
func grantAccess(g Gomega, k *v1alpha1.Kro, cp *testenv.Cluster) {
	grantKubeconfig(g, k, cp.Kubeconfig)
}

// grantKubeconfig is grantAccess with a kubeconfig of the test's choice.
func grantKubeconfig(g Gomega, k *v1alpha1.Kro, kubeconfig []byte) {
	ctx := context.Background()
	ns := tenantNamespace(g, k)
	err := platform.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	g.Expect(client.IgnoreAlreadyExists(err)).To(Succeed())
	g.Expect(platform.Client.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "controlplane-access", Namespace: ns, Labels: map[string]string{v1alpha1.LabelControlPlaneKubeconfig: "true"}},
		Data:       map[string][]byte{owned.KubeconfigKey: kubeconfig},
	})).To(Succeed())
}

func getKro(g Gomega, k *v1alpha1.Kro) *v1alpha1.Kro {
	out := &v1alpha1.Kro{}
	g.Expect(onboarding.Client.Get(context.Background(), client.ObjectKeyFromObject(k), out)).To(Succeed())
	return out
}

func condition(k *v1alpha1.Kro, t string) *metav1.Condition {
	return meta.FindStatusCondition(k.Status.Conditions, t)
}

// expectLegacy checks that the legacy condition of a step's own condition carries the same
// status, reason and message (v1alpha1.LegacyConditionOf).
func expectLegacy(g Gomega, k *v1alpha1.Kro, stepCondition string) {
	own, legacy := condition(k, stepCondition), condition(k, v1alpha1.LegacyConditionOf(stepCondition))
	g.Expect(own).NotTo(BeNil(), stepCondition)
	g.Expect(legacy).NotTo(BeNil(), "legacy of %s", stepCondition)
	g.Expect([]string{string(legacy.Status), legacy.Reason, legacy.Message}).To(Equal([]string{string(own.Status), own.Reason, own.Message}),
		"%s carries what %s reports", legacy.Type, stepCondition)
}

// eventuallyCondition waits until the Kro's condition has the status and reason and its
// message contains every given part.
func eventuallyCondition(g Gomega, k *v1alpha1.Kro, t string, status metav1.ConditionStatus, reason string, parts ...string) *v1alpha1.Kro {
	var got *v1alpha1.Kro
	g.Eventually(func(g Gomega) {
		got = getKro(g, k)
		c := condition(got, t)
		g.Expect(c).NotTo(BeNil(), "condition %s in %v", t, got.Status.Conditions)
		g.Expect(c.Status).To(Equal(status), c.Message)
		g.Expect(c.Reason).To(Equal(reason), c.Message)
		g.Expect(c.ObservedGeneration).To(Equal(got.Generation))
		for _, p := range parts {
			g.Expect(c.Message).To(ContainSubstring(p))
		}
	}, timeout, interval).Should(Succeed())
	return got
}

func fluxKey(g Gomega, k *v1alpha1.Kro) client.ObjectKey {
	return client.ObjectKey{Namespace: tenantNamespace(g, k), Name: providerName}
}

func getOCIRepository(g Gomega, k *v1alpha1.Kro) *sourcev1.OCIRepository {
	repo := &sourcev1.OCIRepository{}
	g.Expect(platform.Client.Get(context.Background(), fluxKey(g, k), repo)).To(Succeed())
	return repo
}

func getHelmRelease(g Gomega, k *v1alpha1.Kro) *helmv2.HelmRelease {
	hr := &helmv2.HelmRelease{}
	g.Expect(platform.Client.Get(context.Background(), fluxKey(g, k), hr)).To(Succeed())
	return hr
}

// fluxReady sets the Ready condition of a Flux object through its status subresource,
// the way source- and helm-controller do. For a HelmRelease it also records the release
// as helm-controller does: the chart of its OCIRepository as the last attempted revision
// and, when Ready, as the deployed release at the head of the history.
func fluxReady(g Gomega, obj client.Object, status metav1.ConditionStatus, message string) {
	fluxReadyOn(g, platform.Client, obj, status, message)
}

// fluxReadyOn is fluxReady on another platform cluster.
func fluxReadyOn(g Gomega, c client.Client, obj client.Object, status metav1.ConditionStatus, message string) {
	g.Eventually(func() error {
		return testenv.PlayFluxReady(context.Background(), c, obj, status, message)
	}, timeout, interval).Should(Succeed())
}

// readyKro sets up a Kro of version up to Ready on the suite's ControlPlane, with Flux
// simulated.
func readyKro(t testing.TB, g Gomega, namespace, name, version string) *v1alpha1.Kro {
	t.Helper()
	return readyKroOn(t, g, controlPlane, namespace, name, version)
}

// readyKroOn is readyKro with the Kro's ControlPlane access pointing at cp.
func readyKroOn(t testing.TB, g Gomega, cp *testenv.Cluster, namespace, name, version string) *v1alpha1.Kro {
	t.Helper()
	k := newKro(g, namespace, name, version)
	grantAccess(g, k, cp)
	// What Helm would make: kro's Deployment, which KroAvailable reads.
	g.Expect(testenv.PlayKroDeployment(context.Background(), cp.Client)).To(Succeed())
	g.Eventually(func(g Gomega) { getHelmRelease(g, k) }, timeout, interval).Should(Succeed())
	fluxReady(g, getOCIRepository(g, k), metav1.ConditionTrue, "stored artifact")
	fluxReady(g, getHelmRelease(g, k), metav1.ConditionTrue, "Helm install succeeded")
	k = eventuallyCondition(g, k, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReconcileSuccess)
	g.Expect(k.Status.Phase).To(Equal(v1alpha1.PhaseReady))
	return k
}

// playWorkloadKro makes kro's Deployment as its Helm release does on a workload cluster:
// in the tenant's namespace there, of a release of that namespace's name.
func playWorkloadKro(g Gomega, c client.Client, namespace string) {
	g.Expect(testenv.PlayDeployment(context.Background(), c, testenv.AvailableReleaseDeployment(namespace, namespace))).To(Succeed())
}

// eventuallyGone waits until obj does not exist any more.
func eventuallyGone(g Gomega, c client.Client, obj client.Object) {
	g.Eventually(func() bool {
		err := c.Get(context.Background(), client.ObjectKeyFromObject(obj), obj)
		return apierrors.IsNotFound(err)
	}, timeout, interval).Should(BeTrue(), "%T %s still exists", obj, client.ObjectKeyFromObject(obj))
}

// events returns the events on a Kro as "type/reason: message".
func kroEvents(g Gomega, k *v1alpha1.Kro) []string {
	list := &corev1.EventList{}
	g.Expect(onboarding.Client.List(context.Background(), list, client.InNamespace(k.Namespace))).To(Succeed())
	var out []string
	for _, e := range list.Items {
		if e.InvolvedObject.Name == k.Name && e.InvolvedObject.Kind == "Kro" {
			out = append(out, e.Type+"/"+e.Reason+": "+e.Message)
		}
	}
	return out
}

func eventuallyEvent(g Gomega, k *v1alpha1.Kro, prefix string, parts ...string) {
	g.Eventually(func(g Gomega) {
		var matching []string
		for _, e := range kroEvents(g, k) {
			ok := strings.HasPrefix(e, prefix)
			for _, p := range parts {
				ok = ok && strings.Contains(e, p)
			}
			if ok {
				matching = append(matching, e)
			}
		}
		g.Expect(matching).NotTo(BeEmpty(), "no event %q with %v among %v", prefix, parts, kroEvents(g, k))
	}, timeout, interval).Should(Succeed())
}

func newRGD(g Gomega, c client.Client, name string) *unstructured.Unstructured {
	u := testenv.SchemaRGD(name, "Thing"+strings.ToUpper(name[:1])+rand.String(4))
	g.Expect(c.Create(context.Background(), u)).To(Succeed())
	return u
}

func deleteKro(g Gomega, k *v1alpha1.Kro) {
	g.Expect(onboarding.Client.Delete(context.Background(), k)).To(Succeed())
}

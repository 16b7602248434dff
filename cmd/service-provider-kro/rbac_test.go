package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	. "github.com/onsi/gomega"
	clustersv1alpha1 "github.com/openmcp-project/openmcp-operator/api/clusters/v1alpha1"
	commonapi "github.com/openmcp-project/openmcp-operator/api/common"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/clusters"
	"github.com/openmcp-project/service-provider-kro/config"
	"github.com/openmcp-project/service-provider-kro/controllers/owned"
	"github.com/openmcp-project/service-provider-kro/controllers/reach"
	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

const (
	rbacTimeout    = 60 * time.Second
	rbacInterval   = 200 * time.Millisecond
	rbacProvider   = "kro"
	rbacPullSecret = "registry-credentials"
)

// TestRunWithGeneratedRBAC proves that the generated RBAC is enough: the provider runs
// as `service-provider-kro run` does, authenticated on the onboarding and the platform
// cluster as the ServiceAccounts of config/onboarding and config/platform with nothing
// but the roles generated from the markers in controllers/rbac, with leader election on,
// and takes a Kro through its whole life in standalone mode: tenant namespace, chart pull
// secret copy, OCIRepository, image pull secret copy on the ControlPlane, HelmRelease,
// Ready, events, and a deletion that removes everything. Any request the roles do not
// allow shows up as "forbidden" in the logs, or as a step that never happens.
func TestRunWithGeneratedRBAC(t *testing.T) {
	e := startRBACEnv(t)
	e.samplesAreAccepted(t)
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- dispatch(runCtx, []string{"run",
			"--onboarding-kubeconfig", e.kubeconfigFile(t, config.OnboardingOverlay),
			"--platform-kubeconfig", e.kubeconfigFile(t, config.PlatformOverlay),
			"--provider-name", rbacProvider,
			"--pod-namespace", config.Namespace,
			"--leader-elect", "--leader-election-namespace", config.Namespace,
			"--metrics-bind-address", "0", "--health-probe-bind-address", "0",
		}, io.Discard, e.logs)
	}()
	e.lifecycle(t, func() { e.stop(t, stop, done) }, func(g Gomega, tenant string) {
		// Standalone access: the operator puts the ControlPlane's kubeconfig into the
		// tenant namespace, labelled for the provider.
		g.Expect(e.platform.Client.Create(context.Background(), &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: "controlplane-access", Namespace: tenant, Labels: map[string]string{v1alpha1.LabelControlPlaneKubeconfig: "true"}},
			Data:       map[string][]byte{owned.KubeconfigKey: e.controlPlane.Kubeconfig},
		})).To(Succeed())
	}, nil, nil)
}

// TestOpenMCPModeWithGeneratedRBAC does the same in openmcp mode
// (--controlplane-access=openmcp), where the provider requests access with an
// AccessRequest and reads the secret openmcp names once it has granted it; the test
// grants it as openmcp would. The provider runs as a child process through main(), so
// that its controllers do not meet the other test's in this process, and is stopped
// with SIGTERM as a pod is.
func TestOpenMCPModeWithGeneratedRBAC(t *testing.T) {
	e := startRBACEnv(t)
	g := NewWithT(t)
	addrs, err := testenv.FreeLoopbackAddrs(2)
	g.Expect(err).NotTo(HaveOccurred())
	metricsAddr, probeAddr := addrs[0], addrs[1]
	args := []string{"run",
		"--onboarding-kubeconfig", e.kubeconfigFile(t, config.OnboardingOverlay),
		"--platform-kubeconfig", e.kubeconfigFile(t, config.PlatformOverlay),
		"--controlplane-access", string(reach.AccessOpenMCP),
		"--provider-name", rbacProvider,
		"--pod-namespace", config.Namespace,
		"--leader-elect", "--leader-election-namespace", config.Namespace,
		"--metrics-bind-address", metricsAddr, "--metrics-secure=false", "--health-probe-bind-address", probeAddr,
	}
	stop, done := e.startProvider(t, args)

	var arKey client.ObjectKey
	e.lifecycle(t, func() { e.stop(t, stop, done) }, func(g Gomega, tenant string) {
		// openmcp's part: grant the provider's AccessRequest with a kubeconfig secret.
		ar := &clustersv1alpha1.AccessRequest{}
		g.Eventually(func(g Gomega) {
			list := &clustersv1alpha1.AccessRequestList{}
			g.Expect(e.platform.Client.List(context.Background(), list, client.InNamespace(tenant))).To(Succeed())
			g.Expect(list.Items).To(HaveLen(1))
			*ar = list.Items[0]
		}, rbacTimeout, rbacInterval).Should(Succeed(), "the provider's AccessRequest")
		arKey = client.ObjectKeyFromObject(ar)
		controlPlaneExists(g, e.platform.Client, ar)
		g.Expect(e.platform.Client.Create(context.Background(), &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: "granted-access", Namespace: tenant},
			Data:       map[string][]byte{clusters.KubeconfigKey: e.controlPlane.Kubeconfig},
		})).To(Succeed())
		ar.Status.Phase = clustersv1alpha1.REQUEST_GRANTED
		ar.Status.ObservedGeneration = ar.Generation
		ar.Status.SecretRef = &commonapi.LocalObjectReference{Name: "granted-access"}
		g.Expect(e.platform.Client.Status().Update(context.Background(), ar)).To(Succeed())
	}, nil, func(g Gomega) {
		g.Expect(apierrors.IsNotFound(e.platform.Client.Get(context.Background(), arKey, &clustersv1alpha1.AccessRequest{}))).To(BeTrue(), "AccessRequest")
		// The running binary serves its health and its metrics over HTTP.
		g.Expect(httpGet(g, "http://"+probeAddr+"/readyz")).To(Equal("ok"))
		metrics := httpGet(g, "http://"+metricsAddr+"/metrics")
		for _, want := range []string{
			`(?m)^controller_runtime_reconcile_total\{controller="kro",result="success"\} [1-9]`,
			`(?m)^service_provider_kro_reconcile_outcomes_total\{outcome="ready",reason="ReconcileSuccess"\} [1-9]`,
			`(?m)^service_provider_kro_time_to_ready_seconds_count [1-9]`,
			`(?m)^service_provider_kro_kros\{phase="Ready"\} 0$`,
			`(?m)^service_provider_kro_controlplanes\{phase="Engaged"\} 0$`,
			`(?m)^service_provider_kro_deletions_blocked 0$`,
		} {
			g.Expect(metrics).To(MatchRegexp(want))
		}
	})
}

func httpGet(g Gomega, url string) string {
	resp, err := http.Get(url)
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK), string(body))
	return string(body)
}

// startProvider runs the provider's main() with args in a child process, as a pod
// runs it, with the test's environment (KUBECONFIG and POD_NAMESPACE among it). stop
// sends SIGTERM; done receives the process's end.
func (e *rbacEnv) startProvider(t *testing.T, args []string) (stop func(), done <-chan error) {
	t.Helper()
	return startProviderProcess(t, args, e.logs)
}

// startProviderProcess runs the provider's main() with args in a child process, so that
// its controllers do not meet another test's in this process, with its output to logs.
func startProviderProcess(t *testing.T, args []string, logs io.Writer) (stop func(), done <-chan error) {
	t.Helper()
	g := NewWithT(t)
	data, err := json.Marshal(args)
	g.Expect(err).NotTo(HaveOccurred())
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), providerArgsEnv+"="+string(data))
	cmd.Stdout, cmd.Stderr = logs, logs
	g.Expect(cmd.Start()).To(Succeed())
	t.Cleanup(func() { _ = cmd.Process.Kill() }) // runs last; a no-op once it has stopped
	ch := make(chan error, 1)
	go func() { ch <- cmd.Wait() }()
	return func() { _ = cmd.Process.Signal(syscall.SIGTERM) }, ch
}

// runProvider runs the provider in a child process for the rest of the test, and shows
// its logs when the test fails.
func runProvider(t *testing.T, args []string) {
	t.Helper()
	logs := &syncBuffer{}
	stop, done := startProviderProcess(t, args, logs)
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("the provider ended with %v", err)
		}
		if t.Failed() {
			t.Logf("provider logs:\n%s", logs.String())
		}
	})
}

// providerArgsEnv, when set, makes the test binary run the provider's main() with these
// arguments (a JSON list) instead of the tests.
const providerArgsEnv = "SERVICE_PROVIDER_KRO_TEST_ARGS"

func TestMain(m *testing.M) {
	if args := os.Getenv(providerArgsEnv); args != "" {
		var list []string
		if err := json.Unmarshal([]byte(args), &list); err != nil {
			fmt.Fprintln(os.Stderr, providerArgsEnv+":", err)
			os.Exit(2)
		}
		os.Args = append([]string{"service-provider-kro"}, list...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// rbacEnv is one onboarding, one platform and one ControlPlane cluster with the
// provider's overlays applied and kubeconfigs of its ServiceAccounts.
type rbacEnv struct {
	onboarding, platform, controlPlane *testenv.Cluster
	// kubeconfig of the provider's ServiceAccount, by overlay.
	kubeconfig map[string][]byte
	// logs collects the provider's and client-go's logs.
	logs *syncBuffer
}

func startRBACEnv(t *testing.T) *rbacEnv {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	ob, pf := providerClusterOptions(t, openmcpCRDDir(t))
	kroCRDs, err := testenv.KroCRDDir(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	cs := startClusters(t, ob, pf, testenv.ClusterOptions{Name: "controlplane", CRDDirs: []string{kroCRDs}})
	e := &rbacEnv{onboarding: cs[0], platform: cs[1], controlPlane: cs[2], kubeconfig: map[string][]byte{}, logs: &syncBuffer{}}

	// The overlays as an operator applies them (the CRDs are already there), and
	// kubeconfigs of their ServiceAccounts, which carry no rights of their own.
	for _, target := range []struct {
		cluster *testenv.Cluster
		overlay string
	}{{e.onboarding, config.OnboardingOverlay}, {e.platform, config.PlatformOverlay}} {
		objs, err := config.Render(target.overlay)
		g.Expect(err).NotTo(HaveOccurred())
		for _, o := range objs {
			if o.GetKind() == "CustomResourceDefinition" {
				continue
			}
			g.Expect(target.cluster.Client.Create(ctx, o)).To(Succeed(), "%s %s of config/%s", o.GetKind(), o.GetName(), target.overlay)
		}
		e.kubeconfig[target.overlay], err = target.cluster.ServiceAccountKubeconfig(ctx, config.Namespace, config.ServiceAccount, time.Hour)
		g.Expect(err).NotTo(HaveOccurred())
	}

	// client-go's own logs (refused watches, for one) go where the provider's go.
	klog.SetLogger(zap.New(zap.WriteTo(e.logs)))
	t.Cleanup(klog.ClearLogger)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("provider logs:\n%s", e.logs.String())
		}
	})
	return e
}

// samplesAreAccepted applies the samples of each cluster (config/samples/onboarding,
// config/samples/platform) there with a server-side dry run, in order, as kubectl apply
// -k does, so that the API server's validation (OpenAPI and CEL) judges them.
func (e *rbacEnv) samplesAreAccepted(t *testing.T) {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	for dir, c := range map[string]client.Client{"samples/onboarding": e.onboarding.Client, "samples/platform": e.platform.Client} {
		objs, err := config.Render(dir)
		g.Expect(err).NotTo(HaveOccurred())
		for _, o := range objs {
			if o.GetKind() == "Namespace" {
				g.Expect(client.IgnoreAlreadyExists(c.Create(ctx, o))).To(Succeed(), "sample namespace %s", o.GetName())
				continue
			}
			g.Expect(c.Create(ctx, o, client.DryRunAll)).To(Succeed(), "sample %s %s in %s", o.GetKind(), o.GetName(), dir)
		}
	}
}

// openmcpCRDDir is the folder of openmcp's CRDs (AccessRequest) in the module cache, at
// the version go.mod requires.
func openmcpCRDDir(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/openmcp-project/openmcp-operator/api").Output()
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return filepath.Join(strings.TrimSpace(string(out)), "crds", "manifests")
}

func (e *rbacEnv) kubeconfigFile(t *testing.T, overlay string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), overlay+".kubeconfig")
	NewWithT(t).Expect(os.WriteFile(path, e.kubeconfig[overlay], 0o600)).To(Succeed())
	return path
}

// stop ends the provider and waits for it.
func (e *rbacEnv) stop(t *testing.T, stop func(), done <-chan error) {
	t.Helper()
	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("the provider ended with %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Error("the provider did not stop within 30s")
	}
}

// lifecycle drives a Kro from creation through Ready to its complete deletion with the
// provider running. grant gives the provider access to the ControlPlane once the tenant
// namespace exists; afterReady, if set, runs once the Kro is Ready; gone, if set, checks
// mode-specific objects after the deletion. At the end it stops the provider and fails
// on any refused request in the logs.
func (e *rbacEnv) lifecycle(t *testing.T, stopProvider func(), grant func(Gomega, string), afterReady func(Gomega), gone func(Gomega)) {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	var once sync.Once
	stopOnce := func() { once.Do(stopProvider) }
	t.Cleanup(stopOnce)

	// The platform team's part: a pull secret and the ProviderConfig.
	g.Expect(e.platform.Client.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: rbacPullSecret, Namespace: config.Namespace},
		Type:       corev1.SecretTypeDockerConfigJson,
		Data:       map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"auths":{"registry.example.com":{"auth":"dXNlcjpwYXNz"}}}`)},
	})).To(Succeed())
	g.Expect(e.platform.Client.Create(ctx, &v1alpha1.ProviderConfig{
		ObjectMeta: metav1.ObjectMeta{Name: rbacProvider},
		Spec: v1alpha1.ProviderConfigSpec{Versions: []v1alpha1.KroVersion{{
			Version: "v0.9.4", ChartVersion: "0.9.4", ChartURL: "registry.example.com/kro/charts/kro", ChartPullSecret: rbacPullSecret,
			HelmValues: &apiextensionsv1.JSON{Raw: []byte(`{"imagePullSecrets":[{"name":"` + rbacPullSecret + `"}]}`)},
		}}},
	})).To(Succeed())

	// A tenant's Kro. The provider creates the tenant namespace and copies the chart pull
	// secret into it before it needs the ControlPlane; the OCIRepository waits for the
	// ControlPlane, to go out with the HelmRelease.
	// The samples made the namespace already (samplesAreAccepted).
	g.Expect(client.IgnoreAlreadyExists(e.onboarding.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "project-a"}}))).To(Succeed())
	kro := &v1alpha1.Kro{ObjectMeta: metav1.ObjectMeta{Name: "cp-1", Namespace: "project-a"}, Spec: v1alpha1.KroSpec{Version: "v0.9.4"}}
	g.Expect(e.onboarding.Client.Create(ctx, kro)).To(Succeed())
	tenant, err := owned.TenantNamespace(kro)
	g.Expect(err).NotTo(HaveOccurred())
	fluxKey := client.ObjectKey{Namespace: tenant, Name: rbacProvider}
	chartCopies := func(g Gomega) []corev1.Secret {
		list := &corev1.SecretList{}
		g.Expect(e.platform.Client.List(ctx, list, client.InNamespace(tenant), client.MatchingLabels{v1alpha1.LabelManagedBy: v1alpha1.ManagedByValue})).To(Succeed())
		return list.Items
	}
	g.Eventually(func(g Gomega) {
		g.Expect(e.platform.Client.Get(ctx, client.ObjectKey{Name: tenant}, &corev1.Namespace{})).To(Succeed())
		g.Expect(chartCopies(g)).To(HaveLen(1))
	}, rbacTimeout, rbacInterval).Should(Succeed(), "tenant namespace and chart pull secret copy")

	grant(g, tenant)
	imageCopy := client.ObjectKey{Namespace: owned.KroNamespace, Name: rbacPullSecret}
	g.Eventually(func(g Gomega) {
		g.Expect(e.controlPlane.Client.Get(ctx, imageCopy, &corev1.Secret{})).To(Succeed())
		g.Expect(e.platform.Client.Get(ctx, fluxKey, &sourcev1.OCIRepository{})).To(Succeed())
		g.Expect(e.platform.Client.Get(ctx, fluxKey, &helmv2.HelmRelease{})).To(Succeed())
	}, rbacTimeout, rbacInterval).Should(Succeed(), "image pull secret copy on the ControlPlane, OCIRepository and HelmRelease")

	// Flux's part, simulated: source- and helm-controller report Ready, and kro's
	// Deployment is there as Helm makes it, available.
	setReady(ctx, g, e.platform.Client, &sourcev1.OCIRepository{}, fluxKey)
	setReady(ctx, g, e.platform.Client, &helmv2.HelmRelease{}, fluxKey)
	g.Expect(testenv.PlayKroDeployment(ctx, e.controlPlane.Client)).To(Succeed())
	g.Eventually(func(g Gomega) {
		got := &v1alpha1.Kro{}
		g.Expect(e.onboarding.Client.Get(ctx, client.ObjectKeyFromObject(kro), got)).To(Succeed())
		ready := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady)
		g.Expect(ready).NotTo(BeNil())
		g.Expect(ready.Status).To(Equal(metav1.ConditionTrue), ready.Message)
		g.Expect(got.Status.Phase).To(Equal(v1alpha1.PhaseReady))
	}, rbacTimeout, rbacInterval).Should(Succeed(), "the Kro becomes Ready")
	if afterReady != nil {
		afterReady(g)
	}

	// Events on the Kro (onboarding cluster) and the leader election's Lease and event
	// (platform cluster, provider's namespace) were written with the provider's rights.
	g.Eventually(func(g Gomega) {
		list := &corev1.EventList{}
		g.Expect(e.onboarding.Client.List(ctx, list, client.InNamespace(kro.Namespace))).To(Succeed())
		g.Expect(list.Items).To(ContainElement(HaveField("InvolvedObject.Name", kro.Name)))
	}, rbacTimeout, rbacInterval).Should(Succeed(), "events on the Kro")
	lease := &coordinationv1.Lease{}
	g.Expect(e.platform.Client.Get(ctx, client.ObjectKey{Namespace: config.Namespace, Name: "service-provider-" + rbacProvider}, lease)).To(Succeed())
	g.Expect(lease.Spec.HolderIdentity).NotTo(BeNil())
	g.Eventually(func(g Gomega) {
		list := &corev1.EventList{}
		g.Expect(e.platform.Client.List(ctx, list, client.InNamespace(config.Namespace))).To(Succeed())
		g.Expect(list.Items).To(ContainElement(HaveField("Reason", "LeaderElection")))
	}, rbacTimeout, rbacInterval).Should(Succeed(), "the leader election's event")

	// Deleting the Kro removes everything the provider made, on every cluster.
	g.Expect(e.onboarding.Client.Delete(ctx, kro)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(apierrors.IsNotFound(e.onboarding.Client.Get(ctx, client.ObjectKeyFromObject(kro), &v1alpha1.Kro{}))).To(BeTrue(), "Kro")
		g.Expect(apierrors.IsNotFound(e.platform.Client.Get(ctx, fluxKey, &helmv2.HelmRelease{}))).To(BeTrue(), "HelmRelease")
		g.Expect(apierrors.IsNotFound(e.platform.Client.Get(ctx, fluxKey, &sourcev1.OCIRepository{}))).To(BeTrue(), "OCIRepository")
		g.Expect(chartCopies(g)).To(BeEmpty(), "chart pull secret copy")
		g.Expect(apierrors.IsNotFound(e.controlPlane.Client.Get(ctx, imageCopy, &corev1.Secret{}))).To(BeTrue(), "image pull secret copy")
		if gone != nil {
			gone(g)
		}
	}, rbacTimeout, rbacInterval).Should(Succeed(), "the deletion is complete")

	stopOnce()
	for _, line := range strings.Split(e.logs.String(), "\n") {
		if strings.Contains(strings.ToLower(line), "forbidden") {
			t.Errorf("a request was refused: %s", line)
		}
	}
}

// setReady plays Flux: the object turns Ready, a HelmRelease with its chart deployed.
func setReady(ctx context.Context, g Gomega, c client.Client, obj client.Object, key client.ObjectKey) {
	obj.SetNamespace(key.Namespace)
	obj.SetName(key.Name)
	g.Eventually(func() error {
		return testenv.PlayFluxReady(ctx, c, obj, metav1.ConditionTrue, "simulated")
	}, 20*time.Second, 100*time.Millisecond).Should(Succeed())
}

// syncBuffer is a bytes.Buffer that several goroutines may write to.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

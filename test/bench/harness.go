package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	fluxmeta "github.com/fluxcd/pkg/apis/meta"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/clusters"
	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

// Config are a run's parameters.
type Config struct {
	// Steps are the numbers N of ControlPlanes (on shared API servers) after each burst.
	Steps []int
	// SharedAPIServers serve the N ControlPlanes, each with its own ServiceAccount.
	SharedAPIServers int
	// Dedicated ControlPlanes have an API server of their own; the RGD and image pull
	// secret measurements run on them.
	Dedicated int
	// BurstSize caps how many Kros one burst creates (0: the whole step).
	BurstSize int
	// Concurrency is how many creates the harness has in flight.
	Concurrency int
	// Repeats of the secret and RGD measurements.
	Repeats int
	// IdleWindow is how long the steady state is watched.
	IdleWindow time.Duration
	// ProviderFlags are added to the provider's `run` flags, e.g. --max-concurrent-reconciles=20.
	ProviderFlags []string
	// CPUProfile is how long the provider's CPU profile runs from the start of the last
	// burst (0: none).
	CPUProfile time.Duration
	// FluxControlPlanes is N of RunFlux: kwok ControlPlanes, real Flux, the real chart.
	FluxControlPlanes int
	// FluxShards, in RunFlux, is the number of Flux shard keys the ProviderConfig names,
	// each with a source- and helm-controller pair of its own (0: no shards).
	FluxShards int
	// WorkDir holds the provider binary, kubeconfigs and logs.
	WorkDir string
	// Log receives progress.
	Log io.Writer
}

const (
	providerName     = "kro"
	podNamespace     = "provider-system"
	kroNamespace     = "bench"
	chartSecret      = "chart-creds"
	imageSecret      = "image-creds"
	versionShared    = "v-shared"
	versionDedicated = "v-dedicated"
	chartVersion     = "0.9.4"
	accessSecret     = "controlplane-access"
	pollInterval     = 10 * time.Minute
	defaultChartURL  = "oci://registry.k8s.io/kro/charts/kro"
	waitTimeout      = 5 * time.Minute
)

var writeVerbs = []string{"POST", "PUT", "PATCH", "DELETE", "APPLY"}

type kroRef struct {
	name, tenant string
	version      string
	cp           *testenv.Cluster
	dedicated    int // index into dedicated ControlPlanes, -1 for a shared one
	uid          types.UID
	created      time.Time
}

type harness struct {
	cfg        Config
	onboarding *testenv.Cluster
	platform   *testenv.Cluster
	shared     []*testenv.Cluster
	dedicated  []*testenv.Cluster
	ob, pl     client.Client
	ded        []client.Client
	bin        string
	obKube     string
	plKube     string
	proc       *testenv.Process
	metrics    string
	pprof      string // the provider's pprof address, when profiling
	tr         *tracker
	kros       []*kroRef
	fluxQueue  chan client.Object
	fluxMu     sync.Mutex
	fluxQueued map[string]bool
	// fluxHold: tenant namespaces in which the harness does not play Flux for now.
	fluxHold sync.Map
	// failing: tenant namespaces whose release the harness, as helm-controller, fails
	// (rollout_flux.go).
	failing sync.Map
	procs   int

	// dedConfigs are the ControlPlanes with an API server of their own (in flux mode the
	// kwok ControlPlanes), watched as "dedicated-<i+1>"; ded are clients on them.
	dedConfigs []*rest.Config
	// chartURL is the chart the ProviderConfig offers, without tag.
	chartURL string
	// realFlux: source- and helm-controller run; the harness only watches the Flux objects.
	realFlux bool
	// pullSecretData returns the data of a pull secret; nonce makes it differ from before.
	pullSecretData func(nonce string) map[string][]byte
	// e2e is the real-Flux environment (flux mode only).
	e2e *testenv.E2E
	// fluxShards are the Flux shards' controller pairs, by key (fluxShardKey).
	fluxShards []*testenv.Flux
	// helmUpgrade is how long the harness, playing helm-controller, takes to upgrade a
	// release whose spec changed (0: it marks it Ready at once, as it does an install);
	// upgrades are the upgrades under way (rollout_flux.go).
	helmUpgrade time.Duration
	upgrades    map[string]upgradeState
	upgraded    int

	// placement is the placement of versionShared (placement mode; "" is the ControlPlane).
	placement v1alpha1.Placement
	// withWorkload starts workload, one API server that plays the workload cluster every
	// tenant shares (placement mode).
	withWorkload bool
	workload     *testenv.Cluster
	// hrKubeconfig is the secret a HelmRelease applied as expected names in
	// spec.kubeConfig: the ControlPlane's access secret, or the workload cluster's.
	hrKubeconfig string
	// artifact, when set, is what the harness as source-controller records in each
	// OCIRepository's status.artifact (placement mode: kro's chart served over HTTP).
	artifact *fluxmeta.Artifact
}

func (h *harness) logf(format string, args ...any) {
	fmt.Fprintf(h.cfg.Log, "%s bench: "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

// Run measures provider mode: it starts the clusters and the provider, plays Flux, runs
// every measurement and returns the results. RunFlux measures with real Flux.
func Run(ctx context.Context, cfg Config) (*Results, error) {
	if cfg.Log == nil {
		cfg.Log = os.Stderr
	}
	if cfg.Concurrency < 1 {
		cfg.Concurrency = 1
	}
	if cfg.Repeats < 1 {
		cfg.Repeats = 1
	}
	if cfg.SharedAPIServers < 1 || cfg.Dedicated < 1 || len(cfg.Steps) == 0 {
		return nil, fmt.Errorf("need at least one shared API server, one dedicated ControlPlane and one step")
	}
	if !slices.IsSorted(cfg.Steps) {
		return nil, fmt.Errorf("steps must be ascending: %v", cfg.Steps)
	}
	start := time.Now()
	h := newHarness(cfg)
	res := &Results{Mode: "provider", Started: start.UTC().Truncate(time.Second)}
	res.Params = Params{
		Steps: cfg.Steps, SharedAPIServers: cfg.SharedAPIServers, Dedicated: cfg.Dedicated, BurstSize: cfg.BurstSize,
		Concurrency: cfg.Concurrency, Repeats: cfg.Repeats, IdleWindow: cfg.IdleWindow.String(), PollInterval: pollInterval.String(),
		ProviderFlags: cfg.ProviderFlags,
	}
	res.Machine = machine()
	defer h.stop()
	if err := h.setup(ctx); err != nil {
		return nil, err
	}
	if v, err := discovery.NewDiscoveryClientForConfigOrDie(h.onboarding.Config).ServerVersion(); err == nil {
		res.Machine.KubeAPIServer = v.GitVersion
	}
	if err := h.runAll(ctx, res); err != nil {
		return res, err
	}
	res.Duration = time.Since(start).Round(time.Second).String()
	res.Targets = Evaluate(res)
	return res, nil
}

func newHarness(cfg Config) *harness {
	return &harness{
		cfg: cfg, tr: newTracker(), fluxQueue: make(chan client.Object, 100000), fluxQueued: map[string]bool{},
		chartURL: defaultChartURL, upgrades: map[string]upgradeState{}, hrKubeconfig: accessSecret,
		pullSecretData: func(nonce string) map[string][]byte {
			return map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"auths":{"registry.example.com":{"auth":"` + nonce + `"}}}`)}
		},
	}
}

func (h *harness) stop() {
	if h.proc != nil {
		_ = h.proc.Stop()
	}
	for _, f := range h.fluxShards {
		_ = f.Stop()
	}
	if h.e2e != nil {
		_ = h.e2e.Stop()
		return
	}
	all := append([]*testenv.Cluster{h.onboarding, h.platform, h.workload}, h.shared...)
	testenv.StopClusters(append(all, h.dedicated...)...)
}

func fast(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.QPS, c.Burst = 2000, 4000
	return c
}

func (h *harness) setup(ctx context.Context) error {
	if err := h.setupEnv(ctx); err != nil {
		return err
	}
	return h.startProvider(ctx)
}

// setupEnv builds the provider, starts the clusters and the harness's watches and plays
// Flux: everything but the provider process.
func (h *harness) setupEnv(ctx context.Context) error {
	if err := h.buildProvider(ctx); err != nil {
		return err
	}
	flux, err := testenv.FluxCRDDirs(ctx)
	if err != nil {
		return err
	}
	kroCRDs, err := testenv.KroCRDDir(ctx)
	if err != nil {
		return err
	}
	opts := []testenv.ClusterOptions{{Name: "onboarding"}, {Name: "platform", CRDDirs: flux}}
	for i := range h.cfg.SharedAPIServers {
		opts = append(opts, testenv.ClusterOptions{Name: fmt.Sprintf("shared-%d", i+1), CRDDirs: []string{kroCRDs}})
	}
	for i := range h.cfg.Dedicated {
		opts = append(opts, testenv.ClusterOptions{Name: fmt.Sprintf("dedicated-%d", i+1), CRDDirs: []string{kroCRDs}})
	}
	if h.withWorkload {
		opts = append(opts, testenv.ClusterOptions{Name: "workload"})
	}
	h.logf("starting %d API servers", len(opts))
	cs, err := testenv.StartClusters(ctx, opts...)
	if err != nil {
		return err
	}
	h.onboarding, h.platform = cs[0], cs[1]
	h.shared = cs[2 : 2+h.cfg.SharedAPIServers]
	h.dedicated = cs[2+h.cfg.SharedAPIServers : 2+h.cfg.SharedAPIServers+h.cfg.Dedicated]
	if h.withWorkload {
		h.workload = cs[len(cs)-1]
	}
	for _, d := range h.dedicated {
		h.dedConfigs = append(h.dedConfigs, d.Config)
	}
	if err := h.connect(ctx); err != nil {
		return err
	}
	// kro's Deployment, done with its rollout, for the rollout's health gate; kro does
	// not run here.
	for _, c := range append(append([]*testenv.Cluster{}, h.shared...), h.dedicated...) {
		if err := testenv.PlayKroDeployment(ctx, c.Client); err != nil {
			return fmt.Errorf("kro's Deployment on %s: %w", c.Name, err)
		}
	}
	if err := h.prepareClusters(ctx, []v1alpha1.KroVersion{
		// Shared API servers: no image pull secrets, whose copies would be one object.
		{Version: versionShared, ChartVersion: chartVersion, ChartPullSecret: chartSecret, Placement: h.placement},
		{Version: versionDedicated, ChartVersion: chartVersion, ChartPullSecret: chartSecret, HelmValues: imagePullSecretValues()},
	}); err != nil {
		return err
	}
	if err := h.startWatches(ctx); err != nil {
		return err
	}
	for range 8 {
		go h.fluxWorker(ctx)
	}
	return nil
}

// connect makes the harness's clients, writes the onboarding and platform kubeconfigs
// and runs the provider's init.
func (h *harness) connect(ctx context.Context) error {
	var err error
	if h.ob, err = client.New(fast(h.onboarding.Config), client.Options{Scheme: clusters.Scheme}); err != nil {
		return err
	}
	if h.pl, err = client.New(fast(h.platform.Config), client.Options{Scheme: clusters.Scheme}); err != nil {
		return err
	}
	for _, cfg := range h.dedConfigs {
		c, err := client.New(fast(cfg), client.Options{Scheme: clusters.Scheme})
		if err != nil {
			return err
		}
		h.ded = append(h.ded, c)
	}
	if h.obKube, err = h.onboarding.WriteKubeconfig(h.cfg.WorkDir); err != nil {
		return err
	}
	if h.plKube, err = h.platform.WriteKubeconfig(h.cfg.WorkDir); err != nil {
		return err
	}
	h.logf("service-provider-kro init")
	if out, err := exec.CommandContext(ctx, h.bin, "init", "--onboarding-kubeconfig", h.obKube, "--platform-kubeconfig", h.plKube).CombinedOutput(); err != nil {
		return fmt.Errorf("init: %w: %s", err, out)
	}
	return nil
}

// buildProvider builds the provider binary into the work folder.
func (h *harness) buildProvider(ctx context.Context) error {
	if err := os.MkdirAll(h.cfg.WorkDir, 0o755); err != nil {
		return err
	}
	h.logf("building the provider")
	h.bin = filepath.Join(h.cfg.WorkDir, "service-provider-kro")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", h.bin, "./cmd/service-provider-kro").CombinedOutput(); err != nil {
		return fmt.Errorf("go build: %w: %s", err, out)
	}
	return nil
}

// imagePullSecretValues are Helm values that give kro's chart the image pull secret.
func imagePullSecretValues() *apiextensionsv1.JSON {
	return &apiextensionsv1.JSON{Raw: []byte(`{"imagePullSecrets":[{"name":"` + imageSecret + `"}]}`)}
}

func (h *harness) pullSecret(name, nonce string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: podNamespace},
		Type:       corev1.SecretTypeDockerConfigJson,
		Data:       h.pullSecretData(nonce),
	}
}

// prepareClusters creates the provider's namespace, its two pull secrets, the
// ProviderConfig offering versions, and the Kros' namespace.
func (h *harness) prepareClusters(ctx context.Context, versions []v1alpha1.KroVersion) error {
	for _, o := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: podNamespace}},
		h.pullSecret(chartSecret, "initial"),
		h.pullSecret(imageSecret, "initial"),
		&v1alpha1.ProviderConfig{
			ObjectMeta: metav1.ObjectMeta{Name: providerName},
			Spec: v1alpha1.ProviderConfigSpec{
				PollInterval: &metav1.Duration{Duration: pollInterval},
				Versions:     versions,
				FluxShards:   h.fluxShardKeys(),
			},
		},
	} {
		if err := h.pl.Create(ctx, o); err != nil {
			return fmt.Errorf("creating %T %s: %w", o, o.GetName(), err)
		}
	}
	return h.ob.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: kroNamespace}})
}

func (h *harness) startProvider(ctx context.Context) error {
	addrs, err := testenv.FreeLoopbackAddrs(3)
	if err != nil {
		return err
	}
	h.metrics = "http://" + addrs[0] + "/metrics"
	h.procs++
	args := []string{"run",
		"--onboarding-kubeconfig", h.obKube, "--platform-kubeconfig", h.plKube, "--pod-namespace", podNamespace,
		"--metrics-bind-address", addrs[0], "--metrics-secure=false", "--health-probe-bind-address", addrs[1]}
	if h.cfg.CPUProfile > 0 {
		h.pprof = addrs[2]
		args = append(args, "--pprof-bind-address", addrs[2])
	}
	args = append(args, h.cfg.ProviderFlags...)
	h.proc, err = testenv.StartProcess(fmt.Sprintf("provider-%d", h.procs), h.cfg.WorkDir, []string{"HOME=" + h.cfg.WorkDir}, h.bin, args...)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if resp, err := http.Get("http://" + addrs[1] + "/readyz"); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-h.proc.Exited():
			return fmt.Errorf("the provider exited: %w\n%s", h.proc.ExitError(), h.proc.LogTail(30))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("the provider did not become ready:\n%s", h.proc.LogTail(30))
}

// rgd is a ResourceGraphDefinition the way a tenant writes one.
func rgd(name string) *unstructured.Unstructured {
	return testenv.SchemaRGD(name, "BenchThing"+strings.ReplaceAll(strings.ToUpper(name[:1])+name[1:], "-", ""))
}

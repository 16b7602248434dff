// Package env composes the end-to-end environment that both the e2e suite (test/e2e)
// and the sandbox (test/sandbox, `task up`) run: an onboarding cluster, a platform
// cluster with Flux (source-controller and helm-controller), a TLS registry with basic
// auth holding kro's real chart at two versions, ControlPlanes, and the provider itself,
// built from this repository and run as a process (`init`, then `run`), in standalone
// access mode: each ControlPlane's kubeconfig is a labelled secret in its tenant
// namespace.
//
// Two backends provide the clusters (see Backend): processes (envtest API servers and
// kwok ControlPlanes; the default, needs only Go), where Flux, the registry and the
// provider run as local processes, and kind (needs Docker), where the provider, Flux and
// kro run as pods the way a platform team deploys them (kind.go).
package env

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/clusters"
	"github.com/openmcp-project/service-provider-kro/controllers/owned"
	"github.com/openmcp-project/service-provider-kro/controllers/reach"
	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

// Backend says what provides the clusters.
type Backend string

const (
	// BackendProcess means envtest API servers for onboarding and platform, kwok clusters
	// (kube-apiserver, controller-manager, scheduler and fake nodes as processes) for the
	// ControlPlanes, and kro's controller as a process against each ControlPlane.
	BackendProcess Backend = "process"
	// BackendKind means kind clusters from the offline node image (test/kind): a platform
	// cluster that is the onboarding cluster too, where the provider and Flux run as pods,
	// and one per ControlPlane, where kro runs as its chart deploys it (see kind.go).
	BackendKind Backend = "kind"
)

// BackendVariable names the environment variable that chooses the backend.
const BackendVariable = "E2E_CLUSTERS"

// BackendFromEnvironment reads BackendVariable: "kind" or "process" (the default).
func BackendFromEnvironment() (Backend, error) {
	switch b := Backend(os.Getenv(BackendVariable)); b {
	case "", BackendProcess:
		return BackendProcess, nil
	case BackendKind:
		return BackendKind, nil
	default:
		return "", fmt.Errorf("%s=%q: want %q or %q", BackendVariable, b, BackendProcess, BackendKind)
	}
}

// Defaults of Options.
const (
	DefaultProviderName = "kro"
	// DefaultPodNamespace is the namespace config/ installs the provider into, and the
	// one docs/operations.md's `run` names.
	DefaultPodNamespace = "service-provider-kro-system"
	// PullSecretName is the registry's credentials in the provider's namespace: the
	// chart pull secret of both versions and the image pull secret of v0.9.4.
	PullSecretName = "registry-credentials"
)

// ControlPlaneRef names a ControlPlane: its Kro on the onboarding cluster carries the
// same name and namespace.
type ControlPlaneRef struct {
	Name, Namespace string
}

// DefaultControlPlanes are the ControlPlanes the environment starts by default.
var DefaultControlPlanes = []ControlPlaneRef{{"cp-1", "project-a"}, {"cp-2", "project-b"}}

// Options configures Start.
type Options struct {
	// Dir holds every process's files and logs.
	Dir string
	// Log receives progress lines.
	Log io.Writer
	// Backend provides the clusters; default BackendProcess.
	Backend Backend
	// ControlPlanes to start; default DefaultControlPlanes.
	ControlPlanes []ControlPlaneRef
	// ProviderName and PodNamespace are the provider's flags; defaults DefaultProviderName
	// and DefaultPodNamespace.
	ProviderName, PodNamespace string
	// KindClusterPrefix prefixes the kind clusters' names; default "kro-e2e-".
	KindClusterPrefix string
	// ProviderArgs are more flags for `service-provider-kro run`, after the environment's
	// own (e.g. "--access-grace-period=20s").
	ProviderArgs []string
	// FluxWatchLabelSelector is the --watch-label-selector of the environment's Flux
	// controllers (process backend), e.g. "!sharding.fluxcd.io/key" beside Flux shards.
	FluxWatchLabelSelector string
}

// Cluster is one cluster of the environment.
type Cluster struct {
	// Name is the cluster's role: "onboarding", "platform" or the ControlPlane's name.
	Name string
	// Config authenticates as a cluster admin.
	Config *rest.Config
	// Client is a client on Config with clusters.Scheme.
	Client client.Client
	// Kubeconfig is self-contained (server, CA and credentials inline).
	Kubeconfig []byte
}

// ControlPlane is a tenant's cluster.
type ControlPlane struct {
	Cluster
	// Namespace is the namespace of the ControlPlane (and of its Kro) on the onboarding
	// cluster.
	Namespace string
	// TenantNamespace is the ControlPlane's namespace on the platform cluster.
	TenantNamespace string
}

// Env is the running environment.
type Env struct {
	Backend              Backend
	Dir                  string
	Onboarding, Platform *Cluster
	ControlPlanes        []*ControlPlane
	Registry             *testenv.OCIRegistry
	// Release is what the kind backend installs the provider from (pushKindImages).
	Release                  *Release
	ChartURL                 string
	ProviderName             string
	PodNamespace             string
	Provider                 *testenv.Process
	ProviderBinary           string
	Timings                  []testenv.Timing
	log                      io.Writer
	kros                     kroControllers
	faults                   faultHandles
	stopBackend              func() error
	stopOnce                 sync.Once
	stopErr                  error
	providerMetrics, probeAt string
	providerArgs             []string
	replicas                 []*Replica
	fluxShards               []*testenv.Flux
	kind                     *kindBackend
}

// Start builds what is missing and starts the whole environment: the clusters, the
// registry with the kro charts, Flux, the provider (after its `init`), the provider's
// pull secret, ProviderConfig, tenant namespaces and ControlPlane access secrets. On
// error whatever was started is stopped again; otherwise call Stop.
func Start(ctx context.Context, opts Options) (_ *Env, err error) {
	opts.defaults()
	if opts.Backend == BackendKind {
		return startKind(ctx, opts)
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	e := &Env{
		Backend: opts.Backend, Dir: dir, ProviderName: opts.ProviderName, PodNamespace: opts.PodNamespace,
		log: opts.Log, providerArgs: opts.ProviderArgs,
	}
	defer func() {
		if err != nil {
			_ = e.Stop()
		}
	}()

	if err := e.step("build provider", func() error {
		e.ProviderBinary, err = BuildProvider(ctx, opts.Log)
		return err
	}); err != nil {
		return nil, err
	}
	switch opts.Backend {
	case BackendProcess:
		err = e.startProcessBackend(ctx, opts)
	default:
		err = fmt.Errorf("unknown backend %q", opts.Backend)
	}
	if err != nil {
		return nil, err
	}
	for _, cp := range e.ControlPlanes {
		kro := &v1alpha1.Kro{ObjectMeta: metav1.ObjectMeta{Name: cp.Name, Namespace: cp.Namespace}}
		if cp.TenantNamespace, err = owned.TenantNamespace(kro); err != nil {
			return nil, err
		}
	}
	if err := e.step("provider init", func() error { return e.providerInit(ctx) }); err != nil {
		return nil, err
	}
	if err := e.step("platform objects", func() error { return e.setUpPlatform(ctx) }); err != nil {
		return nil, err
	}
	if err := e.step("provider run", func() error { return e.startProvider(ctx) }); err != nil {
		return nil, err
	}
	return e, nil
}

func (o *Options) defaults() {
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.Backend == "" {
		o.Backend = BackendProcess
	}
	if o.ControlPlanes == nil {
		o.ControlPlanes = DefaultControlPlanes
	}
	if o.ProviderName == "" {
		o.ProviderName = DefaultProviderName
	}
	if o.PodNamespace == "" {
		o.PodNamespace = DefaultPodNamespace
	}
	if o.KindClusterPrefix == "" {
		o.KindClusterPrefix = "kro-e2e-"
	}
}

func (e *Env) step(name string, f func() error) error {
	return runStep(e.log, &e.Timings, name, f)
}

func (e *Env) startProcessBackend(ctx context.Context, opts Options) error {
	names := make([]string, 0, len(opts.ControlPlanes))
	for _, cp := range opts.ControlPlanes {
		names = append(names, cp.Name)
	}
	pc, err := startProcessClusters(ctx, opts.Log, filepath.Join(e.Dir, "env"), names, opts.FluxWatchLabelSelector)
	if err != nil {
		return err
	}
	e.stopBackend = pc.stop
	e.faults = faultHandles{te: pc.te, flux: pc.te.Flux, platform: pc.te.Platform}
	e.Timings = append(e.Timings, pc.timings...)
	e.Platform, e.Onboarding = pc.platform, pc.onboarding
	e.Registry, e.ChartURL = pc.registry, pc.chartURL
	for i, ref := range opts.ControlPlanes {
		e.ControlPlanes = append(e.ControlPlanes, &ControlPlane{Cluster: *pc.controlPlanes[i], Namespace: ref.Namespace})
	}
	return nil
}

// ControlPlane returns the ControlPlane of that name, or nil.
func (e *Env) ControlPlane(name string) *ControlPlane {
	for _, cp := range e.ControlPlanes {
		if cp.Name == name {
			return cp
		}
	}
	return nil
}

// BuildProvider builds the provider binary from this repository into .cache/e2e/ and
// returns its path. Go's build cache makes a rebuild cheap.
func BuildProvider(ctx context.Context, log io.Writer) (string, error) {
	return buildProvider(ctx, log, filepath.Join(".cache", "e2e", "service-provider-kro"))
}

// KubeconfigPath writes a cluster's kubeconfig into the environment's folder (once)
// and returns its path.
func (e *Env) KubeconfigPath(c *Cluster) (string, error) {
	dir := filepath.Join(e.Dir, "kubeconfigs")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(dir, c.Name+".kubeconfig")
	return path, os.WriteFile(path, c.Kubeconfig, 0o600)
}

func (e *Env) providerInit(ctx context.Context) error {
	ob, err := e.KubeconfigPath(e.Onboarding)
	if err != nil {
		return err
	}
	pf, err := e.KubeconfigPath(e.Platform)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, e.ProviderBinary, "init", "--onboarding-kubeconfig", ob, "--platform-kubeconfig", pf)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("service-provider-kro init: %w\n%s", err, out)
	}
	return nil
}

// setUpPlatform creates the provider's namespace with the registry's pull secret, the
// ProviderConfig, and per ControlPlane its tenant namespace with the access secret.
func (e *Env) setUpPlatform(ctx context.Context) error {
	pc := e.Platform.Client
	if err := createIfMissing(ctx, pc, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: e.PodNamespace}}); err != nil {
		return err
	}
	if err := createIfMissing(ctx, pc, e.Registry.PullSecret(e.PodNamespace, PullSecretName)); err != nil {
		return err
	}
	if err := createIfMissing(ctx, pc, e.ProviderConfig()); err != nil {
		return err
	}
	for _, cp := range e.ControlPlanes {
		if err := createIfMissing(ctx, pc, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: cp.TenantNamespace}}); err != nil {
			return err
		}
		if err := createIfMissing(ctx, pc, e.AccessSecret(cp)); err != nil {
			return err
		}
	}
	return nil
}

// AccessSecretName is the name of the ControlPlane kubeconfig secret in a tenant namespace.
const AccessSecretName = "controlplane-kubeconfig"

// AccessSecret is the standalone access secret of a ControlPlane: its kubeconfig in its
// tenant namespace, labelled for the provider.
func (e *Env) AccessSecret(cp *ControlPlane) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: cp.TenantNamespace,
			Name:      AccessSecretName,
			Labels:    map[string]string{v1alpha1.LabelControlPlaneKubeconfig: "true"},
		},
		Data: map[string][]byte{owned.KubeconfigKey: cp.Kubeconfig},
	}
}

// ProviderConfig offers v0.9.3 and v0.9.4 of kro, both from the environment's
// registry with its pull secret; v0.9.4 also passes it as image pull secret to the chart.
func (e *Env) ProviderConfig() *v1alpha1.ProviderConfig {
	values, _ := json.Marshal(map[string]any{"imagePullSecrets": []map[string]string{{"name": PullSecretName}}})
	if e.Backend == BackendKind {
		return e.kindProviderConfig()
	}
	return &v1alpha1.ProviderConfig{
		ObjectMeta: metav1.ObjectMeta{Name: e.ProviderName},
		Spec: v1alpha1.ProviderConfigSpec{
			PollInterval: &metav1.Duration{Duration: 10 * time.Second},
			Versions: []v1alpha1.KroVersion{
				{Version: "v0.9.3", ChartVersion: "0.9.3", ChartURL: e.ChartURL, ChartPullSecret: PullSecretName},
				{
					Version: "v0.9.4", ChartVersion: "0.9.4", ChartURL: e.ChartURL, ChartPullSecret: PullSecretName,
					HelmValues: &apiextensionsv1.JSON{Raw: values},
				},
			},
		},
	}
}

func createIfMissing(ctx context.Context, c client.Client, obj client.Object) error {
	if err := c.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating %T %s: %w", obj, client.ObjectKeyFromObject(obj), err)
	}
	return nil
}

func (e *Env) startProvider(ctx context.Context) error {
	p, metrics, probe, err := e.runProvider(ctx, "service-provider-kro", "provider")
	if err != nil {
		return err
	}
	e.Provider, e.providerMetrics, e.probeAt = p, metrics, probe
	return nil
}

// runProvider starts one provider process with the environment's flags, the
// ProviderArgs and extra, on free metrics and probe ports, logging into logDir, and waits
// until it is ready.
func (e *Env) runProvider(ctx context.Context, name, logDir string, extra ...string) (_ *testenv.Process, metrics, probe string, _ error) {
	ob, err := e.KubeconfigPath(e.Onboarding)
	if err != nil {
		return nil, "", "", err
	}
	pf, err := e.KubeconfigPath(e.Platform)
	if err != nil {
		return nil, "", "", err
	}
	addrs, err := testenv.FreeLoopbackAddrs(2)
	if err != nil {
		return nil, "", "", err
	}
	args := append([]string{"run",
		"--onboarding-kubeconfig", ob,
		"--platform-kubeconfig", pf,
		"--provider-name", e.ProviderName,
		"--pod-namespace", e.PodNamespace,
		"--controlplane-access", string(reach.AccessStandalone),
		"--controlplane-probe-interval", "5s",
		"--metrics-bind-address", addrs[0], "--metrics-secure=false", // scraped over plain HTTP
		"--health-probe-bind-address", addrs[1],
	}, append(slices.Clone(e.providerArgs), extra...)...)
	p, err := testenv.StartProcess(name, filepath.Join(e.Dir, logDir), []string{"HOME=" + e.Dir}, e.ProviderBinary, args...)
	if err != nil {
		return nil, "", "", err
	}
	return p, addrs[0], addrs[1], waitReady(ctx, p, "http://"+addrs[1]+"/readyz")
}

// MetricsURL is the provider's metrics endpoint.
func (e *Env) MetricsURL() string { return "http://" + e.providerMetrics + "/metrics" }

// readyTimeout is how long a provider process has to report ready.
const readyTimeout = time.Minute

// waitReady waits until a provider process answers url (its /readyz) with 200, for
// readyTimeout at most.
func waitReady(ctx context.Context, p *testenv.Process, url string) error {
	hc := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(readyTimeout)
	for {
		if err := p.ExitError(); err != nil {
			return fmt.Errorf("%w\n%s", err, p.LogTail(30))
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if resp, err := hc.Do(req); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready at %s after %s\n%s", p.Name, url, readyTimeout, p.LogTail(30))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// RGDCRD is the name of kro's ResourceGraphDefinition CRD.
const RGDCRD = "resourcegraphdefinitions.kro.run"

// StartKroController runs kro's controller against a ControlPlane once its chart has
// installed kro's CRDs (it waits for them). On kind, kro runs in the ControlPlane as the
// chart deploys it and this does nothing. Calling it again for the same ControlPlane
// does nothing either.
func (e *Env) StartKroController(ctx context.Context, cp *ControlPlane) error {
	if e.Backend != BackendProcess {
		return nil
	}
	return e.kros.start(ctx, e.log, e.Dir, &cp.Cluster)
}

// Stop stops everything: the provider first, then kro's controllers, Flux, the registry
// and the clusters. It is safe on a partly started environment and more than once.
func (e *Env) Stop() error {
	if e == nil {
		return nil
	}
	e.stopOnce.Do(func() {
		errs := []error{e.Provider.Stop(), e.kros.stopAll()}
		for _, r := range e.replicas {
			errs = append(errs, r.Process.Stop())
		}
		for _, f := range e.fluxShards {
			errs = append(errs, f.Stop())
		}
		if e.stopBackend != nil {
			errs = append(errs, e.stopBackend())
		}
		e.stopErr = errors.Join(errs...)
	})
	return e.stopErr
}

// newCluster makes a Cluster from a self-contained kubeconfig.
func newCluster(name string, kubeconfig []byte) (*Cluster, error) {
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig of %s: %w", name, err)
	}
	c, err := client.New(cfg, client.Options{Scheme: clusters.Scheme})
	if err != nil {
		return nil, err
	}
	return &Cluster{Name: name, Config: cfg, Client: c, Kubeconfig: kubeconfig}, nil
}

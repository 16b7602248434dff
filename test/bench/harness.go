package bench

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/clusters"
	"github.com/openmcp-project/service-provider-kro/controllers"
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
	// FluxControlPlanes is N of RunFlux: kwok ControlPlanes, real Flux, the real chart.
	FluxControlPlanes int
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
	tr         *tracker
	kros       []*kroRef
	fluxQueue  chan client.Object
	fluxMu     sync.Mutex
	fluxQueued map[string]bool
	// fluxHold: tenant namespaces in which the harness does not play Flux for now.
	fluxHold sync.Map
	procs    int

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
		chartURL: defaultChartURL,
		pullSecretData: func(nonce string) map[string][]byte {
			return map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"auths":{"registry.example.com":{"auth":"` + nonce + `"}}}`)}
		},
	}
}

func (h *harness) stop() {
	if h.proc != nil {
		_ = h.proc.Stop()
	}
	if h.e2e != nil {
		_ = h.e2e.Stop()
		return
	}
	all := append([]*testenv.Cluster{h.onboarding, h.platform}, h.shared...)
	testenv.StopClusters(append(all, h.dedicated...)...)
}

func fast(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.QPS, c.Burst = 2000, 4000
	return c
}

func (h *harness) setup(ctx context.Context) error {
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
	h.logf("starting %d API servers", len(opts))
	cs, err := testenv.StartClusters(ctx, opts...)
	if err != nil {
		return err
	}
	h.onboarding, h.platform = cs[0], cs[1]
	h.shared = cs[2 : 2+h.cfg.SharedAPIServers]
	h.dedicated = cs[2+h.cfg.SharedAPIServers:]
	for _, d := range h.dedicated {
		h.dedConfigs = append(h.dedConfigs, d.Config)
	}
	if err := h.connect(ctx); err != nil {
		return err
	}
	if err := h.prepareClusters(ctx, []v1alpha1.KroVersion{
		// Shared API servers: no image pull secrets, whose copies would be one object.
		{Version: versionShared, ChartVersion: chartVersion, ChartPullSecret: chartSecret},
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
	return h.startProvider(ctx)
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
	addrs, err := testenv.FreeLoopbackAddrs(2)
	if err != nil {
		return err
	}
	h.metrics = "http://" + addrs[0] + "/metrics"
	h.procs++
	args := append([]string{"run",
		"--onboarding-kubeconfig", h.obKube, "--platform-kubeconfig", h.plKube, "--pod-namespace", podNamespace,
		"--metrics-bind-address", addrs[0], "--health-probe-bind-address", addrs[1]}, h.cfg.ProviderFlags...)
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

// --- watches --------------------------------------------------------------------

// tracker remembers when the harness first saw each event of interest.
type tracker struct {
	mu       sync.Mutex
	first    map[string]time.Time
	adds     map[string][]time.Time
	counting atomic.Bool
	changes  atomic.Int64
	byKind   map[string]int
	// notReady lists, while counting, the distinct reasons and messages of Kros seen not Ready.
	notReady map[string]int
}

func newTracker() *tracker {
	return &tracker{first: map[string]time.Time{}, adds: map[string][]time.Time{}, byKind: map[string]int{}, notReady: map[string]int{}}
}

func (t *tracker) mark(key string, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.first[key]; !ok {
		t.first[key] = at
	}
}

func (t *tracker) added(key string, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.adds[key] = append(t.adds[key], at)
}

func (t *tracker) changed(kind string) {
	if t.counting.Load() {
		t.changes.Add(1)
		t.mu.Lock()
		t.byKind[kind]++
		t.mu.Unlock()
	}
}

func (t *tracker) sawNotReady(what string) {
	if t.counting.Load() {
		t.mu.Lock()
		t.notReady[what]++
		t.mu.Unlock()
	}
}

// startCounting counts object changes from now on; stopCounting returns how many, by
// kind, and the distinct not-Ready states of Kros seen meanwhile.
func (t *tracker) startCounting() {
	t.mu.Lock()
	t.byKind, t.notReady = map[string]int{}, map[string]int{}
	t.mu.Unlock()
	t.changes.Store(0)
	t.counting.Store(true)
}

func (t *tracker) stopCounting() (int, map[string]int, map[string]int) {
	t.counting.Store(false)
	t.mu.Lock()
	defer t.mu.Unlock()
	return int(t.changes.Load()), t.byKind, t.notReady
}

// wait returns the times of keys once all were seen.
func (t *tracker) wait(ctx context.Context, keys []string, what string) (map[string]time.Time, error) {
	deadline := time.Now().Add(waitTimeout)
	for {
		t.mu.Lock()
		out := map[string]time.Time{}
		var missing []string
		for _, k := range keys {
			if at, ok := t.first[k]; ok {
				out[k] = at
			} else {
				missing = append(missing, k)
			}
		}
		t.mu.Unlock()
		if len(missing) == 0 {
			return out, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("waiting for %s: %d of %d not seen, e.g. %s", what, len(missing), len(keys), missing[0])
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// waitAddedAfter returns when key was next added after after.
func (t *tracker) waitAddedAfter(ctx context.Context, key string, after time.Time) (time.Time, error) {
	deadline := time.Now().Add(waitTimeout)
	for {
		t.mu.Lock()
		for _, at := range t.adds[key] {
			if at.After(after) {
				t.mu.Unlock()
				return at, nil
			}
		}
		t.mu.Unlock()
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("waiting for %s to be created again", key)
		}
		select {
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func fingerprint(data map[string][]byte) string {
	keys := slices.Sorted(maps.Keys(data))
	sum := sha256.New()
	for _, k := range keys {
		sum.Write([]byte(k))
		sum.Write([]byte{0})
		sum.Write(data[k])
		sum.Write([]byte{0})
	}
	return hex.EncodeToString(sum.Sum(nil))[:12]
}

type handlers struct {
	add    func(obj any, at time.Time)
	update func(obj any, at time.Time)
	del    func(obj any, at time.Time)
}

func (h *harness) watch(ctx context.Context, c cache.Cache, cluster string, obj client.Object, hs handlers) error {
	kind := fmt.Sprintf("%s %T", cluster, obj)
	kind = kind[:strings.LastIndex(kind, " ")+1] + kind[strings.LastIndex(kind, ".")+1:]
	inf, err := c.GetInformer(ctx, obj)
	if err != nil {
		return err
	}
	_, err = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(o any) {
			at := time.Now()
			h.tr.changed(kind)
			if hs.add != nil {
				hs.add(o, at)
			}
		},
		UpdateFunc: func(_, o any) {
			at := time.Now()
			h.tr.changed(kind)
			if hs.update != nil {
				hs.update(o, at)
			}
		},
		DeleteFunc: func(o any) {
			at := time.Now()
			h.tr.changed(kind)
			if t, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
				o = t.Obj
			}
			if hs.del != nil {
				hs.del(o, at)
			}
		},
	})
	return err
}

func (h *harness) startWatches(ctx context.Context) error {
	plCache, err := h.platformWatches(ctx)
	if err != nil {
		return err
	}
	obCache, err := h.onboardingWatches(ctx)
	if err != nil {
		return err
	}
	caches := []cache.Cache{plCache, obCache}
	for i, d := range h.dedConfigs {
		c, err := cache.New(fast(d), cache.Options{Scheme: clusters.Scheme, DefaultNamespaces: map[string]cache.Config{controllers.KroNamespace: {}}})
		if err != nil {
			return err
		}
		if err := h.watch(ctx, c, "controlplane", &corev1.Secret{}, h.secretHandlers(fmt.Sprintf("dedicated-%d", i+1))); err != nil {
			return err
		}
		caches = append(caches, c)
	}
	for _, c := range caches {
		go func() { _ = c.Start(ctx) }()
		if !c.WaitForCacheSync(ctx) {
			return fmt.Errorf("the harness's caches did not sync")
		}
	}
	return nil
}

// secretHandlers record each secret's data as first seen, and each creation.
func (h *harness) secretHandlers(cluster string) handlers {
	seen := func(o any, at time.Time) {
		s := o.(*corev1.Secret)
		h.tr.mark("secret|"+cluster+"|"+s.Namespace+"/"+s.Name+"|"+fingerprint(s.Data), at)
	}
	return handlers{
		add: func(o any, at time.Time) {
			seen(o, at)
			s := o.(*corev1.Secret)
			h.tr.added(cluster+"|"+s.Namespace+"/"+s.Name, at)
		},
		update: seen,
	}
}

// platformWatches record the Flux objects as applied and play Flux on them, and record
// the provider's secret copies.
func (h *harness) platformWatches(ctx context.Context) (cache.Cache, error) {
	ours := labels.SelectorFromSet(labels.Set{v1alpha1.LabelManagedBy: v1alpha1.ManagedByValue})
	plCache, err := cache.New(fast(h.platform.Config), cache.Options{Scheme: clusters.Scheme, ByObject: map[client.Object]cache.ByObject{
		&corev1.Secret{}: {Label: ours},
	}})
	if err != nil {
		return nil, err
	}
	if err := h.watch(ctx, plCache, "platform", &sourcev1.OCIRepository{}, handlers{add: h.ociEvent, update: h.ociEvent}); err != nil {
		return nil, err
	}
	if err := h.watch(ctx, plCache, "platform", &helmv2.HelmRelease{}, handlers{add: h.helmReleaseEvent, update: h.helmReleaseEvent}); err != nil {
		return nil, err
	}
	if err := h.watch(ctx, plCache, "platform", &corev1.Secret{}, h.secretHandlers("platform")); err != nil {
		return nil, err
	}
	return plCache, nil
}

// ociEvent records an OCIRepository applied as expected, and plays source-controller.
func (h *harness) ociEvent(o any, at time.Time) {
	r := o.(*sourcev1.OCIRepository)
	if r.Spec.Reference != nil && r.Spec.Reference.Tag == chartVersion && r.Spec.URL == h.chartURL &&
		r.Spec.SecretRef != nil && r.Spec.SecretRef.Name == providerName+"-"+chartSecret {
		h.tr.mark("applied-oci|"+r.Namespace, at)
		h.tr.added("applied-oci|"+r.Namespace, at)
	}
	if !h.realFlux {
		h.playFlux(r, r.Generation, r.Status.ObservedGeneration, r.Status.Conditions)
	}
}

// helmReleaseEvent records a HelmRelease applied as expected, deleted, and (real Flux)
// Ready for its generation; in provider mode it plays helm-controller.
func (h *harness) helmReleaseEvent(o any, at time.Time) {
	r := o.(*helmv2.HelmRelease)
	if r.Spec.ChartRef != nil && r.Spec.ChartRef.Kind == sourcev1.OCIRepositoryKind && r.Spec.KubeConfig != nil &&
		r.Spec.KubeConfig.SecretRef != nil && r.Spec.KubeConfig.SecretRef.Name == accessSecret {
		h.tr.mark("applied-hr|"+r.Namespace, at)
		h.tr.added("applied-hr|"+r.Namespace, at)
	}
	if !r.DeletionTimestamp.IsZero() {
		h.tr.added("hrdeleting|"+r.Namespace, at)
	}
	if !h.realFlux {
		h.playFlux(r, r.Generation, r.Status.ObservedGeneration, r.Status.Conditions)
		return
	}
	if c := meta.FindStatusCondition(r.Status.Conditions, "Ready"); c != nil && c.Status == metav1.ConditionTrue &&
		r.Status.ObservedGeneration == r.Generation && c.ObservedGeneration == r.Generation {
		h.tr.added("fluxready-hr|"+r.Namespace, at)
	}
}

// onboardingWatches record the Kros' readiness, blocked deletions, RGD counts and deletion.
func (h *harness) onboardingWatches(ctx context.Context) (cache.Cache, error) {
	obCache, err := cache.New(fast(h.onboarding.Config), cache.Options{Scheme: clusters.Scheme})
	if err != nil {
		return nil, err
	}
	kro := func(o any, at time.Time) {
		k := o.(*v1alpha1.Kro)
		if c := meta.FindStatusCondition(k.Status.Conditions, v1alpha1.ConditionReady); c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == k.Generation {
			h.tr.mark("ready|"+string(k.UID), at)
			h.tr.added("kroready|"+string(k.UID), at)
		} else if c != nil {
			h.tr.sawNotReady(string(c.Status) + " " + c.Reason + ": " + c.Message)
			h.tr.added("kronotready|"+string(k.UID), at)
		}
		if c := meta.FindStatusCondition(k.Status.Conditions, v1alpha1.ConditionDeletionBlocked); c != nil && c.Status == metav1.ConditionTrue {
			switch c.Reason {
			case v1alpha1.ReasonUserResourcesPresent:
				h.tr.mark("blocked|"+string(k.UID), at)
			case v1alpha1.ReasonInstancesPresent:
				h.tr.mark("blocked-by-instances|"+string(k.UID), at)
			}
		}
		if s := k.Status.ResourceGraphDefinitions; s != nil && s.Total > 0 {
			h.tr.mark("rgds|"+string(k.UID), at)
		}
	}
	if err := h.watch(ctx, obCache, "onboarding", &v1alpha1.Kro{}, handlers{add: kro, update: kro, del: func(o any, at time.Time) {
		h.tr.mark("gone|"+string(o.(*v1alpha1.Kro).UID), at)
	}}); err != nil {
		return nil, err
	}
	return obCache, nil
}

// --- the harness plays Flux ---------------------------------------------------------

// playFlux queues a Flux object whose Ready condition does not yet stand for its
// generation; fluxWorker sets it through the status subresource, as Flux would.
func (h *harness) playFlux(obj client.Object, generation, observed int64, conds []metav1.Condition) {
	if c := meta.FindStatusCondition(conds, "Ready"); c != nil && c.Status == metav1.ConditionTrue && observed == generation && c.ObservedGeneration == generation {
		return
	}
	if !obj.GetDeletionTimestamp().IsZero() {
		return
	}
	if _, held := h.fluxHold.Load(obj.GetNamespace()); held {
		return
	}
	key := fmt.Sprintf("%T|%s/%s", obj, obj.GetNamespace(), obj.GetName())
	h.fluxMu.Lock()
	defer h.fluxMu.Unlock()
	if h.fluxQueued[key] {
		return
	}
	h.fluxQueued[key] = true
	h.fluxQueue <- obj.DeepCopyObject().(client.Object)
}

func (h *harness) fluxWorker(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case obj := <-h.fluxQueue:
			key := fmt.Sprintf("%T|%s/%s", obj, obj.GetNamespace(), obj.GetName())
			h.fluxMu.Lock()
			delete(h.fluxQueued, key)
			h.fluxMu.Unlock()
			h.setFluxReady(ctx, obj)
		}
	}
}

func (h *harness) setFluxReady(ctx context.Context, obj client.Object) {
	_ = h.setFluxCondition(ctx, obj, metav1.ConditionTrue)
}

// setFluxCondition sets the Ready condition of a Flux object as Flux does: True when
// done, Unknown (reason Progressing) while at work.
func (h *harness) setFluxCondition(ctx context.Context, obj client.Object, status metav1.ConditionStatus) error {
	var err error
	for range 10 {
		cond := metav1.Condition{Type: "Ready", Status: status, Reason: "Succeeded", ObservedGeneration: obj.GetGeneration(), LastTransitionTime: metav1.Now()}
		if status != metav1.ConditionTrue {
			cond.Reason = "Progressing"
		}
		kind := ""
		switch o := obj.(type) {
		case *sourcev1.OCIRepository:
			cond.Message = "stored artifact for digest 'sha256:bench'"
			o.Status.ObservedGeneration = o.Generation
			meta.SetStatusCondition(&o.Status.Conditions, cond)
			kind = "oci"
		case *helmv2.HelmRelease:
			cond.Message = "Helm install succeeded for release kro-system/kro.v1 with chart kro@" + chartVersion
			o.Status.ObservedGeneration = o.Generation
			meta.SetStatusCondition(&o.Status.Conditions, cond)
			testenv.RecordRelease(o, chartVersion, status == metav1.ConditionTrue)
			kind = "hr"
		}
		// Flux's Ready is the moment the status write starts; the provider can only see it later.
		at := time.Now()
		err = h.pl.Status().Update(ctx, obj)
		if err == nil {
			if status == metav1.ConditionTrue {
				h.tr.mark("fluxready-"+kind+"|"+obj.GetNamespace(), at)
			}
			return nil
		}
		if !apierrors.IsConflict(err) {
			return err
		}
		fresh := obj.DeepCopyObject().(client.Object)
		if err := h.pl.Get(ctx, client.ObjectKeyFromObject(obj), fresh); err != nil {
			return err
		}
		obj = fresh
	}
	return err
}

// --- provider metrics -----------------------------------------------------------------

func (h *harness) scrapeProvider() ([]Sample, error) {
	resp, err := http.Get(h.metrics)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	return ParseProm(string(b)), nil
}

func kroController(l map[string]string) bool { return l["controller"] == "kro" }

type providerState struct {
	engaged, depth, reconciles, rss, heap, cpu float64
	reconcileSeconds, workers                  float64
	requests                                   map[string]float64
}

func (h *harness) providerState() (providerState, error) {
	s, err := h.scrapeProvider()
	if err != nil {
		return providerState{}, err
	}
	return providerState{
		engaged:          Sum(s, "service_provider_kro_controlplanes", func(l map[string]string) bool { return l["phase"] == "Engaged" }),
		depth:            Sum(s, "workqueue_depth", func(l map[string]string) bool { return l["name"] == "kro" }),
		reconciles:       Sum(s, "controller_runtime_reconcile_total", kroController),
		rss:              Sum(s, "process_resident_memory_bytes", nil),
		heap:             Sum(s, "go_memstats_heap_inuse_bytes", nil),
		cpu:              Sum(s, "process_cpu_seconds_total", nil),
		reconcileSeconds: Sum(s, "controller_runtime_reconcile_time_seconds_sum", kroController),
		workers:          Sum(s, "controller_runtime_max_concurrent_reconciles", kroController),
		requests: SumBy(s, "rest_client_requests_total", func(l map[string]string) (string, bool) {
			return l["method"], true
		}),
	}, nil
}

// waitSettled waits until the provider has engaged n ControlPlanes and its queue is empty.
// It returns the time of the first of three polls in a row that found it so.
func (h *harness) waitSettled(ctx context.Context, n int, minReconciles float64) (time.Time, error) {
	deadline := time.Now().Add(waitTimeout)
	quiet := 0
	var since time.Time
	for {
		now := time.Now()
		st, err := h.providerState()
		if err == nil && int(st.engaged) == n && st.depth == 0 && st.reconciles >= minReconciles {
			if quiet == 0 {
				since = now
			}
			quiet++
			if quiet >= 3 {
				return since, nil
			}
		} else {
			quiet = 0
		}
		if time.Now().After(deadline) {
			return since, fmt.Errorf("provider not settled: engaged %v of %d, queue %v, reconciles %v (err %w)", st.engaged, n, st.depth, st.reconciles, err)
		}
		select {
		case <-ctx.Done():
			return since, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// memory samples RSS (median) and heap in use (minimum, the closest to the live heap
// without forcing a GC) over five seconds.
func (h *harness) memory(ctx context.Context) (rssMiB, heapMiB float64, err error) {
	var rss, heap []float64
	for i := range 5 {
		if i > 0 {
			select {
			case <-ctx.Done():
				return 0, 0, ctx.Err()
			case <-time.After(time.Second):
			}
		}
		st, err := h.providerState()
		if err != nil {
			return 0, 0, err
		}
		rss = append(rss, st.rss/(1<<20))
		heap = append(heap, st.heap/(1<<20))
	}
	sort.Float64s(rss)
	return round(rss[len(rss)/2]), round(slices.Min(heap)), nil
}

// apiserverWrites sums write requests on every API server by cluster kind and resource,
// leaving out leases (the API servers' own heartbeats).
func (h *harness) apiserverWrites(ctx context.Context) (map[string]float64, error) {
	all := map[string]float64{}
	for _, c := range append(append([]*testenv.Cluster{h.onboarding, h.platform}, h.shared...), h.dedicated...) {
		dc, err := discovery.NewDiscoveryClientForConfig(c.Config)
		if err != nil {
			return nil, err
		}
		b, err := dc.RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
		if err != nil {
			return nil, fmt.Errorf("scraping %s: %w", c.Name, err)
		}
		role := c.Name
		if strings.HasPrefix(role, "shared-") || strings.HasPrefix(role, "dedicated-") {
			role = "controlplane"
		}
		for k, v := range SumBy(ParseProm(string(b)), "apiserver_request_total", func(l map[string]string) (string, bool) {
			if !slices.Contains(writeVerbs, l["verb"]) || l["resource"] == "leases" {
				return "", false
			}
			r := l["resource"]
			if l["subresource"] != "" {
				r += "/" + l["subresource"]
			}
			return role + " " + l["verb"] + " " + r, true
		}) {
			all[k] += v
		}
	}
	return all, nil
}

func total(m map[string]float64) float64 {
	var t float64
	for _, v := range m {
		t += v
	}
	return t
}

func writesOf(requests map[string]float64) float64 {
	var t float64
	for _, v := range writeVerbs {
		t += requests[v]
	}
	return t
}

func machine() Machine {
	m := Machine{CPUs: runtime.NumCPU(), OS: runtime.GOOS + "/" + runtime.GOARCH}
	if out, err := exec.Command("go", "version").Output(); err == nil {
		m.GoVersion = strings.TrimSpace(strings.TrimPrefix(string(out), "go version "))
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb float64
		if _, err := fmt.Sscanf(strings.SplitN(string(b), "\n", 2)[0], "MemTotal: %f kB", &kb); err == nil {
			m.MemoryGiB = round(kb / (1 << 20))
		}
	}
	return m
}

// rgd is a ResourceGraphDefinition the way a tenant writes one.
// kroKind is a CRD as kro generates one for an RGD (labelled kro.run/owned and with the
// RGD's name, kept by kro after the RGD is gone), and an instance of it.
func kroKind(n int) (*apiextensionsv1.CustomResourceDefinition, *unstructured.Unstructured) {
	kind := fmt.Sprintf("BenchApp%d", n)
	plural := fmt.Sprintf("benchapps%d", n)
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: plural + ".kro.run", Labels: map[string]string{
			"kro.run/owned": "true", "kro.run/resource-graph-definition-name": fmt.Sprintf("bench-app-%d", n)}},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "kro.run", Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: plural, Kind: kind, ListKind: kind + "List"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1alpha1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: ptr.To(true)}}}},
		},
	}
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("kro.run/v1alpha1")
	u.SetKind(kind)
	u.SetNamespace("default")
	return crd, u
}

func rgd(name string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kro.run/v1alpha1",
		"kind":       "ResourceGraphDefinition",
		"metadata":   map[string]any{"name": name},
		"spec": map[string]any{"schema": map[string]any{
			"apiVersion": "v1alpha1", "kind": "BenchThing" + strings.ReplaceAll(strings.ToUpper(name[:1])+name[1:], "-", ""), "scope": "Namespaced",
		}},
	}}
}

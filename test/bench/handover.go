package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/clusters"
	"github.com/openmcp-project/service-provider-kro/controllers/owned"
	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

// HandoverConfig are the parameters of the hand-over run: Kros that the earlier provider
// (openmcp-project/service-provider-kro v1.3.0) installed, taken over by the provider
// when it starts.
type HandoverConfig struct {
	// Kros are the numbers N of Kros, one run each in an environment of its own; each Kro
	// has its own ControlPlane on the shared API servers and the earlier provider's
	// installation.
	Kros []int
	// Look is how often the harness looks (List calls) at the Kros and the tenant
	// namespaces.
	Look time.Duration
}

// HandoverResults are the figures of the hand-over runs.
type HandoverResults struct {
	Started  time.Time `json:"started"`
	Duration string    `json:"duration"`
	Machine  Machine   `json:"machine"`

	SharedAPIServers int      `json:"sharedAPIServers"`
	ProviderFlags    []string `json:"providerFlags,omitempty"`
	// AccessRequests: openmcp's AccessRequest CRD was installed on the platform cluster,
	// and each earlier installation had its granted AccessRequest.
	AccessRequests bool `json:"accessRequests"`
	// EarlierChartVersion is the chart version of the earlier installations.
	EarlierChartVersion string `json:"earlierChartVersion"`
	// LookIntervalMs is how often the harness looked.
	LookIntervalMs float64       `json:"lookIntervalMs"`
	Runs           []HandoverRun `json:"runs"`
	Targets        []Target      `json:"targets"`
}

// HandoverRun is one hand-over of N Kros: the provider started with every earlier
// installation in place. Times are seconds (or a Dist) from the provider's process start,
// taken at the first look that saw the state.
type HandoverRun struct {
	Kros int `json:"kros"`
	// SecondsToProviderReady: until the provider's readyz answered.
	SecondsToProviderReady float64 `json:"secondsToProviderReady"`
	// Suspended: per Kro, until its earlier HelmRelease was seen suspended (or gone);
	// OwnApplied: until the provider's own HelmRelease was seen.
	Suspended  Dist `json:"earlierSuspendedPerKro"`
	OwnApplied Dist `json:"ownHelmReleasePerKro"`
	// HandedOver: per Kro, until it was seen Ready with nothing of its earlier
	// installation left; SecondsToFirst and SecondsToAll: the first and the last Kro.
	HandedOver     Dist    `json:"handedOverPerKro"`
	SecondsToFirst float64 `json:"secondsToFirstHandedOver"`
	SecondsToAll   float64 `json:"secondsToAllHandedOver"`

	// Looks the harness made until every Kro was handed over, and how long each took.
	Looks        int  `json:"looks"`
	LookDuration Dist `json:"lookDuration"`
	// Violations: (look, tenant namespace) pairs with more than one HelmRelease of the
	// Helm release kro that is not suspended; must be 0. Overlaps: pairs with more than
	// one such HelmRelease, the others suspended (the hand-over's middle state).
	Violations        int      `json:"violations"`
	ViolationExamples []string `json:"violationExamples,omitempty"`
	Overlaps          int      `json:"overlaps"`

	// The provider's work from its start until the last Kro was handed over (its start-up
	// included): CPU seconds, requests (client side, rest_client_requests_total) by
	// cluster and method, of which writes, and Kro reconciles.
	ProviderCPUSeconds float64            `json:"providerCPUSeconds"`
	ProviderRequests   map[string]float64 `json:"providerRequests"`
	RequestsTotal      float64            `json:"providerRequestsTotal"`
	WriteRequests      float64            `json:"providerWriteRequests"`
	KroReconciles      float64            `json:"kroReconciles"`
	// MachineBusy is the share of the machine's cores busy meanwhile, 0..1; Load1 the
	// 1-minute load average when the provider started (other work on the machine shows
	// there).
	MachineBusy float64 `json:"machineBusy"`
	Load1       float64 `json:"load1AtStart"`
}

const (
	// openMCPAPIModule holds openmcp's AccessRequest CRD, as in controllers/suite_test.go.
	openMCPAPIModule = "github.com/openmcp-project/openmcp-operator/api@v1.3.0"
	// earlierChartVersion is the chart the earlier installations run; the provider's
	// HelmRelease upgrades the release to chartVersion.
	earlierChartVersion = "0.9.3"
)

// RunHandover measures, in provider mode, the provider taking over N Kros the earlier
// provider installed, for each N of hc.Kros in a fresh environment.
func RunHandover(ctx context.Context, cfg Config, hc HandoverConfig) (*HandoverResults, error) {
	if cfg.Log == nil {
		cfg.Log = os.Stderr
	}
	if len(hc.Kros) == 0 || hc.Look <= 0 {
		return nil, fmt.Errorf("the hand-over run needs at least one N and a look interval above 0")
	}
	cfg.Concurrency = max(1, cfg.Concurrency)
	cfg.SharedAPIServers = max(1, cfg.SharedAPIServers)
	cfg.Dedicated = 0
	start := time.Now()
	res := &HandoverResults{
		Started: start.UTC().Truncate(time.Second), Machine: machine(), SharedAPIServers: cfg.SharedAPIServers,
		ProviderFlags: cfg.ProviderFlags, EarlierChartVersion: earlierChartVersion, LookIntervalMs: float64(hc.Look.Milliseconds()),
		AccessRequests: true,
	}
	for _, n := range hc.Kros {
		c := cfg
		c.WorkDir = filepath.Join(cfg.WorkDir, fmt.Sprintf("n-%d", n))
		run, access, err := runHandoverOnce(ctx, c, hc, n, res)
		res.AccessRequests = res.AccessRequests && access
		res.Runs = append(res.Runs, run)
		if err != nil {
			res.Duration = time.Since(start).Round(time.Second).String()
			return res, err
		}
	}
	res.Duration = time.Since(start).Round(time.Second).String()
	res.Targets = EvaluateHandover(res)
	return res, nil
}

// runHandoverOnce builds an environment with n earlier installations, starts the provider
// and looks until every Kro is handed over; it says whether AccessRequests took part, and
// notes the kube-apiserver's version in res.
func runHandoverOnce(ctx context.Context, cfg Config, hc HandoverConfig, n int, res *HandoverResults) (HandoverRun, bool, error) {
	run := HandoverRun{Kros: n}
	h := newHarness(cfg)
	defer h.stop()
	fail := func(err error) (HandoverRun, bool, error) {
		if h.proc != nil {
			err = fmt.Errorf("%w\nthe provider's last log lines:\n%s", err, h.proc.LogTail(40))
		}
		return run, false, err
	}
	if err := h.setupEnv(ctx); err != nil {
		return fail(err)
	}
	if v, err := discovery.NewDiscoveryClientForConfigOrDie(h.onboarding.Config).ServerVersion(); err == nil {
		res.Machine.KubeAPIServer = v.GitVersion
	}
	withAccess := h.installAccessRequestCRD(ctx)
	h.logf("hand-over N=%d: creating the earlier provider's installations (AccessRequests: %v)", n, withAccess)
	kros, err := h.prepareEarlier(ctx, n, withAccess)
	if err != nil {
		return fail(err)
	}
	if err := h.waitEarlierReady(ctx, kros); err != nil {
		return fail(err)
	}
	run.Load1 = load1()
	if err := h.handOver(ctx, hc, kros, withAccess, &run); err != nil {
		return fail(err)
	}
	h.logf("hand-over N=%d: first after %.2f s, all after %.2f s (p50 %s, p99 %s); %d violations in %d looks, %d overlaps seen",
		n, run.SecondsToFirst, run.SecondsToAll, ms(run.HandedOver.Median), ms(run.HandedOver.P99), run.Violations, run.Looks, run.Overlaps)
	return run, withAccess, nil
}

// handOver starts the provider with the looker already looking, waits until every Kro is
// handed over and fills in run.
func (h *harness) handOver(ctx context.Context, hc HandoverConfig, kros []*handoverKro, withAccess bool, run *HandoverRun) error {
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cpuBefore := readCPU()
	start := time.Now()
	lk := newLooker(h, kros, withAccess, start)
	done := make(chan error, 1)
	go func() { done <- lk.lookUntilDone(lctx, hc.Look, waitTimeout) }()
	h.logf("hand-over N=%d: starting the provider", len(kros))
	if err := h.startProvider(ctx); err != nil {
		return err
	}
	run.SecondsToProviderReady = round3(time.Since(start).Seconds())
	select {
	case err := <-done:
		if err != nil {
			return err
		}
	case <-h.proc.Exited():
		return fmt.Errorf("the provider exited during the hand-over: %w", h.proc.ExitError())
	}
	run.MachineBusy = readCPU().busySince(cpuBefore)
	if err := h.handoverCounts(run); err != nil {
		return err
	}
	lk.summarize(run)
	return nil
}

// handoverCounts reads the provider's CPU seconds, requests and reconciles since its start.
func (h *harness) handoverCounts(run *HandoverRun) error {
	st, err := h.providerState()
	if err != nil {
		return err
	}
	c, err := h.rolloutCounts()
	if err != nil {
		return err
	}
	run.ProviderCPUSeconds = round3(st.cpu)
	run.ProviderRequests = c.requests
	run.RequestsTotal = total(c.requests)
	for k, v := range c.requests {
		if _, method, _ := strings.Cut(k, " "); slices.Contains(writeVerbs, method) {
			run.WriteRequests += v
		}
	}
	run.KroReconciles = c.kroReconciles
	return nil
}

// installAccessRequestCRD installs openmcp's AccessRequest CRD on the platform cluster,
// from the module controllers/suite_test.go takes it from; false when it cannot, and
// the earlier installations are then made without AccessRequests.
func (h *harness) installAccessRequestCRD(ctx context.Context) bool {
	dir, err := testenv.ModuleDir(ctx, openMCPAPIModule)
	if err != nil {
		h.logf("hand-over: no AccessRequest CRD, the earlier installations go without AccessRequests: %v", err)
		return false
	}
	file := filepath.Join(dir, "crds", "manifests", "clusters.openmcp.cloud_accessrequests.yaml")
	if _, err := envtest.InstallCRDs(h.platform.Config, envtest.CRDInstallOptions{Paths: []string{file}, ErrorIfPathMissing: true}); err != nil {
		h.logf("hand-over: installing %s failed, the earlier installations go without AccessRequests: %v", file, err)
		return false
	}
	return true
}

// handoverKro is a Kro with the earlier provider's installation, and when the looks
// first saw each stage of its hand-over.
type handoverKro struct {
	ref     *kroRef
	earlier testenv.EarlierInstallation
	// keys are its earlier objects as objectKey names them.
	keys []string
	// suspended, ownApplied, done: the first looks that saw its earlier HelmRelease
	// suspended or gone, the provider's HelmRelease, and the Kro Ready with nothing of
	// the earlier installation left.
	suspended, ownApplied, done time.Time
}

// prepareEarlier creates n Kros as the earlier provider leaves them: per Kro a ControlPlane
// on a shared API server with its credentials for the provider, the earlier installation
// (testenv.EarlierInstallation, granted AccessRequest when withAccess), and the Kro with
// the finalizer and a version the ProviderConfig offers.
func (h *harness) prepareEarlier(ctx context.Context, n int, withAccess bool) ([]*handoverKro, error) {
	chart := &corev1.Secret{}
	if err := h.pl.Get(ctx, client.ObjectKey{Namespace: podNamespace, Name: chartSecret}, chart); err != nil {
		return nil, err
	}
	cps := map[*testenv.Cluster]client.Client{}
	for _, c := range h.shared {
		cl, err := client.New(fast(c.Config), client.Options{Scheme: clusters.Scheme})
		if err != nil {
			return nil, err
		}
		cps[c] = cl
	}
	var refs []*kroRef
	byName := map[string]*handoverKro{}
	var out []*handoverKro
	for i := range n {
		r := h.newRef(fmt.Sprintf("cp-%04d", i+1), versionShared, h.shared[i%len(h.shared)], -1)
		k := &handoverKro{ref: r}
		refs, out, byName[r.name] = append(refs, r), append(out, k), k
	}
	err := h.parallel(refs, func(r *kroRef) error {
		k := byName[r.name]
		kc, err := r.cp.TokenKubeconfig(ctx, r.name)
		if err != nil {
			return err
		}
		k.earlier = testenv.EarlierInstallation{
			KroName: r.name, TenantNamespace: r.tenant, ChartURL: h.chartURL, ChartVersion: earlierChartVersion,
			ChartPullSecret: chart, Kubeconfig: kc,
		}
		k.keys = earlierKeys(k.earlier, withAccess)
		if err := k.earlier.Create(ctx, h.pl, cps[r.cp], kroNamespace, withAccess); err != nil {
			return fmt.Errorf("the earlier installation of %s: %w", r.name, err)
		}
		if err := h.pl.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: accessSecret, Namespace: r.tenant, Labels: map[string]string{v1alpha1.LabelControlPlaneKubeconfig: "true"}},
			Data:       map[string][]byte{owned.KubeconfigKey: kc},
		}); err != nil {
			return err
		}
		return h.createEarlierKro(ctx, r)
	})
	return out, err
}

// createEarlierKro creates the Kro as the earlier provider leaves it: with the finalizer,
// which has the same string, on a version the ProviderConfig offers.
func (h *harness) createEarlierKro(ctx context.Context, r *kroRef) error {
	k := &v1alpha1.Kro{
		ObjectMeta: metav1.ObjectMeta{Name: r.name, Namespace: kroNamespace, Finalizers: []string{v1alpha1.Finalizer}},
		Spec:       v1alpha1.KroSpec{Version: r.version},
	}
	if err := h.ob.Create(ctx, k); err != nil {
		return fmt.Errorf("creating Kro %s: %w", r.name, err)
	}
	r.uid, r.created = k.UID, time.Now()
	return nil
}

// waitEarlierReady waits until the harness, as source- and helm-controller, has set the
// earlier OCIRepositories and HelmReleases Ready.
func (h *harness) waitEarlierReady(ctx context.Context, kros []*handoverKro) error {
	var keys []string
	for _, k := range kros {
		keys = append(keys, "fluxready-oci|"+k.ref.tenant, "fluxready-hr|"+k.ref.tenant)
	}
	_, err := h.tr.wait(ctx, keys, "the earlier Flux objects Ready")
	return err
}

// load1 is the machine's 1-minute load average; 0 where it cannot be read.
func load1() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// ParseCounts reads a comma-separated list of counts such as "1,100"; zeros are left out
// (a lone 0 skips), anything else must be a positive number.
func ParseCounts(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		n, err := strconv.Atoi(f)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("%q is not a count", f)
		}
		if n > 0 {
			out = append(out, n)
		}
	}
	return out, nil
}

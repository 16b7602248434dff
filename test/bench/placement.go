package bench

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"time"

	fluxmeta "github.com/fluxcd/pkg/apis/meta"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/owned"
	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

// PlacementConfig are the parameters of the placement run: the same N Kros placed on
// their ControlPlanes, and on one workload cluster they all share.
type PlacementConfig struct {
	// Kros are the N Kros of each placement, each on a ControlPlane of its own on the
	// shared API servers.
	Kros int
}

// PlacementResults are the figures of the placement run: one environment of its own per
// placement, the same N and the same harness.
type PlacementResults struct {
	Started  time.Time `json:"started"`
	Duration string    `json:"duration"`
	Machine  Machine   `json:"machine"`

	Kros             int      `json:"kros"`
	SharedAPIServers int      `json:"sharedAPIServers"`
	ProviderFlags    []string `json:"providerFlags,omitempty"`
	// ChartVersion is kro's chart the harness serves as source-controller's artifact.
	ChartVersion string `json:"chartVersion"`

	ControlPlane    *PlacementRun `json:"controlPlane,omitempty"`
	WorkloadCluster *PlacementRun `json:"workloadCluster,omitempty"`
}

// PlacementRun is one placement: N Kros created at once, measured until every Kro is
// Ready and the provider has settled.
type PlacementRun struct {
	Placement string `json:"placement"`
	Kros      int    `json:"kros"`
	// CreatedToApplied and CreatedToReady: per Kro, from its creation until its
	// OCIRepository and HelmRelease were applied as expected, and until it was Ready.
	CreatedToApplied Dist `json:"createdToApplied"`
	CreatedToReady   Dist `json:"createdToReady"`
	// SecondsToAllReady: the first create until the last Kro Ready; WindowSeconds: until
	// the provider had also engaged every cluster and emptied its queue, the window of the
	// CPU, request and reconcile figures.
	SecondsToAllReady float64 `json:"secondsToAllReady"`
	WindowSeconds     float64 `json:"windowSeconds"`
	// ProviderCPUSeconds over the window; CPUMsPerKro the same per new Kro; ProviderCores
	// the provider's mean use over the window.
	ProviderCPUSeconds float64 `json:"providerCPUSeconds"`
	CPUMsPerKro        float64 `json:"providerCPUMsPerKro"`
	ProviderCores      float64 `json:"providerCores"`
	// MachineBusy is the share of the machine's cores busy over the window, 0..1; Load1 the
	// 1-minute load average at the first create.
	MachineBusy float64 `json:"machineBusy"`
	Load1       float64 `json:"load1AtStart"`
	// Engaged are the clusters the provider engaged (service_provider_kro_controlplanes,
	// phase Engaged): each ControlPlane, and for the WorkloadCluster placement the
	// workload cluster once per tenant (cluster name workload:<ns>/<name>).
	Engaged int `json:"engagedClusters"`
	// KroReconciles and ProviderRequests (client side, by cluster and method) over the
	// window.
	KroReconciles    float64            `json:"kroReconciles"`
	ProviderRequests map[string]float64 `json:"providerRequests"`
	RequestsTotal    float64            `json:"providerRequestsTotal"`
	// Memory before the first Kro and with all N Ready (RSS median, heap in use minimum
	// over 5 s), and the difference per tenant.
	BaselineRSSMiB   float64 `json:"baselineRSSMiB"`
	BaselineHeapMiB  float64 `json:"baselineHeapInuseMiB"`
	RSSMiB           float64 `json:"rssMiB"`
	HeapMiB          float64 `json:"heapInuseMiB"`
	RSSMiBPerTenant  float64 `json:"rssMiBPerTenant"`
	HeapMiBPerTenant float64 `json:"heapMiBPerTenant"`
	// Workload is the cost on the shared workload cluster (nothing for the ControlPlane
	// placement: the harness starts it there too, idle, as a check).
	Workload WorkloadCost `json:"workloadCluster"`
}

// WorkloadCost is what N tenants cost the shared workload cluster's API server.
type WorkloadCost struct {
	// Namespaces and Secrets: listed with the provider's managed-by label once every Kro
	// was Ready.
	Namespaces int `json:"namespaces"`
	Secrets    int `json:"secrets"`
	// ObjectsAdded: every kind the API server lists, counted before the first Kro and
	// after the window, the difference by resource (etcd holds these objects).
	ObjectsAdded      map[string]int `json:"objectsAddedByResource,omitempty"`
	ObjectsAddedTotal int            `json:"objectsAdded"`
	// Requests the API server served over the window (apiserver_request_total by verb,
	// leases excluded).
	Requests      map[string]float64 `json:"requestsByVerb,omitempty"`
	RequestsTotal float64            `json:"requests"`
	// Watches open (apiserver_longrunning_requests, verb WATCH) after the window, minus
	// before the first Kro.
	Watches float64 `json:"watchesAdded"`
	// RSSMiBBefore and RSSMiBAfter: the workload kube-apiserver's own RSS (its
	// process_resident_memory_bytes) before the first Kro and after the window.
	RSSMiBBefore float64 `json:"apiserverRSSMiBBefore"`
	RSSMiBAfter  float64 `json:"apiserverRSSMiBAfter"`
}

// workloadSecret is the harness's workload cluster kubeconfig secret in each tenant
// namespace.
const workloadSecret = "workload-access"

// RunPlacement measures, in provider mode, N Kros in each placement, each in an
// environment of its own: first ControlPlane, then WorkloadCluster.
func RunPlacement(ctx context.Context, cfg Config, pc PlacementConfig) (*PlacementResults, error) {
	if cfg.Log == nil {
		cfg.Log = os.Stderr
	}
	if pc.Kros < 1 {
		return nil, fmt.Errorf("the placement run needs at least one Kro")
	}
	cfg.Concurrency = max(1, cfg.Concurrency)
	cfg.SharedAPIServers = max(1, cfg.SharedAPIServers)
	cfg.Dedicated = 0
	start := time.Now()
	res := &PlacementResults{
		Started: start.UTC().Truncate(time.Second), Machine: machine(), Kros: pc.Kros, SharedAPIServers: cfg.SharedAPIServers,
		ProviderFlags: cfg.ProviderFlags, ChartVersion: chartVersion,
	}
	art, stop, err := serveChart(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer stop()
	for _, pl := range []v1alpha1.Placement{v1alpha1.PlacementControlPlane, v1alpha1.PlacementWorkloadCluster} {
		c := cfg
		c.WorkDir = filepath.Join(cfg.WorkDir, strings.ToLower(string(pl)))
		run, err := runPlacementOnce(ctx, c, pl, pc.Kros, art, res)
		if pl == v1alpha1.PlacementControlPlane {
			res.ControlPlane = run
		} else {
			res.WorkloadCluster = run
		}
		if err != nil {
			res.Duration = time.Since(start).Round(time.Second).String()
			return res, fmt.Errorf("placement %s: %w", pl, err)
		}
	}
	res.Duration = time.Since(start).Round(time.Second).String()
	return res, nil
}

// serveChart packages kro's chart once and serves it as source-controller serves an
// artifact; it returns the artifact to record and what stops the server.
func serveChart(ctx context.Context, cfg Config) (*fluxmeta.Artifact, func(), error) {
	if err := os.MkdirAll(cfg.WorkDir, 0o755); err != nil {
		return nil, nil, err
	}
	helm, err := testenv.NewHelmCLI(ctx, cfg.Log, filepath.Join(cfg.WorkDir, "helm"))
	if err != nil {
		return nil, nil, err
	}
	archive, err := helm.PackageKroChart(ctx, chartVersion, filepath.Join(cfg.WorkDir, "charts"))
	if err != nil {
		return nil, nil, fmt.Errorf("packaging kro's chart %s: %w", chartVersion, err)
	}
	data, err := os.ReadFile(archive)
	if err != nil {
		return nil, nil, err
	}
	sum := sha256.Sum256(data)
	digest := "sha256:" + hex.EncodeToString(sum[:])
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(data) }))
	return &fluxmeta.Artifact{
		Path: "ocirepository/kro.tar.gz", URL: srv.URL + "/ocirepository/kro.tar.gz",
		Revision: chartVersion + "@" + digest, Digest: digest, Size: ptr.To(int64(len(data))),
	}, srv.Close, nil
}

// runPlacementOnce starts an environment with the shared workload cluster, creates n
// Kros on a version of placement pl at once and measures them; it notes the
// kube-apiserver's version in res.
func runPlacementOnce(ctx context.Context, cfg Config, pl v1alpha1.Placement, n int, art *fluxmeta.Artifact, res *PlacementResults) (*PlacementRun, error) {
	run := &PlacementRun{Placement: string(pl), Kros: n}
	h := newHarness(cfg)
	h.placement, h.withWorkload, h.artifact = pl, true, art
	workload := pl == v1alpha1.PlacementWorkloadCluster
	if workload {
		h.hrKubeconfig = workloadSecret
	}
	defer h.stop()
	fail := func(err error) (*PlacementRun, error) {
		if h.proc != nil {
			err = fmt.Errorf("%w\nthe provider's last log lines:\n%s", err, h.proc.LogTail(40))
		}
		return run, err
	}
	if err := h.setup(ctx); err != nil {
		return fail(err)
	}
	if v, err := discovery.NewDiscoveryClientForConfigOrDie(h.onboarding.Config).ServerVersion(); err == nil {
		res.Machine.KubeAPIServer = v.GitVersion
	}
	var refs []*kroRef
	for i := range n {
		refs = append(refs, h.newRef(fmt.Sprintf("cp-%04d", i+1), versionShared, h.shared[i%len(h.shared)], -1))
	}
	h.logf("placement %s: granting access to %d ControlPlanes%s", pl, n, map[bool]string{true: " and to the workload cluster", false: ""}[workload])
	if err := h.grantAll(ctx, refs); err != nil {
		return fail(err)
	}
	if workload {
		if err := h.grantWorkload(ctx, refs); err != nil {
			return fail(err)
		}
	}
	if err := h.measurePlacement(ctx, refs, workload, run); err != nil {
		return fail(err)
	}
	h.logf("placement %s: %d Kros Ready after %.2f s (p50 %s, p99 %s), %.1f ms CPU per Kro, RSS +%.3f MiB and heap +%.3f MiB per tenant; workload cluster: %d namespaces, %d secrets, %d objects",
		pl, n, run.SecondsToAllReady, ms(run.CreatedToReady.Median), ms(run.CreatedToReady.P99), run.CPUMsPerKro, run.RSSMiBPerTenant, run.HeapMiBPerTenant,
		run.Workload.Namespaces, run.Workload.Secrets, run.Workload.ObjectsAddedTotal)
	return run, nil
}

// grantWorkload puts the workload cluster's kubeconfig into every tenant namespace: one
// ServiceAccount token (cluster-admin) for all tenants, as a platform team that shares
// one workload cluster may hand it out.
func (h *harness) grantWorkload(ctx context.Context, refs []*kroRef) error {
	kc, err := h.workload.TokenKubeconfig(ctx, "service-provider-kro")
	if err != nil {
		return err
	}
	return h.parallel(refs, func(r *kroRef) error {
		return h.pl.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: workloadSecret, Namespace: r.tenant, Labels: map[string]string{v1alpha1.LabelWorkloadClusterKubeconfig: "true"}},
			Data:       map[string][]byte{owned.KubeconfigKey: kc},
		})
	})
}

// measurePlacement creates the Kros of refs at once and fills in run: latencies until
// Ready, the provider's CPU, requests and reconciles until it has settled, its memory
// before and after, and the workload cluster's cost.
func (h *harness) measurePlacement(ctx context.Context, refs []*kroRef, workload bool, run *PlacementRun) error {
	n := len(refs)
	if _, err := h.waitSettled(ctx, 0, 0); err != nil {
		return err
	}
	var err error
	if run.BaselineRSSMiB, run.BaselineHeapMiB, err = h.memory(ctx); err != nil {
		return err
	}
	wlBefore, err := h.workloadState(ctx, true)
	if err != nil {
		return err
	}
	before, err := h.providerState()
	if err != nil {
		return err
	}
	countsBefore, err := h.rolloutCounts()
	if err != nil {
		return err
	}
	run.Load1 = load1()
	cpuBefore := readCPU()
	start := time.Now()
	h.logf("placement %s: creating %d Kros at once", run.Placement, n)
	if err := h.parallel(refs, func(r *kroRef) error { return h.createKro(ctx, r) }); err != nil {
		return err
	}
	var keys []string
	for _, r := range refs {
		keys = append(keys, "ready|"+string(r.uid), "applied-oci|"+r.tenant, "applied-hr|"+r.tenant)
	}
	seen, err := h.tr.wait(ctx, keys, "Kros Ready")
	if err != nil {
		return err
	}
	var applied, ready []time.Duration
	var lastReady time.Time
	for _, r := range refs {
		at := seen["ready|"+string(r.uid)]
		ready = append(ready, at.Sub(r.created))
		applied = append(applied, later(seen["applied-oci|"+r.tenant], seen["applied-hr|"+r.tenant]).Sub(r.created))
		lastReady = later(lastReady, at)
	}
	run.CreatedToApplied, run.CreatedToReady = Summarize(applied), Summarize(ready)
	run.SecondsToAllReady = round3(lastReady.Sub(start).Seconds())
	clusters := n
	if workload {
		clusters = 2 * n
	}
	settled, err := h.waitSettled(ctx, clusters, 0)
	if err != nil {
		return err
	}
	window := later(settled, lastReady).Sub(start)
	after, err := h.providerState()
	if err != nil {
		return err
	}
	countsAfter, err := h.rolloutCounts()
	if err != nil {
		return err
	}
	run.MachineBusy = readCPU().busySince(cpuBefore)
	run.WindowSeconds = round3(window.Seconds())
	cpu := after.cpu - before.cpu
	run.ProviderCPUSeconds = round3(cpu)
	run.CPUMsPerKro = round(cpu * 1000 / float64(n))
	if window > 0 {
		run.ProviderCores = round3(cpu / window.Seconds())
	}
	run.Engaged = int(after.engaged)
	run.KroReconciles = countsAfter.kroReconciles - countsBefore.kroReconciles
	run.ProviderRequests = Delta(countsBefore.requests, countsAfter.requests)
	run.RequestsTotal = total(run.ProviderRequests)
	wlAfter, err := h.workloadState(ctx, false)
	if err != nil {
		return err
	}
	if run.Workload, err = h.workloadCost(ctx, wlBefore, wlAfter); err != nil {
		return err
	}
	if run.RSSMiB, run.HeapMiB, err = h.memory(ctx); err != nil {
		return err
	}
	run.RSSMiBPerTenant = round3((run.RSSMiB - run.BaselineRSSMiB) / float64(n))
	run.HeapMiBPerTenant = round3((run.HeapMiB - run.BaselineHeapMiB) / float64(n))
	return nil
}

// workloadCost lists the provider's namespaces and secrets on the workload cluster and
// compares its API server's state with before.
func (h *harness) workloadCost(ctx context.Context, before, after workloadState) (WorkloadCost, error) {
	c := WorkloadCost{
		ObjectsAdded: ObjectsAdded(before.objects, after.objects),
		Requests:     Delta(before.requests, after.requests),
		Watches:      after.watches - before.watches,
		RSSMiBBefore: round(before.rss / (1 << 20)), RSSMiBAfter: round(after.rss / (1 << 20)),
	}
	for _, v := range c.ObjectsAdded {
		c.ObjectsAddedTotal += v
	}
	c.RequestsTotal = total(c.Requests)
	ours := client.MatchingLabels{v1alpha1.LabelManagedBy: v1alpha1.ManagedByValue}
	namespaces := &corev1.NamespaceList{}
	if err := h.workload.Client.List(ctx, namespaces, ours); err != nil {
		return c, err
	}
	secrets := &corev1.SecretList{}
	if err := h.workload.Client.List(ctx, secrets, ours); err != nil {
		return c, err
	}
	c.Namespaces, c.Secrets = len(namespaces.Items), len(secrets.Items)
	return c, nil
}

package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/clusters"
)

// RolloutConfig are the parameters of the rollout run: a change of a version's
// helmValues reaching the Kros on it, without and with the ProviderConfig's
// spec.rollout.
type RolloutConfig struct {
	// Kros on the rolled-out version, each on a ControlPlane of its own on the shared API
	// servers.
	Kros int
	// MaxUnavailable is spec.rollout.maxUnavailable of the second rollout of those Kros.
	MaxUnavailable intstr.IntOrString
	// OneKros are Kros on a version of their own, rolled out with maxUnavailable 1 (0
	// skips that rollout).
	OneKros int
	// HelmUpgrade is how long the harness, playing helm-controller, takes to upgrade a
	// release whose values changed.
	HelmUpgrade time.Duration
}

// RolloutResults are the figures of the rollout run.
type RolloutResults struct {
	Started  time.Time `json:"started"`
	Duration string    `json:"duration"`
	Machine  Machine   `json:"machine"`

	SharedAPIServers int      `json:"sharedAPIServers"`
	ProviderFlags    []string `json:"providerFlags,omitempty"`
	// HelmUpgradeSeconds: how long the harness, playing helm-controller, takes from a
	// HelmRelease's new generation to Ready.
	HelmUpgradeSeconds float64 `json:"helmUpgradeSeconds"`
	// Kros are all the Kros of the run (every version); CreatedToReady is each, created at
	// once, until Ready.
	Kros           int  `json:"kros"`
	CreatedToReady Dist `json:"createdToReady"`
	// RestWindowSeconds and RestRequestsPerSecond: the provider's requests at rest, every
	// Kro Ready, before the first change, by cluster and method: mostly the probes of the
	// engaged ControlPlanes (--controlplane-probe-interval), which go on during a rollout.
	RestWindowSeconds     float64            `json:"restWindowSeconds"`
	RestRequestsPerSecond map[string]float64 `json:"restRequestsPerSecond"`
	// Runs are the rollouts, one after the other.
	Runs    []RolloutRun `json:"runs"`
	Targets []Target     `json:"targets"`
}

// RolloutRun is one change of a version's helmValues until every Kro on it runs the new
// revision.
type RolloutRun struct {
	Name string `json:"name"`
	// Policy is spec.rollout during the change: "none" or "maxUnavailable: 10%".
	Policy  string `json:"policy"`
	Version string `json:"version"`
	Kros    int    `json:"kros"`
	// Limit is maxUnavailable scaled to the Kros on the version (0: no policy).
	Limit int `json:"maxUnavailableScaled,omitempty"`
	// Revision is the version's revision after the change.
	Revision string `json:"revision"`

	// SecondsToFirstChange: the ProviderConfig updated until the harness saw the first
	// HelmRelease with the new values.
	SecondsToFirstChange float64 `json:"secondsToFirstHelmReleaseChanged"`
	// SecondsToAllUpdated: until the harness saw the last Kro Ready with the new revision.
	SecondsToAllUpdated float64 `json:"secondsToAllUpdated"`
	// SecondsToComplete: until the ProviderConfig's status said the version's rollout was
	// Complete with every Kro updated.
	SecondsToComplete float64 `json:"secondsToComplete"`
	// MostUnavailable: the most Kros unavailable at once; a Kro is unavailable from when the
	// harness saw its HelmRelease carry the new values until it saw the Kro Ready with the
	// new revision.
	MostUnavailable int `json:"mostUnavailable"`
	// MostAdmitted: the longest status.versions[].updating the harness saw.
	MostAdmitted int `json:"mostAdmitted"`
	// ChangedBeforeAdmitted: Kros whose HelmRelease changed before the ProviderConfig's
	// status admitted them (by the platform API server's resourceVersions, which order
	// both); with a policy it must be 0.
	ChangedBeforeAdmitted int `json:"changedBeforeAdmitted"`
	// Unavailable: per Kro, how long it was unavailable; of that, Upgrade: its HelmRelease
	// changed until the harness (as helm-controller) had it Ready, and ReadyToKroReady: from
	// then until the Kro was Ready with the revision, the provider's part.
	Unavailable     Dist `json:"unavailablePerKro"`
	Upgrade         Dist `json:"helmReleaseChangedToReady"`
	ReadyToKroReady Dist `json:"helmReleaseReadyToKroReady"`
	// HelmReleaseSpecChanges: new generations of the version's HelmReleases the harness saw
	// (one per Kro when nothing flaps); HelmUpgrades: upgrades the harness played.
	HelmReleaseSpecChanges int `json:"helmReleaseSpecChanges"`
	HelmUpgrades           int `json:"helmUpgrades"`

	// ProviderRequests: the provider's requests (client side, rest_client_requests_total)
	// from the change until the rollout was complete and the provider's queue empty, by
	// cluster ("platform", "onboarding", "controlplane") and method.
	ProviderRequests map[string]float64 `json:"providerRequests"`
	RequestsTotal    float64            `json:"providerRequestsTotal"`
	WriteRequests    float64            `json:"providerWriteRequests"`
	// WindowSeconds is how long the requests were counted; RequestsBeyondRest are
	// RequestsTotal less the rate at rest over that window.
	WindowSeconds      float64 `json:"windowSeconds"`
	RequestsBeyondRest float64 `json:"providerRequestsBeyondRest"`
	// StatusWrites: changes of the ProviderConfig's status the harness saw (resourceVersion
	// changes without a new generation); StatusPatches: the platform API server's PATCH
	// requests for providerconfigs/status.
	StatusWrites  int     `json:"providerConfigStatusWrites"`
	StatusPatches float64 `json:"providerConfigStatusPatches"`
	// Reconciles of the Kro and the ProviderConfig controllers meanwhile.
	KroReconciles            float64 `json:"kroReconciles"`
	ProviderConfigReconciles float64 `json:"providerConfigReconciles"`
	// ObjectChanges the harness's watches saw (Kros, Flux objects, secret copies) and the
	// Kros' not-Ready states by status and reason.
	ObjectChanges int            `json:"objectChanges"`
	KrosNotReady  map[string]int `json:"krosNotReady,omitempty"`
}

const versionOne = "v-one"

// RunRollout measures the staged rollout of ProviderConfig changes in provider mode:
// Kros on one version, Ready; the version's helmValues changed without a rollout policy,
// then with spec.rollout.maxUnavailable, and (OneKros) another version's with
// maxUnavailable 1.
func RunRollout(ctx context.Context, cfg Config, rc RolloutConfig) (*RolloutResults, error) {
	if cfg.Log == nil {
		cfg.Log = os.Stderr
	}
	if rc.Kros < 1 || rc.HelmUpgrade <= 0 {
		return nil, fmt.Errorf("the rollout run needs at least 1 Kro and a helm upgrade time above 0")
	}
	cfg.Concurrency = max(1, cfg.Concurrency)
	cfg.SharedAPIServers = max(1, cfg.SharedAPIServers)
	cfg.Dedicated = 0
	start := time.Now()
	h := newHarness(cfg)
	h.helmUpgrade = rc.HelmUpgrade
	res := &RolloutResults{
		Started: start.UTC().Truncate(time.Second), Machine: machine(), SharedAPIServers: cfg.SharedAPIServers,
		ProviderFlags: cfg.ProviderFlags, HelmUpgradeSeconds: rc.HelmUpgrade.Seconds(), Kros: rc.Kros + rc.OneKros,
	}
	defer h.stop()
	err := runRollout(ctx, h, rc, res)
	res.Duration = time.Since(start).Round(time.Second).String()
	if err != nil {
		if h.proc != nil {
			err = fmt.Errorf("%w\nthe provider's last log lines:\n%s", err, h.proc.LogTail(40))
		}
		return res, err
	}
	res.Targets = EvaluateRollout(res)
	return res, nil
}

func runRollout(ctx context.Context, h *harness, rc RolloutConfig, res *RolloutResults) error {
	rec, main, one, err := setupRollout(ctx, h, rc, res)
	if err != nil {
		return err
	}
	all := len(main) + len(one)
	if err := h.restRequests(ctx, all, res); err != nil {
		return err
	}
	rest := total(res.RestRequestsPerSecond)
	run := func(name, version string, refs []*kroRef, policy *v1alpha1.RolloutPolicy) error {
		if _, err := h.updateProviderConfig(ctx, func(pc *v1alpha1.ProviderConfig) { pc.Spec.Rollout = policy }); err != nil {
			return err
		}
		if err := h.waitRolloutSettled(ctx, all); err != nil {
			return err
		}
		r, err := h.rollout(ctx, rec, name, version, refs, policy, all)
		r.RequestsBeyondRest = round(max(0, r.RequestsTotal-rest*r.WindowSeconds))
		res.Runs = append(res.Runs, r)
		if err != nil {
			return err
		}
		h.logf("rollout %s: all %d updated after %.1f s, Complete after %.1f s; most unavailable %d (limit %s), most admitted %d; %.0f provider requests, %d status writes",
			name, r.Kros, r.SecondsToAllUpdated, r.SecondsToComplete, r.MostUnavailable, limitText(r.Limit), r.MostAdmitted, r.RequestsTotal, r.StatusWrites)
		return nil
	}
	if err := run("no policy", versionShared, main, nil); err != nil {
		return err
	}
	mu := rc.MaxUnavailable
	if err := run("maxUnavailable "+mu.String(), versionShared, main, &v1alpha1.RolloutPolicy{MaxUnavailable: &mu}); err != nil {
		return err
	}
	if len(one) > 0 {
		o := intstr.FromInt32(1)
		if err := run("maxUnavailable 1", versionOne, one, &v1alpha1.RolloutPolicy{MaxUnavailable: &o}); err != nil {
			return err
		}
	}
	return nil
}

// setupRollout starts the clusters, the recorder and the provider, and creates the Kros
// (main on versionShared, one on versionOne) until they are Ready.
func setupRollout(ctx context.Context, h *harness, rc RolloutConfig, res *RolloutResults) (rec *rolloutRecorder, main, one []*kroRef, err error) {
	if err := h.setupEnv(ctx); err != nil {
		return nil, nil, nil, err
	}
	if rc.OneKros > 0 {
		if _, err := h.updateProviderConfig(ctx, func(pc *v1alpha1.ProviderConfig) {
			pc.Spec.Versions = append(pc.Spec.Versions, v1alpha1.KroVersion{Version: versionOne, ChartVersion: chartVersion, ChartPullSecret: chartSecret})
		}); err != nil {
			return nil, nil, nil, err
		}
	}
	if rec, err = h.startRolloutRecorder(ctx); err != nil {
		return nil, nil, nil, err
	}
	if err := h.startProvider(ctx); err != nil {
		return nil, nil, nil, err
	}
	for i := range rc.Kros {
		main = append(main, h.newRef(fmt.Sprintf("cp-%04d", i+1), versionShared, h.shared[i%len(h.shared)], -1))
	}
	for i := range rc.OneKros {
		one = append(one, h.newRef(fmt.Sprintf("one-%04d", i+1), versionOne, h.shared[(rc.Kros+i)%len(h.shared)], -1))
	}
	all := append(slices.Clone(main), one...)
	h.logf("rollout: granting access to %d ControlPlanes", len(all))
	if err := h.grantAll(ctx, all); err != nil {
		return nil, nil, nil, err
	}
	h.logf("rollout: %d Kros on %s, %d on %s", len(main), versionShared, len(one), versionOne)
	step, err := h.burst(ctx, all)
	if err != nil {
		return nil, nil, nil, err
	}
	res.CreatedToReady = step.Ready
	return rec, main, one, h.waitRolloutSettled(ctx, len(all))
}

// restRequests measures the provider's requests at rest, every Kro Ready.
func (h *harness) restRequests(ctx context.Context, kros int, res *RolloutResults) error {
	window := min(max(h.cfg.IdleWindow, 5*time.Second), 15*time.Second)
	h.logf("rollout: the provider's requests at rest for %s with %d Kros", window, kros)
	// As in the idle measurement: the last work after the Kros became Ready (their RGD
	// watches starting) is done a few seconds later.
	if err := sleep(ctx, 5*time.Second); err != nil {
		return err
	}
	before, err := h.rolloutCounts()
	if err != nil {
		return err
	}
	t0 := time.Now()
	if err := sleep(ctx, window); err != nil {
		return err
	}
	after, err := h.rolloutCounts()
	if err != nil {
		return err
	}
	secs := time.Since(t0).Seconds()
	res.RestWindowSeconds, res.RestRequestsPerSecond = round(secs), map[string]float64{}
	for k, v := range Delta(before.requests, after.requests) {
		res.RestRequestsPerSecond[k] = round3(v / secs)
	}
	return nil
}

func limitText(l int) string {
	if l == 0 {
		return "none"
	}
	return strconv.Itoa(l)
}

// updateProviderConfig changes the ProviderConfig's spec, retrying on conflicts with the
// provider's status writes, and returns when the update that went through was sent.
func (h *harness) updateProviderConfig(ctx context.Context, mutate func(*v1alpha1.ProviderConfig)) (time.Time, error) {
	var err error
	for range 50 {
		pc := &v1alpha1.ProviderConfig{}
		if err = h.pl.Get(ctx, client.ObjectKey{Name: providerName}, pc); err != nil {
			return time.Time{}, err
		}
		mutate(pc)
		at := time.Now()
		if err = h.pl.Update(ctx, pc); err == nil {
			return at, nil
		}
		if !apierrors.IsConflict(err) {
			return time.Time{}, fmt.Errorf("updating the ProviderConfig: %w", err)
		}
	}
	return time.Time{}, fmt.Errorf("updating the ProviderConfig: %w", err)
}

// waitRolloutSettled waits until the provider's queue is empty and the ProviderConfig's
// status, for its current generation, has every version's rollout Complete.
func (h *harness) waitRolloutSettled(ctx context.Context, kros int) error {
	if _, err := h.waitSettled(ctx, kros, 0); err != nil {
		return err
	}
	deadline := time.Now().Add(waitTimeout)
	for {
		pc := &v1alpha1.ProviderConfig{}
		if err := h.pl.Get(ctx, client.ObjectKey{Name: providerName}, pc); err != nil {
			return err
		}
		why := ""
		if pc.Status.ObservedGeneration != pc.Generation {
			why = fmt.Sprintf("status for generation %d of %d", pc.Status.ObservedGeneration, pc.Generation)
		}
		for _, vs := range pc.Status.Versions {
			if vs.Kros > 0 && (vs.Rollout != v1alpha1.RolloutComplete || vs.Updated != vs.Kros || len(vs.Updating) > 0) {
				why = fmt.Sprintf("version %s: %s, %d of %d updated: %s", vs.Version, vs.Rollout, vs.Updated, vs.Kros, vs.Message)
			}
		}
		if why == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the ProviderConfig's rollouts did not settle: %s", why)
		}
		if err := sleep(ctx, 200*time.Millisecond); err != nil {
			return err
		}
	}
}

// rolloutMarker is the helmValues key whose value tells one change from another.
const rolloutMarker = "benchRollout"

func markerValues(nonce string) *apiextensionsv1.JSON {
	return &apiextensionsv1.JSON{Raw: fmt.Appendf(nil, `{%q:%q}`, rolloutMarker, nonce)}
}

// markerOf is the marker in a HelmRelease's values, or "".
func markerOf(hr *helmv2.HelmRelease) string {
	if hr.Spec.Values == nil {
		return ""
	}
	var v map[string]any
	if json.Unmarshal(hr.Spec.Values.Raw, &v) != nil {
		return ""
	}
	s, _ := v[rolloutMarker].(string)
	return s
}

// providerCounts are the provider's requests by cluster and method, and its reconciles.
type providerCounts struct {
	requests                 map[string]float64
	kroReconciles, pcReconci float64
}

func (h *harness) rolloutCounts() (providerCounts, error) {
	s, err := h.scrapeProvider()
	if err != nil {
		return providerCounts{}, err
	}
	roles := map[string]string{hostOf(h.platform.Config.Host): "platform", hostOf(h.onboarding.Config.Host): "onboarding"}
	for _, c := range h.shared {
		roles[hostOf(c.Config.Host)] = "controlplane"
	}
	return providerCounts{
		requests: SumBy(s, "rest_client_requests_total", func(l map[string]string) (string, bool) {
			role, ok := roles[l["host"]]
			if !ok {
				role = "other"
			}
			return role + " " + l["method"], true
		}),
		kroReconciles: Sum(s, "controller_runtime_reconcile_total", kroController),
		pcReconci: Sum(s, "controller_runtime_reconcile_total", func(l map[string]string) bool {
			return l["controller"] == "providerconfig"
		}),
	}, nil
}

// hostOf is a rest.Config's host as client-go's metrics name it: host and port.
func hostOf(host string) string {
	if u, err := url.Parse(host); err == nil && u.Host != "" {
		return u.Host
	}
	return strings.TrimSuffix(host, "/")
}

// rollout changes version's helmValues under policy (already in place) and measures
// until every Kro of refs runs the new revision and the provider has settled.
func (h *harness) rollout(ctx context.Context, rec *rolloutRecorder, name, version string, refs []*kroRef, policy *v1alpha1.RolloutPolicy, all int) (RolloutRun, error) {
	r := RolloutRun{Name: name, Policy: "none", Version: version, Kros: len(refs)}
	if policy != nil && policy.MaxUnavailable != nil {
		r.Policy = "maxUnavailable: " + policy.MaxUnavailable.String()
		l, err := intstr.GetScaledValueFromIntOrPercent(policy.MaxUnavailable, len(refs), false)
		if err != nil {
			return r, err
		}
		r.Limit = max(l, 1)
	}
	h.logf("rollout %s: changing the helmValues of %s (%d Kros)", name, version, len(refs))
	before, err := h.rolloutCounts()
	if err != nil {
		return r, err
	}
	counted := time.Now()
	apiBefore, err := h.apiserverWrites(ctx)
	if err != nil {
		return r, err
	}
	upgradesBefore := h.upgradesPlayed()
	oldRev, err := h.versionRevision(ctx, version)
	if err != nil {
		return r, err
	}
	nonce := fmt.Sprintf("%s-%d", strings.ReplaceAll(name, " ", "-"), time.Now().UnixNano())
	h.tr.startCounting()
	rec.begin(version, nonce, oldRev)
	start, err := h.updateProviderConfig(ctx, func(pc *v1alpha1.ProviderConfig) {
		for i := range pc.Spec.Versions {
			if pc.Spec.Versions[i].Version == version {
				pc.Spec.Versions[i].HelmValues = markerValues(nonce)
			}
		}
	})
	if err != nil {
		return r, err
	}
	limit := waitTimeout
	if policy != nil {
		limit += time.Duration(math.Ceil(float64(len(refs))/float64(max(r.Limit, 1)))) * (h.helmUpgrade + 10*time.Second)
	}
	if err := waitRolledOut(ctx, rec, version, refs, limit); err != nil {
		return r, err
	}
	if _, err := h.waitSettled(ctx, all, 0); err != nil {
		return r, err
	}
	// Let the last status writes of the rollout come in.
	if err := sleep(ctx, time.Second); err != nil {
		return r, err
	}
	rec.end()
	snap := rec.snapshot()
	changes, _, notReady := h.tr.stopCounting()
	after, err := h.rolloutCounts()
	if err != nil {
		return r, err
	}
	r.WindowSeconds = round3(time.Since(counted).Seconds())
	apiAfter, err := h.apiserverWrites(ctx)
	if err != nil {
		return r, err
	}
	snap.analyze(&r, refs, start, policy != nil)
	r.HelmUpgrades = h.upgradesPlayed() - upgradesBefore
	r.ProviderRequests = Delta(before.requests, after.requests)
	r.RequestsTotal = total(r.ProviderRequests)
	for k, v := range r.ProviderRequests {
		if _, method, _ := strings.Cut(k, " "); slices.Contains(writeVerbs, method) {
			r.WriteRequests += v
		}
	}
	r.StatusPatches = Delta(apiBefore, apiAfter)["platform PATCH providerconfigs/status"]
	r.KroReconciles = after.kroReconciles - before.kroReconciles
	r.ProviderConfigReconciles = after.pcReconci - before.pcReconci
	r.ObjectChanges, r.KrosNotReady = changes, byReason(notReady)
	return r, nil
}

// versionRevision is the version's revision as the ProviderConfig's status has it now.
func (h *harness) versionRevision(ctx context.Context, version string) (string, error) {
	pc := &v1alpha1.ProviderConfig{}
	if err := h.pl.Get(ctx, client.ObjectKey{Name: providerName}, pc); err != nil {
		return "", err
	}
	for _, vs := range pc.Status.Versions {
		if vs.Version == version {
			return vs.Revision, nil
		}
	}
	return "", nil
}

// waitRolledOut waits until the recorder saw every Kro of refs Ready with the version's
// new revision and the status Complete; a paused rollout or the limit ends it.
func waitRolledOut(ctx context.Context, rec *rolloutRecorder, version string, refs []*kroRef, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		snap := rec.snapshot()
		done, why := snap.finished(refs)
		if done {
			return nil
		}
		if last := snap.last(); last != nil && last.vs.Rollout == v1alpha1.RolloutPaused {
			return fmt.Errorf("the rollout of %s paused: %s", version, last.vs.Message)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the rollout of %s did not complete in %s: %s", version, limit, why)
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}

// rolloutRecorder records, from watches of its own, what a rollout does: when each
// HelmRelease carries the change's values, when each Kro is Ready with a revision, and
// the ProviderConfig's status.
type rolloutRecorder struct {
	mu sync.Mutex
	rolloutSnapshot
	on bool
}

// rolloutSnapshot is what the recorder saw of one change.
type rolloutSnapshot struct {
	version, nonce string
	// oldRev is the version's revision before the change.
	oldRev string
	// hrChanged: per tenant namespace, when the HelmRelease was first seen with the
	// change's values, and its resourceVersion then.
	hrChanged map[string]seenAt
	// hrReady: per tenant namespace, when the HelmRelease with the change's values was
	// first seen Ready for its generation.
	hrReady map[string]time.Time
	// hrSpecChanges: new generations of HelmReleases seen (any version).
	hrSpecChanges map[string]int
	// kroReady: per Kro (namespace/name), per revision, when first seen healthy with it
	// (runsHealthy: phase Ready for its generation, status.revision).
	kroReady map[string]map[string]time.Time
	// pc: the version's status at each change of the ProviderConfig.
	pc           []pcSeen
	statusWrites int
}

type seenAt struct {
	at time.Time
	rv int64
}

type pcSeen struct {
	at time.Time
	rv int64
	vs v1alpha1.VersionStatus
}

func rvOf(s string) int64 {
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

func (r *rolloutRecorder) begin(version, nonce, oldRev string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rolloutSnapshot = rolloutSnapshot{version: version, nonce: nonce, oldRev: oldRev, hrChanged: map[string]seenAt{}, hrReady: map[string]time.Time{}, hrSpecChanges: map[string]int{},
		kroReady: map[string]map[string]time.Time{}}
	r.on = true
}

func (r *rolloutRecorder) end() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.on = false
}

func (r *rolloutRecorder) snapshot() rolloutSnapshot {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.rolloutSnapshot
	s.hrChanged = cloneMap(s.hrChanged)
	s.hrReady = cloneMap(s.hrReady)
	s.hrSpecChanges = cloneMap(s.hrSpecChanges)
	s.kroReady = map[string]map[string]time.Time{}
	for k, m := range r.kroReady {
		s.kroReady[k] = cloneMap(m)
	}
	s.pc = slices.Clone(s.pc)
	return s
}

func cloneMap[V any](m map[string]V) map[string]V {
	out := make(map[string]V, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func (r *rolloutRecorder) helmRelease(old, hr *helmv2.HelmRelease, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.on {
		return
	}
	if old != nil && old.Generation != hr.Generation {
		r.hrSpecChanges[hr.Namespace]++
	}
	if markerOf(hr) != r.nonce {
		return
	}
	if _, seen := r.hrChanged[hr.Namespace]; !seen {
		r.hrChanged[hr.Namespace] = seenAt{at, rvOf(hr.ResourceVersion)}
	}
	c := meta.FindStatusCondition(hr.Status.Conditions, "Ready")
	if _, seen := r.hrReady[hr.Namespace]; !seen && c != nil && c.Status == metav1.ConditionTrue &&
		c.ObservedGeneration == hr.Generation && hr.Status.ObservedGeneration == hr.Generation {
		r.hrReady[hr.Namespace] = at
	}
}

func (r *rolloutRecorder) kro(k *v1alpha1.Kro, at time.Time) {
	if k.Status.Revision == "" || k.Status.Phase != v1alpha1.PhaseReady || k.Status.ObservedGeneration != k.Generation {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.on {
		return
	}
	key := k.Namespace + "/" + k.Name
	if r.kroReady[key] == nil {
		r.kroReady[key] = map[string]time.Time{}
	}
	if _, seen := r.kroReady[key][k.Status.Revision]; !seen {
		r.kroReady[key][k.Status.Revision] = at
	}
}

func (r *rolloutRecorder) providerConfig(old, pc *v1alpha1.ProviderConfig, at time.Time) {
	if pc.Name != providerName {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.on {
		return
	}
	if old != nil && old.Generation == pc.Generation && old.ResourceVersion != pc.ResourceVersion {
		r.statusWrites++
	}
	for _, vs := range pc.Status.Versions {
		if vs.Version == r.version && pc.Status.ObservedGeneration == pc.Generation {
			r.pc = append(r.pc, pcSeen{at, rvOf(pc.ResourceVersion), *vs.DeepCopy()})
		}
	}
}

// startRolloutRecorder watches the HelmReleases and the ProviderConfig on the platform
// cluster and the Kros on the onboarding cluster for the recorder.
func (h *harness) startRolloutRecorder(ctx context.Context) (*rolloutRecorder, error) {
	rec := &rolloutRecorder{}
	rec.begin("", "", "")
	rec.end()
	pl, err := cache.New(fast(h.platform.Config), cache.Options{Scheme: clusters.Scheme})
	if err != nil {
		return nil, err
	}
	ob, err := cache.New(fast(h.onboarding.Config), cache.Options{Scheme: clusters.Scheme})
	if err != nil {
		return nil, err
	}
	add := func(c cache.Cache, obj client.Object, f func(old, o any, at time.Time)) error {
		inf, err := c.GetInformer(ctx, obj)
		if err != nil {
			return err
		}
		_, err = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc:    func(o any) { f(nil, o, time.Now()) },
			UpdateFunc: func(old, o any) { f(old, o, time.Now()) },
		})
		return err
	}
	if err := add(pl, &helmv2.HelmRelease{}, func(old, o any, at time.Time) {
		prev, _ := old.(*helmv2.HelmRelease)
		rec.helmRelease(prev, o.(*helmv2.HelmRelease), at)
	}); err != nil {
		return nil, err
	}
	if err := add(pl, &v1alpha1.ProviderConfig{}, func(old, o any, at time.Time) {
		prev, _ := old.(*v1alpha1.ProviderConfig)
		rec.providerConfig(prev, o.(*v1alpha1.ProviderConfig), at)
	}); err != nil {
		return nil, err
	}
	if err := add(ob, &v1alpha1.Kro{}, func(_, o any, at time.Time) { rec.kro(o.(*v1alpha1.Kro), at) }); err != nil {
		return nil, err
	}
	for _, c := range []cache.Cache{pl, ob} {
		go func() { _ = c.Start(ctx) }()
		if !c.WaitForCacheSync(ctx) {
			return nil, fmt.Errorf("the rollout recorder's caches did not sync")
		}
	}
	return rec, nil
}

// revision is the version's revision after the change: the one the ProviderConfig's
// status names last, once it is not the one before.
func (s rolloutSnapshot) revision() string {
	if l := s.last(); l != nil && l.vs.Revision != s.oldRev {
		return l.vs.Revision
	}
	return ""
}

func (s rolloutSnapshot) last() *pcSeen {
	if len(s.pc) == 0 {
		return nil
	}
	return &s.pc[len(s.pc)-1]
}

// completeAt is when the status first said the rollout of rev was Complete for n Kros.
func (s rolloutSnapshot) completeAt(rev string, n int) (time.Time, bool) {
	for _, p := range s.pc {
		if p.vs.Revision == rev && p.vs.Rollout == v1alpha1.RolloutComplete && int(p.vs.Updated) == n && p.vs.Kros == int32(n) {
			return p.at, true
		}
	}
	return time.Time{}, false
}

// finished tells whether every Kro of refs was seen Ready with the revision, its
// HelmRelease with the new values, and the status Complete; or what is missing.
func (s rolloutSnapshot) finished(refs []*kroRef) (bool, string) {
	rev := s.revision()
	if rev == "" {
		return false, "no status for the change yet"
	}
	changed, ready := 0, 0
	for _, k := range refs {
		if _, ok := s.hrChanged[k.tenant]; ok {
			changed++
		}
		if _, ok := s.kroReady[kroNamespace+"/"+k.name][rev]; ok {
			ready++
		}
	}
	_, complete := s.completeAt(rev, len(refs))
	if changed == len(refs) && ready == len(refs) && complete {
		return true, ""
	}
	l := s.last()
	return false, fmt.Sprintf("%d of %d HelmReleases changed, %d Kros Ready with %s; status: %s, %d updated, %d updating, %d failed: %s",
		changed, len(refs), ready, rev, l.vs.Rollout, l.vs.Updated, len(l.vs.Updating), len(l.vs.Failed), l.vs.Message)
}

// analyze fills in r's figures from what was seen of the change made at start.
func (s rolloutSnapshot) analyze(r *RolloutRun, refs []*kroRef, start time.Time, policy bool) {
	rev := s.revision()
	r.Revision = rev
	var spans []span
	var unavailable, upgrade, toKro []time.Duration
	var first, lastReady time.Time
	for _, k := range refs {
		ch := s.hrChanged[k.tenant]
		ready := s.kroReady[kroNamespace+"/"+k.name][rev]
		spans = append(spans, span{ch.at, ready})
		unavailable = append(unavailable, ready.Sub(ch.at))
		if hr, ok := s.hrReady[k.tenant]; ok {
			upgrade = append(upgrade, hr.Sub(ch.at))
			toKro = append(toKro, ready.Sub(hr))
		}
		if first.IsZero() || ch.at.Before(first) {
			first = ch.at
		}
		lastReady = later(lastReady, ready)
		r.HelmReleaseSpecChanges += s.hrSpecChanges[k.tenant]
		if !policy {
			continue
		}
		// The first status that admitted the Kro to the revision.
		admitted := int64(0)
		for _, p := range s.pc {
			if p.vs.Revision == rev && slices.ContainsFunc(p.vs.Updating, func(m v1alpha1.RolloutMember) bool { return m.Kro == kroNamespace+"/"+k.name }) {
				admitted = p.rv
				break
			}
		}
		if admitted == 0 || ch.rv < admitted {
			r.ChangedBeforeAdmitted++
		}
	}
	for _, p := range s.pc {
		if p.vs.Revision == rev {
			r.MostAdmitted = max(r.MostAdmitted, len(p.vs.Updating))
		}
	}
	r.MostUnavailable = mostAtOnce(spans)
	r.Unavailable = Summarize(unavailable)
	r.Upgrade, r.ReadyToKroReady = Summarize(upgrade), Summarize(toKro)
	r.SecondsToFirstChange = round3(first.Sub(start).Seconds())
	r.SecondsToAllUpdated = round3(lastReady.Sub(start).Seconds())
	if at, ok := s.completeAt(rev, len(refs)); ok {
		r.SecondsToComplete = round3(at.Sub(start).Seconds())
	}
	r.StatusWrites = s.statusWrites
}

// span is a period from start to end.
type span struct{ start, end time.Time }

// mostAtOnce is the most spans that overlap at one moment; a span that ends when another
// starts does not overlap it.
func mostAtOnce(spans []span) int {
	type edge struct {
		at    time.Time
		delta int
	}
	var edges []edge
	for _, s := range spans {
		edges = append(edges, edge{s.start, 1}, edge{s.end, -1})
	}
	slices.SortFunc(edges, func(a, b edge) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.delta - b.delta // ends first
	})
	most, now := 0, 0
	for _, e := range edges {
		now += e.delta
		most = max(most, now)
	}
	return most
}

package bench

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
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
	// UnavailableKros are Kros on a version whose helmValues change under MaxUnavailable
	// while UnavailableShare (0 to 1) of them are unavailable, in an environment of their
	// own after the other runs (0 skips that run; rollout_unavailable.go).
	UnavailableKros  int
	UnavailableShare float64
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
	// Kro Ready, before the first change, by cluster and method: the probes of engaged
	// ControlPlanes that went quiet (--controlplane-quiet-period) and the watches'
	// restarts, which go on during a rollout.
	RestWindowSeconds     float64            `json:"restWindowSeconds"`
	RestRequestsPerSecond map[string]float64 `json:"restRequestsPerSecond"`
	// Runs are the rollouts, one after the other.
	Runs []RolloutRun `json:"runs"`
	// Unavailable is the rollout with Kros unavailable before the change, when there was
	// one.
	Unavailable *RolloutUnavailable `json:"unavailable,omitempty"`
	Targets     []Target            `json:"targets"`
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
	// FailedKros: Kros any status of the revision listed in failed (none is expected, the
	// harness fails no upgrade of an available Kro).
	FailedKros int `json:"failedKros"`
	// UnavailableBefore: Kros unavailable before the change, whose releases keep failing
	// (rollout_unavailable.go); they count in MostUnavailable throughout and are not waited
	// for. FailedUnavailableBefore: those of them any status listed in failed (must be 0).
	UnavailableBefore       int `json:"unavailableBefore,omitempty"`
	FailedUnavailableBefore int `json:"failedUnavailableBefore,omitempty"`
	// CompleteMessage is the version's message in the first Complete status, and
	// MessageNamesUnavailable whether it says that exactly the Kros unavailable before got
	// the revision while unavailable (naming some, counting the rest).
	CompleteMessage         string `json:"completeMessage,omitempty"`
	MessageNamesUnavailable bool   `json:"messageNamesUnavailable,omitempty"`
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
	// MachineBusy: the share of the machine's CPU time busy (every process) over the
	// counted window.
	MachineBusy float64 `json:"machineBusy,omitempty"`
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
	if rc.Kros < 1 || rc.HelmUpgrade <= 0 || rc.UnavailableKros < 0 || rc.UnavailableShare < 0 || rc.UnavailableShare >= 1 {
		return nil, fmt.Errorf("the rollout run needs at least 1 Kro, a helm upgrade time above 0 and a share of unavailable Kros from 0 to below 1")
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
	err := runRollout(ctx, h, rc, res)
	if err != nil && h.proc != nil {
		err = fmt.Errorf("%w\nthe provider's last log lines:\n%s", err, h.proc.LogTail(40))
	}
	h.stop()
	if err == nil && rc.UnavailableKros > 0 {
		res.Unavailable, err = runRolloutUnavailable(ctx, cfg, rc)
	}
	res.Duration = time.Since(start).Round(time.Second).String()
	if err != nil {
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
	if res.RestWindowSeconds, res.RestRequestsPerSecond, err = h.restRequests(ctx, all); err != nil {
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
		r, err := h.rollout(ctx, rec, name, version, refs, nil, policy, all)
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

// restRequests measures the provider's requests at rest, every Kro Ready: over how many
// seconds, and per second by cluster and method.
func (h *harness) restRequests(ctx context.Context, kros int) (float64, map[string]float64, error) {
	window := min(max(h.cfg.IdleWindow, 5*time.Second), 15*time.Second)
	h.logf("rollout: the provider's requests at rest for %s with %d Kros", window, kros)
	// As in the idle measurement: the last work after the Kros became Ready (their RGD
	// watches starting) is done a few seconds later.
	if err := sleep(ctx, 5*time.Second); err != nil {
		return 0, nil, err
	}
	before, err := h.rolloutCounts()
	if err != nil {
		return 0, nil, err
	}
	t0 := time.Now()
	if err := sleep(ctx, window); err != nil {
		return 0, nil, err
	}
	after, err := h.rolloutCounts()
	if err != nil {
		return 0, nil, err
	}
	secs := time.Since(t0).Seconds()
	rates := map[string]float64{}
	for k, v := range Delta(before.requests, after.requests) {
		rates[k] = round3(v / secs)
	}
	return round(secs), rates, nil
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

package bench

// The rollout with Kros unavailable before the change: a share of the version's Kros
// have a release that fails (the harness, playing helm-controller, fails their
// upgrades) before the helmValues change and through it. Under the Deployment-like
// admission (controllers/rollout.go) they count against maxUnavailable, are admitted
// last, never count as failures and are done once their HelmRelease carries the
// revision.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
)

// RolloutUnavailable is the rollout with Kros unavailable before the change.
type RolloutUnavailable struct {
	Duration string `json:"duration"`
	// LoadAverage is the machine's load average over one minute when the run started (on
	// Machine.CPUs cores): above the cores, other work shared the machine.
	LoadAverage float64 `json:"loadAverage"`
	// Kros on the version, created at once; CreatedToReady is each until Ready.
	Kros           int  `json:"kros"`
	CreatedToReady Dist `json:"createdToReady"`
	// SharePercent of them (UnavailableBefore in Run) are made unavailable: every
	// 1/share-th Kro in name order, whose HelmRelease the harness fails (Ready False,
	// UpgradeFailed) and keeps failing.
	SharePercent float64 `json:"sharePercent"`
	// StatusBefore is the version's rollout phase and message with those Kros unavailable,
	// before the change.
	StatusBefore string `json:"statusBefore"`
	// RestWindowSeconds and RestRequestsPerSecond: the provider's requests at rest before
	// the change, as in RolloutResults.
	RestWindowSeconds     float64            `json:"restWindowSeconds"`
	RestRequestsPerSecond map[string]float64 `json:"restRequestsPerSecond"`
	// Run is the change, under spec.rollout.maxUnavailable.
	Run RolloutRun `json:"run"`
}

// runRolloutUnavailable measures the rollout with Kros unavailable before the change in
// an environment of its own.
func runRolloutUnavailable(ctx context.Context, cfg Config, rc RolloutConfig) (*RolloutUnavailable, error) {
	cfg.WorkDir = filepath.Join(cfg.WorkDir, "unavailable")
	start := time.Now()
	h := newHarness(cfg)
	h.helmUpgrade = rc.HelmUpgrade
	defer h.stop()
	res := &RolloutUnavailable{Kros: rc.UnavailableKros, SharePercent: round(rc.UnavailableShare * 100), LoadAverage: loadAverage()}
	err := h.rolloutUnavailable(ctx, rc, res)
	res.Duration = time.Since(start).Round(time.Second).String()
	if err != nil && h.proc != nil {
		err = fmt.Errorf("%w\nthe provider's last log lines:\n%s", err, h.proc.LogTail(40))
	}
	return res, err
}

func (h *harness) rolloutUnavailable(ctx context.Context, rc RolloutConfig, res *RolloutUnavailable) error {
	if err := h.setupEnv(ctx); err != nil {
		return err
	}
	rec, err := h.startRolloutRecorder(ctx)
	if err != nil {
		return err
	}
	if err := h.startProvider(ctx); err != nil {
		return err
	}
	var refs []*kroRef
	for i := range rc.UnavailableKros {
		refs = append(refs, h.newRef(fmt.Sprintf("un-%04d", i+1), versionShared, h.shared[i%len(h.shared)], -1))
	}
	n := len(refs)
	h.logf("rollout with Kros unavailable: granting access to %d ControlPlanes", n)
	if err := h.grantAll(ctx, refs); err != nil {
		return err
	}
	h.logf("rollout with Kros unavailable: %d Kros on %s", n, versionShared)
	step, err := h.burst(ctx, refs)
	if err != nil {
		return err
	}
	res.CreatedToReady = step.Ready
	if err := h.waitRolloutSettled(ctx, n); err != nil {
		return err
	}
	pre := unavailableSet(refs, rc.UnavailableShare)
	var tenants []string
	for _, k := range refs {
		if pre[k.name] {
			tenants = append(tenants, k.tenant)
		}
	}
	mu := rc.MaxUnavailable
	policy := &v1alpha1.RolloutPolicy{MaxUnavailable: &mu}
	h.logf("rollout with Kros unavailable: failing the releases of %d Kros, setting spec.rollout {maxUnavailable: %s}", len(pre), mu.String())
	if err := h.failReleases(ctx, tenants); err != nil {
		return err
	}
	if _, err := h.updateProviderConfig(ctx, func(pc *v1alpha1.ProviderConfig) { pc.Spec.Rollout = policy }); err != nil {
		return err
	}
	if res.StatusBefore, err = h.waitUnavailableSeen(ctx, n, len(pre)); err != nil {
		return err
	}
	h.logf("rollout with Kros unavailable: before the change: %s", res.StatusBefore)
	if res.RestWindowSeconds, res.RestRequestsPerSecond, err = h.restRequests(ctx, n); err != nil {
		return err
	}
	name := fmt.Sprintf("maxUnavailable %s, %g%% unavailable before", mu.String(), res.SharePercent)
	r, err := h.rollout(ctx, rec, name, versionShared, refs, pre, policy, n)
	r.RequestsBeyondRest = round(max(0, r.RequestsTotal-total(res.RestRequestsPerSecond)*r.WindowSeconds))
	res.Run = r
	if err != nil {
		return err
	}
	h.logf("rollout %s: Complete after %.1f s (all available Kros updated after %.1f s); most unavailable %d (limit %d), %d Kros counted as failed (%d of those unavailable before); %d status writes; the message names them: %v",
		name, r.SecondsToComplete, r.SecondsToAllUpdated, r.MostUnavailable, r.Limit, r.FailedKros, r.FailedUnavailableBefore, r.StatusWrites, r.MessageNamesUnavailable)
	return nil
}

// unavailableSet picks share of the Kros, spread evenly over them in name order: with
// 1,000 Kros and 5 %, un-0011, un-0031, … un-0991.
func unavailableSet(refs []*kroRef, share float64) map[string]bool {
	out := map[string]bool{}
	n := len(refs)
	want := int(float64(n)*share + 0.5)
	for j := range want {
		out[refs[(2*j+1)*n/(2*want)].name] = true
	}
	return out
}

// waitUnavailableSeen waits until the provider's status for the current generation
// counts n Kros on the shared version, unavailable of them not updated, none updating or
// failed, and its queue is empty; it returns the version's rollout and message then.
func (h *harness) waitUnavailableSeen(ctx context.Context, n, unavailable int) (string, error) {
	deadline := time.Now().Add(waitTimeout)
	for {
		pc := &v1alpha1.ProviderConfig{}
		if err := h.pl.Get(ctx, client.ObjectKey{Name: providerName}, pc); err != nil {
			return "", err
		}
		why := "no status of " + versionShared
		for _, vs := range pc.Status.Versions {
			if vs.Version != versionShared {
				continue
			}
			why = fmt.Sprintf("%s: %s, %d of %d updated, %d updating, %d failed: %s", vs.Version, vs.Rollout, vs.Updated, vs.Kros, len(vs.Updating), len(vs.Failed), vs.Message)
			if pc.Status.ObservedGeneration == pc.Generation && int(vs.Kros) == n && int(vs.Updated) == n-unavailable && len(vs.Updating) == 0 && len(vs.Failed) == 0 {
				if _, err := h.waitSettled(ctx, n, 0); err != nil {
					return "", err
				}
				return string(vs.Rollout) + ": " + vs.Message, nil
			}
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("the provider did not see the %d Kros unavailable: %s", unavailable, why)
		}
		if err := sleep(ctx, 200*time.Millisecond); err != nil {
			return "", err
		}
	}
}

// loadAverage is the machine's load average over the last minute (0: unknown).
func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f, _, _ := strings.Cut(string(b), " ")
	v, _ := strconv.ParseFloat(f, 64)
	return v
}

// ParseShare reads a share of Kros: a percentage ("5%") or a fraction ("0.05"), from 0
// to below 1.
func ParseShare(s string) (float64, error) {
	p, percent := strings.CutSuffix(strings.TrimSpace(s), "%")
	v, err := strconv.ParseFloat(p, 64)
	if percent {
		v /= 100
	}
	if err != nil || v < 0 || v >= 1 {
		return 0, fmt.Errorf("%q is no share from 0 %% to below 100 %%", s)
	}
	return v, nil
}

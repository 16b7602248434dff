package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/openmcp-project/service-provider-kro/clusters"
)

// The scenarios Run measures in provider mode: bursts of Kros onto ControlPlanes on
// shared API servers step by step with the memory after each, then, with every Kro in
// place, the idle cost, a restart, secret rotations and restores, and blocked deletions
// released.

func (h *harness) runAll(ctx context.Context, res *Results) error {
	if err := h.runSteps(ctx, res); err != nil {
		return err
	}
	return h.runAtScale(ctx, res)
}

// runSteps measures bursts of Kros onto ControlPlanes on shared API servers (1, 2) and
// the memory after each (6).
func (h *harness) runSteps(ctx context.Context, res *Results) error {
	if _, err := h.waitSettled(ctx, 0, 0); err != nil {
		return err
	}
	rss, heap, err := h.memory(ctx)
	if err != nil {
		return err
	}
	res.Memory.BaselineRSSMiB, res.Memory.BaselineHeapMiB = rss, heap
	xs, rssY, heapY := []float64{0}, []float64{rss}, []float64{heap}

	// 1, 2, 6: bursts of Kros onto ControlPlanes on shared API servers, memory per step.
	prev := 0
	var rotReconciles, rotSeconds float64
	for _, n := range h.cfg.Steps {
		var refs []*kroRef
		for i := prev; i < n; i++ {
			name := fmt.Sprintf("cp-%04d", i+1)
			refs = append(refs, h.newRef(name, versionShared, h.shared[i%len(h.shared)], -1))
		}
		h.logf("step N=%d: granting access to %d ControlPlanes", n, len(refs))
		if err := h.grantAll(ctx, refs); err != nil {
			return err
		}
		h.logf("step N=%d: burst of %d Kros", n, len(refs))
		var profiled func() (*Profile, error)
		if n == h.cfg.Steps[len(h.cfg.Steps)-1] {
			profiled = h.cpuProfile(ctx, h.burstSize(len(refs)))
		}
		step, err := h.burst(ctx, refs)
		if err != nil {
			return err
		}
		if profiled != nil {
			if res.Profile, err = profiled(); err != nil {
				return err
			}
		}
		step.N = n
		if _, err := h.waitSettled(ctx, n, 0); err != nil {
			return err
		}
		if step.RSSMiB, step.HeapMiB, err = h.memory(ctx); err != nil {
			return err
		}
		if err := h.heapProfile(ctx, res.Profile); err != nil {
			return err
		}
		step.Engaged = n
		h.logf("step N=%d: applied p99 %.0fms, ready p99 %.0fms, %.1f Kros/s, RSS %.1f MiB, heap %.1f MiB",
			n, step.Applied.P99, step.Ready.P99, step.AppliedPerSecond, step.RSSMiB, step.HeapMiB)
		res.Steps = append(res.Steps, step)
		if res.ChartSecretRotationAtTarget.Copies == 0 && n >= targetRotationCopies {
			h.logf("step N=%d: rotating the chart pull secret (%d copies) x%d", n, len(h.kros), h.cfg.Repeats)
			before, err := h.providerState()
			if err != nil {
				return err
			}
			if res.ChartSecretRotationAtTarget, err = h.rotate(ctx, chartSecret, chartCopies(h.kros)); err != nil {
				return err
			}
			after, err := h.providerState()
			if err != nil {
				return err
			}
			// The reconciler's figures are about the bursts: leave the rotation's work out.
			rotReconciles += after.reconciles - before.reconciles
			rotSeconds += after.reconcileSeconds - before.reconcileSeconds
		}
		xs, rssY, heapY = append(xs, float64(n)), append(rssY, step.RSSMiB), append(heapY, step.HeapMiB)
		prev = n
	}
	res.Memory.RSSSlope, _ = Slope(xs, rssY)
	res.Memory.HeapSlope, _ = Slope(xs, heapY)
	res.Memory.RSSSlope, res.Memory.HeapSlope = round3(res.Memory.RSSSlope), round3(res.Memory.HeapSlope)
	last := res.Steps[len(res.Steps)-1]
	res.Memory.MaxN, res.Memory.RSSAtMaxMiB, res.Memory.HeapAtMaxMiB = last.N, last.RSSMiB, last.HeapMiB
	st, err := h.providerState()
	if err != nil {
		return err
	}
	reconciles, seconds := st.reconciles-rotReconciles, st.reconcileSeconds-rotSeconds
	res.Reconciler = Reconciler{Workers: int(st.workers), Reconciles: reconciles, PerKro: round(reconciles / float64(last.N))}
	if reconciles > 0 {
		res.Reconciler.MeanMs = round(seconds / reconciles * 1000)
	}
	return nil
}

// runAtScale adds the ControlPlanes with their own API server and measures, with every
// Kro in place: idle cost (7), restart (8), rotations (4), restores (5), RGDs (3).
func (h *harness) runAtScale(ctx context.Context, res *Results) error {
	var err error

	// The ControlPlanes with an API server of their own.
	var ded []*kroRef
	for i, cp := range h.dedicated {
		ded = append(ded, h.newRef(fmt.Sprintf("ded-%d", i+1), versionDedicated, cp, i))
	}
	h.logf("dedicated ControlPlanes: %d Kros", len(ded))
	if err := h.grantAll(ctx, ded); err != nil {
		return err
	}
	if _, err := h.burst(ctx, ded); err != nil {
		return err
	}
	all := len(h.kros)
	if _, err := h.waitSettled(ctx, all, 0); err != nil {
		return err
	}

	// 7: idle cost.
	h.logf("idle: watching %d Kros for %s", all, h.cfg.IdleWindow)
	if res.Idle, err = h.idle(ctx, all); err != nil {
		return err
	}
	// 8: restart.
	h.logf("restart with %d Kros", all)
	if res.Restart, err = h.restart(ctx, all); err != nil {
		return err
	}
	// 4: rotations.
	h.logf("rotating the chart pull secret (%d copies) x%d", all, h.cfg.Repeats)
	if res.ChartSecretRotation, err = h.rotate(ctx, chartSecret, chartCopies(h.kros)); err != nil {
		return err
	}
	h.logf("rotating the image pull secret (%d copies) x%d", len(ded), h.cfg.Repeats)
	if res.ImageSecretRotation, err = h.rotate(ctx, imageSecret, imageCopies(ded)); err != nil {
		return err
	}
	// 2 at steady state: HelmRelease Ready → Kro Ready.
	h.logf("HelmRelease Ready -> Kro Ready at steady state x%d", h.cfg.Repeats)
	if res.HelmReadyToKroReady, err = h.helmReady(ctx); err != nil {
		return err
	}
	// 5: a replicated secret deleted.
	h.logf("deleting replicated image pull secrets x%d", h.cfg.Repeats)
	if res.SecretRestored, err = h.restore(ctx, ded); err != nil {
		return err
	}
	// 3: the last RGD deleted.
	h.logf("deleting the last RGD under a blocked deletion x%d", h.cfg.Repeats)
	if res.RGDDeletion, err = h.rgdDeletion(ctx, ded); err != nil {
		return err
	}
	// 3b: the last instance of a kind kro generated deleted.
	h.logf("deleting the last instance of a kind kro generated under a blocked deletion x%d", h.cfg.Repeats)
	if res.InstanceDeletion, err = h.instanceDeletion(ctx, ded); err != nil {
		return err
	}
	return nil
}

// chartCopies are the tracker keys of the chart pull secret's tenant copies with the data
// of fingerprint fp.
func chartCopies(refs []*kroRef) func(fp string) []string {
	return func(fp string) []string {
		var keys []string
		for _, k := range refs {
			keys = append(keys, "secret|platform|"+k.tenant+"/"+providerName+"-"+chartSecret+"|"+fp)
		}
		return keys
	}
}

// imageCopies are the tracker keys of the image pull secret's copies on the dedicated
// ControlPlanes of refs with the data of fingerprint fp.
func imageCopies(refs []*kroRef) func(fp string) []string {
	return func(fp string) []string {
		var keys []string
		for _, k := range refs {
			keys = append(keys, fmt.Sprintf("secret|dedicated-%d|%s/%s|%s", k.dedicated+1, clusters.KroNamespace, imageSecret, fp))
		}
		return keys
	}
}

func round3(v float64) float64 { return float64(int64(v*1000+0.5)) / 1000 }

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

package bench

import (
	"context"
	"fmt"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmcp-project/service-provider-kro/controllers/owned"
)

// Run's measurements with every Kro in place: the idle cost, a restart of the
// provider, the pull secrets rotated, a replicated secret restored, and HelmRelease
// Ready until Kro Ready.

func (h *harness) idle(ctx context.Context, kros int) (Idle, error) {
	if err := sleep(ctx, 5*time.Second); err != nil {
		return Idle{}, err
	}
	apiBefore, err := h.apiserverWrites(ctx)
	if err != nil {
		return Idle{}, err
	}
	before, err := h.providerState()
	if err != nil {
		return Idle{}, err
	}
	h.tr.startCounting()
	start := time.Now()
	if err := sleep(ctx, h.cfg.IdleWindow); err != nil {
		return Idle{}, err
	}
	after, err := h.providerState()
	if err != nil {
		return Idle{}, err
	}
	window := time.Since(start)
	changes, byKind, notReady := h.tr.stopCounting()
	apiAfter, err := h.apiserverWrites(ctx)
	if err != nil {
		return Idle{}, err
	}
	mins := window.Minutes()
	reqs := Delta(before.requests, after.requests)
	apiWrites := Delta(apiBefore, apiAfter)
	return Idle{
		Kros:                  kros,
		WindowSeconds:         round(window.Seconds()),
		RequestsPerMin:        round(total(reqs) / mins),
		WritesPerMin:          round(writesOf(reqs) / mins),
		RequestsByMethod:      reqs,
		APIServerWritesPerMin: round(total(apiWrites) / mins),
		APIServerWrites:       apiWrites,
		ObjectChanges:         changes,
		ObjectChangesByKind:   byKind,
		KrosNotReady:          notReady,
		ReconcilesPerMin:      round((after.reconciles - before.reconciles) / mins),
		CPUCores:              round3((after.cpu - before.cpu) / window.Seconds()),
		RSSMiB:                round(after.rss / (1 << 20)),
	}, nil
}

func (h *harness) restart(ctx context.Context, kros int) (Restart, error) {
	apiBefore, err := h.apiserverWrites(ctx)
	if err != nil {
		return Restart{}, err
	}
	h.tr.startCounting()
	if err := h.proc.Stop(); err != nil {
		return Restart{}, fmt.Errorf("stopping the provider: %w", err)
	}
	start := time.Now()
	if err := h.startProvider(ctx); err != nil {
		return Restart{}, err
	}
	done, err := h.waitSettled(ctx, kros, float64(kros))
	if err != nil {
		return Restart{}, err
	}
	if err := sleep(ctx, 3*time.Second); err != nil {
		return Restart{}, err
	}
	after, err := h.providerState()
	if err != nil {
		return Restart{}, err
	}
	changes, byKind, notReady := h.tr.stopCounting()
	apiAfter, err := h.apiserverWrites(ctx)
	if err != nil {
		return Restart{}, err
	}
	byVerb := map[string]float64{}
	for _, v := range writeVerbs {
		if after.requests[v] > 0 {
			byVerb[v] = after.requests[v]
		}
	}
	return Restart{
		Kros:                kros,
		SecondsToReverified: round3(done.Sub(start).Seconds()),
		Reconciles:          after.reconciles,
		Requests:            total(after.requests),
		WriteRequests:       writesOf(after.requests),
		WriteRequestsByVerb: byVerb,
		APIServerWrites:     Delta(apiBefore, apiAfter),
		ObjectChanges:       changes,
		ObjectChangesByKind: byKind,
		KrosNotReady:        notReady,
	}, nil
}

// rotate changes a source secret Repeats times and waits for every copy (keys(fp)).
func (h *harness) rotate(ctx context.Context, name string, keys func(fp string) []string) (Rotation, error) {
	var toLast, perCopy []time.Duration
	copies := 0
	for r := range h.cfg.Repeats {
		if _, err := h.waitSettled(ctx, len(h.kros), 0); err != nil {
			return Rotation{}, err
		}
		s := &corev1.Secret{}
		if err := h.pl.Get(ctx, client.ObjectKey{Namespace: podNamespace, Name: name}, s); err != nil {
			return Rotation{}, err
		}
		s.Data = h.pullSecretData(fmt.Sprintf("rotated-%d-%d", r, time.Now().UnixNano()))
		want := keys(fingerprint(s.Data))
		copies = len(want)
		start := time.Now()
		if err := h.pl.Update(ctx, s); err != nil {
			return Rotation{}, err
		}
		seen, err := h.tr.wait(ctx, want, "copies of "+name)
		if err != nil {
			return Rotation{}, err
		}
		var last time.Duration
		for _, at := range seen {
			d := at.Sub(start)
			perCopy = append(perCopy, d)
			last = max(last, d)
		}
		toLast = append(toLast, last)
		if err := sleep(ctx, time.Second); err != nil {
			return Rotation{}, err
		}
	}
	return Rotation{Copies: copies, ToLast: Summarize(toLast), PerCopy: Summarize(perCopy)}, nil
}

// restore deletes the replicated image pull secret on each dedicated ControlPlane.
func (h *harness) restore(ctx context.Context, ded []*kroRef) (Dist, error) {
	var ds []time.Duration
	for r := range h.cfg.Repeats {
		if _, err := h.waitSettled(ctx, len(h.kros), 0); err != nil {
			return Dist{}, err
		}
		for _, k := range ded {
			s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: owned.KroNamespace, Name: imageSecret}}
			start := time.Now()
			if err := h.ded[k.dedicated].Delete(ctx, s); err != nil {
				return Dist{}, fmt.Errorf("repeat %d: deleting %s on dedicated-%d: %w", r, imageSecret, k.dedicated+1, err)
			}
			at, err := h.tr.waitAddedAfter(ctx, fmt.Sprintf("dedicated-%d|%s/%s", k.dedicated+1, owned.KroNamespace, imageSecret), start)
			if err != nil {
				return Dist{}, err
			}
			ds = append(ds, at.Sub(start))
		}
		if err := sleep(ctx, 500*time.Millisecond); err != nil {
			return Dist{}, err
		}
	}
	return Summarize(ds), nil
}

// helmReady takes up to ten Kros spread over all, and for each, Repeats times, has the
// HelmRelease go Ready=Unknown (an upgrade at work) and then Ready=True, and times the
// Kro from the HelmRelease's Ready=True until Ready, with the queue empty before.
func (h *harness) helmReady(ctx context.Context) (Dist, error) {
	var sample []*kroRef
	step := max(1, len(h.kros)/10)
	for i := len(h.kros) - 1; i >= 0 && len(sample) < 10; i -= step {
		sample = append(sample, h.kros[i])
	}
	var ds []time.Duration
	for range h.cfg.Repeats {
		if _, err := h.waitSettled(ctx, len(h.kros), 0); err != nil {
			return Dist{}, err
		}
		for _, k := range sample {
			d, err := h.helmReadyOnce(ctx, k)
			if err != nil {
				return Dist{}, err
			}
			ds = append(ds, d)
		}
	}
	return Summarize(ds), nil
}

func (h *harness) helmReadyOnce(ctx context.Context, k *kroRef) (time.Duration, error) {
	h.fluxHold.Store(k.tenant, true)
	defer h.fluxHold.Delete(k.tenant)
	key := client.ObjectKey{Namespace: k.tenant, Name: providerName}
	hr := &helmv2.HelmRelease{}
	if err := h.pl.Get(ctx, key, hr); err != nil {
		return 0, err
	}
	start := time.Now()
	if err := h.setFluxCondition(ctx, hr, metav1.ConditionUnknown); err != nil {
		return 0, err
	}
	if _, err := h.tr.waitAddedAfter(ctx, "kronotready|"+string(k.uid), start); err != nil {
		return 0, err
	}
	if err := h.pl.Get(ctx, key, hr); err != nil {
		return 0, err
	}
	ready := time.Now()
	if err := h.setFluxCondition(ctx, hr, metav1.ConditionTrue); err != nil {
		return 0, err
	}
	at, err := h.tr.waitAddedAfter(ctx, "kroready|"+string(k.uid), ready)
	if err != nil {
		return 0, err
	}
	return at.Sub(ready), nil
}

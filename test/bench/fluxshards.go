package bench

import (
	"context"
	"fmt"
	"slices"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	"github.com/fluxcd/pkg/apis/meta"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/flux"
	"github.com/openmcp-project/service-provider-kro/controllers/owned"
	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

// FluxShardResults is flux mode with Flux's sharding (Config.FluxShards > 0): the
// environment's own source- and helm-controller run with
// --watch-label-selector='!sharding.fluxcd.io/key', and one more pair per key selects
// that key's objects, as Flux documents its shards. The ProviderConfig names the first
// keys; the last pair waits for the move, when its key is added.
type FluxShardResults struct {
	// Keys are spec.fluxShards while the Kros are installed.
	Keys []string `json:"keys"`
	// Spread is the ProviderConfig's status.fluxShards with every Kro Ready.
	Spread []v1alpha1.FluxShardStatus `json:"spread"`
	// Reconciled counts, for each Flux controller (the unsharded pair as ""), the
	// HelmReleases its helm-controller reconciled (gotk_reconcile_duration_seconds);
	// Foreign counts those it reconciled while they carried another key.
	Reconciled map[string]int `json:"helmReleasesReconciled"`
	Foreign    int            `json:"foreign"`
	// ControllerRSSMiB is each shard's source- and helm-controller RSS with every Kro
	// Ready, by "<key>/<controller>".
	ControllerRSSMiB map[string]float64 `json:"controllerRSSMiB"`
	Move             FluxShardMove      `json:"move"`
}

// FluxShardMove is a key added to spec.fluxShards with every Kro Ready.
type FluxShardMove struct {
	AddedKey string `json:"addedKey"`
	// Moved and Stayed are the Kros whose key changed, and the others.
	Moved  int `json:"moved"`
	Stayed int `json:"stayed"`
	// ToRelabelled: the ProviderConfig updated → the last moved HelmRelease carries the
	// new key (the provider's source-first hand-over included).
	ToRelabelledMs float64 `json:"toRelabelledMs"`
	// ToReconciled: the same start → the new shard's helm-controller has answered a
	// reconcile request on every moved HelmRelease.
	ToReconciledMs float64 `json:"toReconciledMs"`
	// NotReady counts Kros seen with HelmReleaseReady not True during the move.
	NotReady int `json:"notReady"`
	// ReleasesBefore and ReleasesAfter count kro's Helm release revisions (Secrets
	// owner=helm in kro-system) on every ControlPlane: equal when nothing was
	// reinstalled or upgraded.
	ReleasesBefore int `json:"releasesBefore"`
	ReleasesAfter  int `json:"releasesAfter"`
}

// fluxShardKey is the i-th (0-based) shard key of flux mode.
func fluxShardKey(i int) string { return fmt.Sprintf("shard-%d", i+1) }

// fluxShardKeys are the keys in spec.fluxShards while the Kros are installed.
func (h *harness) fluxShardKeys() []string {
	var keys []string
	for i := range h.cfg.FluxShards {
		keys = append(keys, fluxShardKey(i))
	}
	return keys
}

// startFluxShards starts a source- and helm-controller pair for each key and one for
// the key the move adds, each selecting its key's objects.
func (h *harness) startFluxShards(ctx context.Context, res *FluxResults) error {
	for i := range h.cfg.FluxShards + 1 {
		key := fluxShardKey(i)
		start := time.Now()
		f, err := h.e2e.StartFluxShard(ctx, h.cfg.Log, key)
		if err != nil {
			return fmt.Errorf("starting Flux shard %s: %w", key, err)
		}
		h.fluxShards = append(h.fluxShards, f)
		res.Setup["flux "+key] = round(time.Since(start).Seconds())
	}
	return nil
}

// fluxShardSteadyState records the spread, who reconciled what and the shards' memory
// with every Kro Ready, then adds a key and times the move.
func (h *harness) fluxShardSteadyState(ctx context.Context, res *FluxResults) error {
	keys := h.fluxShardKeys()
	sr := &FluxShardResults{Keys: keys, ControllerRSSMiB: map[string]float64{}}
	res.Shards = sr
	pc := &v1alpha1.ProviderConfig{}
	if err := h.pl.Get(ctx, client.ObjectKey{Name: providerName}, pc); err != nil {
		return err
	}
	sr.Spread = pc.Status.FluxShards
	for i, f := range h.fluxShards[:len(keys)] {
		for _, c := range []testenv.Tool{testenv.SourceController, testenv.HelmController} {
			samples, err := scrape(f.MetricsURL(c.Name))
			if err != nil {
				return err
			}
			sr.ControllerRSSMiB[keys[i]+"/"+c.Name] = round(Sum(samples, "process_resident_memory_bytes", nil) / (1 << 20))
		}
	}
	var err error
	sr.Move, err = h.moveFluxShard(ctx, append(keys, fluxShardKey(len(keys))))
	if err != nil {
		return err
	}
	sr.Reconciled, sr.Foreign, err = h.reconciledByShard(append(keys, sr.Move.AddedKey))
	h.logf("flux shards: spread %v, moved %d of %d in %.0f ms (reconciled by the new shard %.0f ms), %d not Ready on the way, release revisions %d → %d, reconciled %v, foreign %d",
		sr.Spread, sr.Move.Moved, sr.Move.Moved+sr.Move.Stayed, sr.Move.ToRelabelledMs, sr.Move.ToReconciledMs, sr.Move.NotReady,
		sr.Move.ReleasesBefore, sr.Move.ReleasesAfter, sr.Reconciled, sr.Foreign)
	return err
}

// moveFluxShard sets spec.fluxShards to keys (one more than before) and times until
// the Kros whose key changed are relabelled and reconciled by their new shard.
func (h *harness) moveFluxShard(ctx context.Context, keys []string) (FluxShardMove, error) {
	mv := FluxShardMove{AddedKey: keys[len(keys)-1]}
	var moved []*kroRef
	for _, k := range h.kros {
		if flux.ShardOf(k.object(), keys) == mv.AddedKey {
			moved = append(moved, k)
		}
	}
	mv.Moved, mv.Stayed = len(moved), len(h.kros)-len(moved)
	var err error
	if mv.ReleasesBefore, err = h.kroReleases(ctx); err != nil {
		return mv, err
	}
	pc := &v1alpha1.ProviderConfig{}
	if err := h.pl.Get(ctx, client.ObjectKey{Name: providerName}, pc); err != nil {
		return mv, err
	}
	pc.Spec.FluxShards = keys
	start := time.Now()
	if err := h.pl.Update(ctx, pc); err != nil {
		return mv, err
	}
	notReady := map[string]bool{}
	relabelled := func(hr *helmv2.HelmRelease) bool { return hr.Labels[v1alpha1.LabelFluxShard] == mv.AddedKey }
	if err := h.waitReleases(ctx, moved, notReady, relabelled); err != nil {
		return mv, fmt.Errorf("waiting for the moved HelmReleases to carry %s: %w", mv.AddedKey, err)
	}
	mv.ToRelabelledMs = float64(time.Since(start).Milliseconds())
	if err := h.requestReconcile(ctx, moved, notReady); err != nil {
		return mv, err
	}
	mv.ToReconciledMs = float64(time.Since(start).Milliseconds())
	mv.NotReady = len(notReady)
	mv.ReleasesAfter, err = h.kroReleases(ctx)
	return mv, err
}

// requestReconcile asks Flux to reconcile each HelmRelease of refs and waits until
// every one has been handled, noting Kros not Ready meanwhile.
func (h *harness) requestReconcile(ctx context.Context, refs []*kroRef, notReady map[string]bool) error {
	token := time.Now().UTC().Format(time.RFC3339Nano)
	for _, k := range refs {
		hr := &helmv2.HelmRelease{ObjectMeta: metav1.ObjectMeta{Namespace: k.tenant, Name: providerName}}
		patch := client.RawPatch(client.Merge.Type(), fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, meta.ReconcileRequestAnnotation, token))
		if err := h.pl.Patch(ctx, hr, patch); err != nil {
			return err
		}
	}
	handled := func(hr *helmv2.HelmRelease) bool { return hr.Status.LastHandledReconcileAt == token }
	return h.waitReleases(ctx, refs, notReady, handled)
}

// waitReleases polls until the HelmRelease of every one of refs is done, noting the Kros
// not Ready meanwhile.
func (h *harness) waitReleases(ctx context.Context, refs []*kroRef, notReady map[string]bool, done func(*helmv2.HelmRelease) bool) error {
	return pollUntil(ctx, func() (bool, error) {
		if err := h.notReadyKros(ctx, notReady); err != nil {
			return false, err
		}
		for _, k := range refs {
			hr := &helmv2.HelmRelease{}
			if err := h.pl.Get(ctx, client.ObjectKey{Namespace: k.tenant, Name: providerName}, hr); err != nil {
				return false, err
			}
			if !done(hr) {
				return false, nil
			}
		}
		return true, nil
	})
}

// notReadyKros adds the Kros whose HelmReleaseReady is not True.
func (h *harness) notReadyKros(ctx context.Context, into map[string]bool) error {
	var list v1alpha1.KroList
	if err := h.ob.List(ctx, &list, client.InNamespace(kroNamespace)); err != nil {
		return err
	}
	for _, k := range list.Items {
		if !apimeta.IsStatusConditionTrue(k.Status.Conditions, v1alpha1.ConditionHelmReleaseReady) {
			into[k.Name] = true
		}
	}
	return nil
}

// kroReleases counts kro's Helm release revisions on every ControlPlane.
func (h *harness) kroReleases(ctx context.Context) (int, error) {
	n := 0
	for _, c := range h.ded {
		var list corev1.SecretList
		if err := c.List(ctx, &list, client.InNamespace(owned.KroNamespace), client.MatchingLabels{"owner": "helm"}); err != nil {
			return 0, err
		}
		n += len(list.Items)
	}
	return n, nil
}

// reconciledByShard reads from each helm-controller's metrics which tenants'
// HelmReleases it reconciled. keys are spec.fluxShards after the move (the last one
// added by it). A shard may have reconciled a HelmRelease that carried its key before
// the move or carries it after; any other is foreign, and so is any the unsharded
// helm-controller reconciled.
func (h *harness) reconciledByShard(keys []string) (map[string]int, int, error) {
	legit := map[string][]string{}
	for _, k := range h.kros {
		legit[k.tenant] = []string{flux.ShardOf(k.object(), keys[:len(keys)-1]), flux.ShardOf(k.object(), keys)}
	}
	pairs := map[string]*testenv.Flux{"": h.e2e.Flux}
	for i, k := range keys {
		pairs[k] = h.fluxShards[i]
	}
	out, foreign := map[string]int{}, 0
	for key, f := range pairs {
		samples, err := scrape(f.MetricsURL(testenv.HelmController.Name))
		if err != nil {
			return nil, 0, err
		}
		seen := SumBy(samples, "gotk_reconcile_duration_seconds_count", func(l map[string]string) (string, bool) {
			_, tenant := legit[l["namespace"]]
			return l["namespace"], l["kind"] == helmv2.HelmReleaseKind && tenant
		})
		out[key] = len(seen)
		for tenant := range seen {
			if !slices.Contains(legit[tenant], key) {
				foreign++
			}
		}
	}
	return out, foreign, nil
}

// pollUntil calls done every 100 ms until it reports true, for waitTimeout at most.
func pollUntil(ctx context.Context, done func() (bool, error)) error {
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, waitTimeout, true, func(context.Context) (bool, error) { return done() })
}

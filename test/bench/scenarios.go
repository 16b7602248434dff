package bench

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/clusters"
	"github.com/openmcp-project/service-provider-kro/controllers"
	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

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

func (h *harness) newRef(name, version string, cp *testenv.Cluster, dedicated int) *kroRef {
	k := &v1alpha1.Kro{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: kroNamespace}}
	tenant, _ := controllers.TenantNamespace(k)
	ref := &kroRef{name: name, tenant: tenant, version: version, cp: cp, dedicated: dedicated}
	h.kros = append(h.kros, ref)
	return ref
}

// object is k's Kro with its name and namespace only.
func (k *kroRef) object() *v1alpha1.Kro {
	return &v1alpha1.Kro{ObjectMeta: metav1.ObjectMeta{Name: k.name, Namespace: kroNamespace}}
}

// parallel runs f on every ref with the configured concurrency.
func (h *harness) parallel(refs []*kroRef, f func(*kroRef) error) error {
	work := make(chan *kroRef)
	var mu sync.Mutex
	var first error
	var wg sync.WaitGroup
	for range h.cfg.Concurrency {
		wg.Go(func() {
			for r := range work {
				if err := f(r); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		})
	}
	for _, r := range refs {
		work <- r
	}
	close(work)
	wg.Wait()
	return first
}

// grantAll gives every ControlPlane its own credentials (a ServiceAccount token on its
// API server) and puts them into the tenant namespace, as an operator does standalone.
func (h *harness) grantAll(ctx context.Context, refs []*kroRef) error {
	return h.parallel(refs, func(r *kroRef) error {
		kc, err := r.cp.TokenKubeconfig(ctx, r.name)
		if err != nil {
			return err
		}
		if err := h.pl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: r.tenant}}); client.IgnoreAlreadyExists(err) != nil {
			return err
		}
		return h.pl.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: accessSecret, Namespace: r.tenant, Labels: map[string]string{v1alpha1.LabelControlPlaneKubeconfig: "true"}},
			Data:       map[string][]byte{controllers.KubeconfigKey: kc},
		})
	})
}

func (h *harness) createKro(ctx context.Context, r *kroRef) error {
	k := &v1alpha1.Kro{ObjectMeta: metav1.ObjectMeta{Name: r.name, Namespace: kroNamespace}, Spec: v1alpha1.KroSpec{Version: r.version}}
	start := time.Now()
	if err := h.ob.Create(ctx, k); err != nil {
		return fmt.Errorf("creating Kro %s: %w", r.name, err)
	}
	r.uid, r.created = k.UID, start
	return nil
}

// burst creates the Kros in bursts of at most BurstSize and measures each up to Ready.
func (h *harness) burst(ctx context.Context, refs []*kroRef) (Step, error) {
	size := h.burstSize(len(refs))
	var applied, ready, helmToReady []time.Duration
	var busy time.Duration
	var cpuBurst struct{ provider, perKro, machine float64 }
	before, beforeErr := h.providerState()
	cpuBefore := readCPU()
	for lo := 0; lo < len(refs); lo += size {
		chunk := refs[lo:min(lo+size, len(refs))]
		start := time.Now()
		if err := h.parallel(chunk, func(r *kroRef) error { return h.createKro(ctx, r) }); err != nil {
			return Step{}, err
		}
		var keys []string
		for _, r := range chunk {
			keys = append(keys, "applied-oci|"+r.tenant, "applied-hr|"+r.tenant)
		}
		seen, err := h.tr.wait(ctx, keys, "Flux objects applied")
		if err != nil {
			return Step{}, err
		}
		var lastApplied time.Time
		for _, r := range chunk {
			at := later(seen["applied-oci|"+r.tenant], seen["applied-hr|"+r.tenant])
			applied = append(applied, at.Sub(r.created))
			if at.After(lastApplied) {
				lastApplied = at
			}
		}
		busy += lastApplied.Sub(start)
		if lo == 0 {
			// CPU while the first chunk was applied: the provider's, and the machine's.
			after, err := h.providerState()
			if elapsed := lastApplied.Sub(start).Seconds(); err == nil && beforeErr == nil && elapsed > 0 {
				cpuBurst.provider = round3((after.cpu - before.cpu) / elapsed)
				cpuBurst.perKro = round((after.cpu - before.cpu) * 1000 / float64(len(chunk)))
				cpuBurst.machine = readCPU().busySince(cpuBefore)
			}
		}
		keys = keys[:0]
		for _, r := range chunk {
			keys = append(keys, "ready|"+string(r.uid), "fluxready-oci|"+r.tenant, "fluxready-hr|"+r.tenant)
		}
		if seen, err = h.tr.wait(ctx, keys, "Kros Ready"); err != nil {
			return Step{}, err
		}
		for _, r := range chunk {
			at := seen["ready|"+string(r.uid)]
			ready = append(ready, at.Sub(r.created))
			helmToReady = append(helmToReady, max(0, at.Sub(later(seen["fluxready-oci|"+r.tenant], seen["fluxready-hr|"+r.tenant]))))
		}
	}
	return Step{
		Burst:               size,
		Applied:             Summarize(applied),
		Ready:               Summarize(ready),
		HelmReadyToKroReady: Summarize(helmToReady),
		AppliedPerSecond:    round(float64(len(refs)) / busy.Seconds()),
		ProviderCores:       cpuBurst.provider,
		ProviderCPUMsPerKro: cpuBurst.perKro,
		MachineBusy:         cpuBurst.machine,
	}, nil
}

// burstSize is how many of n Kros one burst creates.
func (h *harness) burstSize(n int) int {
	if h.cfg.BurstSize <= 0 || h.cfg.BurstSize > n {
		return n
	}
	return h.cfg.BurstSize
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

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
			s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: controllers.KroNamespace, Name: imageSecret}}
			start := time.Now()
			if err := h.ded[k.dedicated].Delete(ctx, s); err != nil {
				return Dist{}, fmt.Errorf("repeat %d: deleting %s on dedicated-%d: %w", r, imageSecret, k.dedicated+1, err)
			}
			at, err := h.tr.waitAddedAfter(ctx, fmt.Sprintf("dedicated-%d|%s/%s", k.dedicated+1, controllers.KroNamespace, imageSecret), start)
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

// blocker puts something on a dedicated Kro's ControlPlane that blocks the Kro's
// deletion, and returns what removes it again.
type blocker func(ctx context.Context, c client.Client, k *kroRef, repeat int) (unblock func() error, err error)

// blockedDeletion times, Repeats times for each dedicated Kro, from the removal of what
// blocks its deletion until the Kro is gone: block, delete the Kro, wait until the
// deletion is blocked (the tracker key blockedKey), unblock, wait until it is gone, then
// create the Kro again.
func (h *harness) blockedDeletion(ctx context.Context, ded []*kroRef, blockedKey string, block blocker) (Dist, error) {
	var mu sync.Mutex
	var ds []time.Duration
	err := h.parallel(ded, func(k *kroRef) error {
		c := h.ded[k.dedicated]
		for r := range h.cfg.Repeats {
			unblock, err := block(ctx, c, k, r)
			if err != nil {
				return err
			}
			if err := h.ob.Delete(ctx, k.object()); err != nil {
				return err
			}
			if _, err := h.tr.wait(ctx, []string{blockedKey + "|" + string(k.uid)}, "the deletion to be blocked"); err != nil {
				return err
			}
			start := time.Now()
			if err := unblock(); err != nil {
				return err
			}
			seen, err := h.tr.wait(ctx, []string{"gone|" + string(k.uid)}, "the Kro to be gone")
			if err != nil {
				return err
			}
			mu.Lock()
			ds = append(ds, seen["gone|"+string(k.uid)].Sub(start))
			mu.Unlock()
			if err := h.createKro(ctx, k); err != nil {
				return err
			}
			if _, err := h.tr.wait(ctx, []string{"ready|" + string(k.uid)}, "the Kro to be Ready again"); err != nil {
				return err
			}
		}
		return nil
	})
	return Summarize(ds), err
}

// rgdDeletion: the last RGD deleted releases a blocked deletion (the RGDs are watched).
func (h *harness) rgdDeletion(ctx context.Context, ded []*kroRef) (Dist, error) {
	return h.blockedDeletion(ctx, ded, "blocked", func(ctx context.Context, c client.Client, k *kroRef, r int) (func() error, error) {
		u := rgd(fmt.Sprintf("bench-%d-%d", k.dedicated+1, r))
		if err := c.Create(ctx, u); err != nil {
			return nil, fmt.Errorf("creating RGD: %w", err)
		}
		if _, err := h.tr.wait(ctx, []string{"rgds|" + string(k.uid)}, "the Kro to count the RGD"); err != nil {
			return nil, err
		}
		return func() error { return c.Delete(ctx, u) }, nil
	})
}

// instanceDeletion: the last instance of a kind kro generated, whose RGD is gone (kro
// keeps such CRDs and instances), deleted releases a blocked deletion. Instances are not
// watched: the provider rechecks a deletion they block.
func (h *harness) instanceDeletion(ctx context.Context, ded []*kroRef) (Dist, error) {
	return h.blockedDeletion(ctx, ded, "blocked-by-instances", func(ctx context.Context, c client.Client, k *kroRef, r int) (func() error, error) {
		crd, u := testenv.KroGeneratedCRD(fmt.Sprintf("benchapps%d", k.dedicated+1), fmt.Sprintf("BenchApp%d", k.dedicated+1), fmt.Sprintf("bench-app-%d", k.dedicated+1))
		if err := c.Create(ctx, crd); client.IgnoreAlreadyExists(err) != nil {
			return nil, fmt.Errorf("creating CRD %s: %w", crd.Name, err)
		}
		u.SetName(fmt.Sprintf("bench-%d", r))
		// The new kind is served a moment after its CRD is created.
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			err := c.Create(ctx, u)
			return err == nil, client.IgnoreNotFound(ignoreNoMatch(err))
		}); err != nil {
			return nil, fmt.Errorf("creating %s %s: %w", u.GetKind(), u.GetName(), err)
		}
		return func() error { return c.Delete(ctx, u) }, nil
	})
}

// ignoreNoMatch treats a kind the API server does not serve yet (a CRD just created) as
// a reason to try again.
func ignoreNoMatch(err error) error {
	if meta.IsNoMatchError(err) {
		return nil
	}
	return err
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// cpuTimes are the machine's CPU times from /proc/stat (zero where it cannot be read).
type cpuTimes struct{ busy, total float64 }

func readCPU() cpuTimes {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTimes{}
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return cpuTimes{}
	}
	var t cpuTimes
	for i, v := range f[1:] {
		n, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return cpuTimes{}
		}
		t.total += n
		if i != 3 && i != 4 { // idle and iowait
			t.busy += n
		}
	}
	return t
}

// busySince is the share of all CPUs that was busy since earlier, 0..1.
func (t cpuTimes) busySince(earlier cpuTimes) float64 {
	if t.total <= earlier.total {
		return 0
	}
	return round3((t.busy - earlier.busy) / (t.total - earlier.total))
}

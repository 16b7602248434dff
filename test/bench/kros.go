package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/owned"
	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

// The Kros a run drives: a kroRef per ControlPlane, its credentials granted in the tenant
// namespace, and the Kros created in bursts, each timed until its Flux objects are
// applied and until it is Ready.

func (h *harness) newRef(name, version string, cp *testenv.Cluster, dedicated int) *kroRef {
	k := &v1alpha1.Kro{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: kroNamespace}}
	tenant, _ := owned.TenantNamespace(k)
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
			Data:       map[string][]byte{owned.KubeconfigKey: kc},
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

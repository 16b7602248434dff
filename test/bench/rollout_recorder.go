package bench

// The rollout recorder: watches of the harness's own that record when each HelmRelease
// carries a change's values, when each Kro is Ready with a revision, and every status of
// the ProviderConfig.

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/clusters"
)

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

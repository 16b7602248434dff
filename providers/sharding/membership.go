// Package sharding lets several replicas of the provider share the ControlPlanes. Each
// replica holds a Lease on the platform cluster for as long as it runs, and watches the
// Leases of the others; every replica computes the same owner for each ControlPlane from
// the members it sees (Owner, rendezvous hashing). No replica decides for another, and
// nothing is written per ControlPlane: the only requests are one Lease renewal per
// replica every third of the Lease duration, and one watch.
//
// The guarantees are those of the Leases:
//
//   - A replica that joins claims nothing until it has seen its own Lease come back
//     through its watch, so its view of the members is at least as new as its Lease.
//   - A replica that cannot renew its Lease steps back (owns nothing) before the others
//     can count it gone: it measures from the moment it sent its last successful renewal,
//     and they from the moment they saw it.
//   - A replica drops a member whose Lease ran out only once one of its own renewals,
//     sent after that moment, has come back through its watch. Cut off, it cannot tell a
//     member that is gone from its own watch that stopped: it keeps the member, and its
//     keys stay the member's, until its own Lease runs out and it steps back itself.
//     Connected, this costs one renewal, sent at once.
//   - A replica that stops (its context ends) owns nothing from that moment and deletes
//     its Lease, so that the others take over at once rather than after the Lease expires.
//
// Views differ only while a Lease change travels through the watches, so two replicas may
// both act on a ControlPlane for that long. Everything the provider writes is safe under
// that overlap: server-side apply with one field manager, and the finalizer under
// optimistic locking.
package sharding

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// DefaultLeaseDuration is how long a member's Lease lasts without renewal. It bounds the
// hand-over after a replica dies without stopping (SIGKILL, a lost node); a replica that
// stops cleanly hands over at once.
const DefaultLeaseDuration = 15 * time.Second

// checkEvery is how often a replica looks whether a Lease, its own or another's, ran out.
const checkEvery = 250 * time.Millisecond

// Options configure a Membership.
type Options struct {
	// Namespace holds the members' Leases: the provider's namespace on the platform cluster.
	Namespace string
	// Identity is this replica's name among the members, unique and stable for the
	// replica's life: the pod's name.
	Identity string
	// LeaseName is this replica's Lease; default Identity.
	LeaseName string
	// Labels mark the Leases of this group of replicas; members are the holders of the
	// Leases that carry all of them. Required: they keep two providers apart.
	Labels map[string]string
	// LeaseDuration: a member whose Lease has not changed for this long is gone. The
	// Lease is renewed every third of it. Default DefaultLeaseDuration.
	LeaseDuration time.Duration
	// Log receives membership changes.
	Log logr.Logger
}

// Membership is this replica's view of the members, and the Lease that keeps it one.
// It runs as a manager runnable on every replica, leader election or not.
type Membership struct {
	o      Options
	client client.Client
	cache  cache.Cache

	mu sync.Mutex
	// seen maps each Lease to the local time its holder last renewed it, as observed.
	seen map[string]seenLease
	// written is the resourceVersion of our Lease after our last write; joined turns true
	// once the watch has delivered it.
	written string
	joined  bool
	// renewedAt is when our last successful renewal was sent; it is valid until
	// renewedAt + LeaseDuration, by anyone's count.
	renewedAt time.Time
	// confirmed is when the newest of our renewals that the watch has delivered back was
	// sent. Watch events come in the order of their writes, so by then the watch has
	// delivered every renewal of the others written before it: a member whose Lease ran
	// out before confirmed is gone. One that ran out after it may only look gone because
	// this replica is cut off; it stays a member until a renewal confirms it gone, or until
	// this replica's own Lease runs out and it steps back.
	confirmed time.Time
	// confirm asks for a renewal now, to confirm that a member is gone.
	confirm  chan struct{}
	stopping bool
	members  []string

	// tellMu orders what the subscribers are told: told is the last view they were told.
	tellMu sync.Mutex
	told   []string
	subs   []func(before, after []string)

	wake chan struct{}
}

type seenLease struct {
	holder   string
	version  string
	at       time.Time
	duration time.Duration
}

// New prepares a Membership on the platform cluster; Start runs it.
func New(cfg *rest.Config, o Options) (*Membership, error) {
	if o.Namespace == "" || o.Identity == "" || len(o.Labels) == 0 {
		return nil, fmt.Errorf("sharding needs a namespace, an identity and labels for the Leases")
	}
	if o.LeaseName == "" {
		o.LeaseName = o.Identity
	}
	if o.LeaseDuration <= 0 {
		o.LeaseDuration = DefaultLeaseDuration
	}
	scheme := runtime.NewScheme()
	if err := coordinationv1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("connecting to the platform cluster: %w", err)
	}
	ca, err := cache.New(cfg, cache.Options{
		Scheme:            scheme,
		DefaultNamespaces: map[string]cache.Config{o.Namespace: {}},
		ByObject: map[client.Object]cache.ByObject{
			&coordinationv1.Lease{}: {Label: labels.SelectorFromSet(o.Labels)},
		},
	})
	if err != nil {
		return nil, err
	}
	return &Membership{o: o, client: c, cache: ca, seen: map[string]seenLease{}, wake: make(chan struct{}, 1), confirm: make(chan struct{}, 1)}, nil
}

// Subscribe adds a function told of every change of the members this replica sees, in
// order, one call at a time. An empty list means this replica owns nothing (not joined
// yet, lost its Lease, or stopping). A function subscribed late is first told the
// current view, as a change from none, before Subscribe returns.
func (m *Membership) Subscribe(f func(before, after []string)) {
	m.tellMu.Lock()
	defer m.tellMu.Unlock()
	m.subs = append(m.subs, f)
	if len(m.told) > 0 {
		f(nil, slices.Clone(m.told))
	}
}

// Identity is this replica's name among the members.
func (m *Membership) Identity() string { return m.o.Identity }

// Members returns the members this replica sees, sorted; none while it owns nothing.
func (m *Membership) Members() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.members)
}

// Owns tells whether this replica owns key now.
func (m *Membership) Owns(key string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return Owner(key, m.members) == m.o.Identity
}

// Joined tells whether this replica takes part: it has seen its own Lease and holds it.
// The readiness check reports it.
func (m *Membership) Joined() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.members) > 0
}

// NeedLeaderElection is false: every replica is a member.
func (m *Membership) NeedLeaderElection() bool { return false }

// Start runs the membership until ctx ends, then gives up the Lease.
func (m *Membership) Start(ctx context.Context) error {
	inf, err := m.cache.GetInformer(ctx, &coordinationv1.Lease{})
	if err != nil {
		return err
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { m.observe(o, false) },
		UpdateFunc: func(_, o any) { m.observe(o, false) },
		DeleteFunc: func(o any) { m.observe(o, true) },
	}); err != nil {
		return err
	}
	cacheCtx, stopCache := context.WithCancel(context.WithoutCancel(ctx))
	defer stopCache()
	go func() { _ = m.cache.Start(cacheCtx) }()
	if !m.cache.WaitForCacheSync(ctx) {
		return ctx.Err()
	}
	notified := make(chan struct{})
	go m.notify(cacheCtx, notified)

	renew := m.o.LeaseDuration / 3
	renewTimer := time.NewTimer(0)
	defer renewTimer.Stop()
	tick := time.NewTicker(checkEvery) // Leases expire without an event
	defer tick.Stop()
	var attempted time.Time
	for {
		select {
		case <-ctx.Done():
			m.leave()
			stopCache()
			<-notified
			return nil
		case <-m.confirm:
			// At most one renewal a second, however many members look gone.
			renewTimer.Reset(max(0, time.Second-time.Since(attempted)))
		case <-renewTimer.C:
			attempted = time.Now()
			if err := m.renew(ctx); err != nil && ctx.Err() == nil {
				m.o.Log.Info("renewing the membership Lease failed; retrying", "error", err.Error())
				renewTimer.Reset(time.Second)
			} else {
				renewTimer.Reset(renew)
			}
			m.recompute()
		case <-tick.C:
			m.recompute()
		}
	}
}

// renew creates or renews our Lease.
func (m *Membership) renew(ctx context.Context) error {
	sent := time.Now()
	lease := &coordinationv1.Lease{}
	key := client.ObjectKey{Namespace: m.o.Namespace, Name: m.o.LeaseName}
	err := m.cache.Get(ctx, key, lease)
	switch {
	case apierrors.IsNotFound(err):
		lease = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: m.o.Namespace, Name: m.o.LeaseName, Labels: m.o.Labels}}
		m.fill(lease, sent)
		err = m.client.Create(ctx, lease)
	case err == nil:
		lease = lease.DeepCopy()
		m.fill(lease, sent)
		err = m.client.Update(ctx, lease)
		if apierrors.IsConflict(err) { // the cache is behind: read the Lease itself
			if err = m.client.Get(ctx, key, lease); err == nil {
				m.fill(lease, sent)
				err = m.client.Update(ctx, lease)
			}
		}
	}
	if err != nil {
		return err
	}
	m.mu.Lock()
	m.written, m.renewedAt = lease.ResourceVersion, sent
	if m.seen[m.o.LeaseName].version == m.written { // the watch was quicker than the reply
		m.joined, m.confirmed = true, sent
	}
	m.mu.Unlock()
	return nil
}

func (m *Membership) fill(l *coordinationv1.Lease, now time.Time) {
	for k, v := range m.o.Labels {
		if l.Labels == nil {
			l.Labels = map[string]string{}
		}
		l.Labels[k] = v
	}
	l.Spec.HolderIdentity = ptr.To(m.o.Identity)
	l.Spec.LeaseDurationSeconds = ptr.To(int32(m.o.LeaseDuration / time.Second))
	l.Spec.RenewTime = &metav1.MicroTime{Time: now}
	if l.Spec.AcquireTime == nil {
		l.Spec.AcquireTime = &metav1.MicroTime{Time: now}
	}
}

// observe records a Lease as the watch delivers it. Its time is when this replica saw it
// change, not the renewTime in it, so that clocks that differ between nodes do not matter.
func (m *Membership) observe(o any, deleted bool) {
	if d, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
		o, deleted = d.Obj, true
	}
	l, ok := o.(*coordinationv1.Lease)
	if !ok {
		return
	}
	m.mu.Lock()
	switch {
	case deleted:
		delete(m.seen, l.Name)
	case l.Spec.HolderIdentity != nil && l.Spec.LeaseDurationSeconds != nil:
		if old, ok := m.seen[l.Name]; !ok || old.version != l.ResourceVersion {
			m.seen[l.Name] = seenLease{
				holder:   *l.Spec.HolderIdentity,
				version:  l.ResourceVersion,
				at:       time.Now(),
				duration: time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second,
			}
		}
	}
	if l.Name == m.o.LeaseName && !deleted && l.ResourceVersion == m.written {
		m.joined, m.confirmed = true, m.renewedAt
	}
	m.mu.Unlock()
	m.recompute()
}

// recompute derives the members from the Leases seen and wakes the notifier on a change.
func (m *Membership) recompute() {
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	var members []string
	// It steps back a margin before its Lease runs out, so that it has stepped back by the
	// time any other can notice the Lease expired (each looks every checkEvery).
	margin := min(time.Second, m.o.LeaseDuration/5)
	self := m.joined && !m.stopping && now.Before(m.renewedAt.Add(m.o.LeaseDuration-margin))
	if self {
		members = append(members, m.o.Identity)
		unconfirmed := false
		for _, l := range m.seen {
			if l.holder == m.o.Identity || slices.Contains(members, l.holder) {
				continue
			}
			end := l.at.Add(l.duration)
			if now.Before(end) || !m.confirmed.After(end) {
				members = append(members, l.holder)
				unconfirmed = unconfirmed || !now.Before(end)
			}
		}
		slices.Sort(members)
		if unconfirmed {
			select {
			case m.confirm <- struct{}{}:
			default:
			}
		}
	} else if m.joined && !m.stopping {
		m.joined = false // the Lease lapsed: join again after the next renewal comes back
		m.o.Log.Info("the membership Lease could not be renewed in time; owning nothing until it is")
	}
	if slices.Equal(members, m.members) {
		return
	}
	m.members = members
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// notify tells the subscribers of changes, in order. A change that comes while they run
// is told next, as the difference from what they were last told.
func (m *Membership) notify(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	for {
		select {
		case <-ctx.Done():
			m.tell() // the last change, leaving, is told too
			return
		case <-m.wake:
			m.tell()
		}
	}
}

func (m *Membership) tell() {
	m.tellMu.Lock()
	defer m.tellMu.Unlock()
	m.mu.Lock()
	now := slices.Clone(m.members)
	m.mu.Unlock()
	if slices.Equal(now, m.told) {
		return
	}
	m.o.Log.Info("members changed", "members", now, "before", m.told)
	for _, f := range m.subs {
		f(slices.Clone(m.told), slices.Clone(now))
	}
	m.told = now
}

// leave owns nothing from now on, tells the subscribers, and deletes our Lease so that
// the others take over without waiting for it to expire.
func (m *Membership) leave() {
	m.mu.Lock()
	m.stopping = true
	m.mu.Unlock()
	m.recompute()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: m.o.Namespace, Name: m.o.LeaseName}}
	if err := client.IgnoreNotFound(m.client.Delete(ctx, lease)); err != nil {
		m.o.Log.Info("giving up the membership Lease failed; the others take over when it expires", "error", err.Error())
		return
	}
	m.o.Log.Info("gave up the membership Lease")
}

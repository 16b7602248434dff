package bench

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/providers/sharding"
)

// event makes victim leave (kind SIGKILL, SIGTERM or a partition) and measures the
// hand-over: until the others count it gone, have engaged every ControlPlane, restored
// deleted secret copies of moved Kros, and finished a moved Kro's blocked deletion.
func (s *shardHarness) event(ctx context.Context, kind string, victim *replica) (ShardEvent, error) {
	s.events++
	ev := &ShardEvent{Kind: kind, Replica: victim.id}
	members := s.upMembers()
	survivors := slices.DeleteFunc(slices.Clone(members), func(id string) bool { return id == victim.id })
	s.logf("sharded: %s %s; %v take over", kind, victim.id, survivors)

	// A moved Kro whose deletion an RGD on its ControlPlane blocks.
	ded, rgdObj, err := s.prepareBlocked(ctx, victim.id, members)
	if err != nil {
		return *ev, err
	}
	var moved []*kroRef
	for _, r := range s.refs {
		if sharding.Owner(kroNamespace+"/"+r.name, members) == victim.id {
			ev.Moved++
			if len(moved) < s.sc.Moved {
				moved = append(moved, r)
			}
		}
	}
	ev.Moved++ // the dedicated Kro
	if err := s.waitBalanced(ctx, members, waitTimeout); err != nil {
		return *ev, err
	}
	before := map[string]repState{}
	for _, id := range survivors {
		if before[id], err = s.scrape(s.rep(id)); err != nil {
			return *ev, err
		}
	}
	if kind == partitionAfterRenewal {
		if err := s.waitRenewal(ctx, victim.id); err != nil {
			return *ev, err
		}
	}

	s.phase(kind + " " + victim.id)
	s.tr.startCounting()
	t0 := time.Now()
	exited := s.leave(kind, victim, t0, ev)
	re := s.react(ctx, exited, t0, moved, ded, rgdObj, ev)
	to := &takeover{kind: kind, victim: victim, survivors: survivors, t0: t0}
	if err := s.pollTakeover(ctx, to, re.done, ev); err != nil {
		return *ev, err
	}
	if re.err != nil {
		return *ev, re.err
	}
	since := func(t time.Time) float64 {
		if t.IsZero() {
			return 0
		}
		return round3(t.Sub(t0).Seconds())
	}
	ev.SecondsToFirstDetected, ev.SecondsToDetected, ev.SecondsToReengaged = since(to.firstDetected), since(to.detected), since(to.reengaged)
	ev.SecondsToSteppedBack, ev.SecondsToLeaseDeleted = since(to.steppedBack), since(to.leaseGone)
	ev.ReengagedPerSecond = round(float64(ev.Moved) / max(0.2, to.reengaged.Sub(to.firstDetected).Seconds()))
	changes, _, notReady := s.tr.stopCounting()
	ev.ObjectChanges, ev.KrosNotReady = changes, byReason(notReady)
	ev.CopyRestored = Summarize(re.restored)
	if ev.TakeoverWrites, err = s.writesSince(before, survivors); err != nil {
		return *ev, err
	}
	s.logf("sharded: %s %s: %d moved; detected %.1f s, re-engaged %.1f s (%.0f/s), copies back p99 %s, blocked deletion done %.1f s after the event",
		kind, victim.id, ev.Moved, ev.SecondsToDetected, ev.SecondsToReengaged, ev.ReengagedPerSecond, ms(ev.CopyRestored.P99), ev.BlockedDeletionSeconds)
	return *ev, s.waitBalanced(ctx, survivors, waitTimeout)
}

// prepareBlocked creates a Kro on the dedicated ControlPlane whose owner among members
// is owner, waits until it is Ready, puts an RGD on its ControlPlane and deletes it, and
// waits until the deletion is blocked.
func (s *shardHarness) prepareBlocked(ctx context.Context, owner string, members []string) (*kroRef, client.Object, error) {
	var name string
	for j := 1; ; j++ {
		name = fmt.Sprintf("ded-%d-%d", s.events, j)
		if sharding.Owner(kroNamespace+"/"+name, members) == owner {
			break
		}
	}
	ref := s.newRef(name, versionDedicated, s.dedicated[0], 0)
	if err := s.grantAll(ctx, []*kroRef{ref}); err != nil {
		return nil, nil, err
	}
	s.mu.Lock()
	s.extra = append(s.extra, kroNamespace+"/"+name)
	s.mu.Unlock()
	if err := s.createKro(ctx, ref); err != nil {
		return nil, nil, err
	}
	if _, err := s.tr.wait(ctx, []string{"ready|" + string(ref.uid)}, "the dedicated Kro to be Ready"); err != nil {
		return nil, nil, err
	}
	u := rgd(fmt.Sprintf("sharded-%d", s.events))
	if err := s.ded[0].Create(ctx, u); err != nil {
		return nil, nil, fmt.Errorf("creating RGD: %w", err)
	}
	if _, err := s.tr.wait(ctx, []string{"rgds|" + string(ref.uid)}, "the Kro to count the RGD"); err != nil {
		return nil, nil, err
	}
	if err := s.ob.Delete(ctx, &v1alpha1.Kro{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: kroNamespace}}); err != nil {
		return nil, nil, err
	}
	if _, err := s.tr.wait(ctx, []string{"blocked|" + string(ref.uid)}, "the deletion to be blocked"); err != nil {
		return nil, nil, err
	}
	return ref, u, nil
}

// leave kills, stops or cuts off victim; the channel gets the outcome once the process
// has ended (or at once for a partition).
func (s *shardHarness) leave(kind string, victim *replica, t0 time.Time, ev *ShardEvent) <-chan error {
	exited := make(chan error, 1)
	if isPartition(kind) {
		victim.proxy.Cut()
		exited <- nil
		return exited
	}
	victim.up = false
	go func() {
		var err error
		at := t0 // killed: dead from the signal on
		if kind == "SIGKILL" {
			err = victim.proc.Kill()
		} else {
			err = victim.proc.Stop()
			at = time.Now()
		}
		s.mu.Lock()
		s.downs = append(s.downs, viewChange{at: at, replica: victim.id})
		ev.SecondsToExited = round3(time.Since(t0).Seconds())
		s.mu.Unlock()
		exited <- err
	}()
	return exited
}

// reactions are the moved Kros' measurements; done closes once all are in, and then
// restored and err may be read.
type reactions struct {
	done     chan struct{}
	mu       sync.Mutex
	restored []time.Duration
	err      error
}

func (r *reactions) fail(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err == nil {
		r.err = err
	}
}

// react deletes, once the leaving replica has ended (or is cut off, so that it cannot
// restore them itself), the chart pull secret copies of moved Kros and the RGD that
// blocks ded's deletion, and times from t0 until the copies are back and ded is gone.
func (s *shardHarness) react(ctx context.Context, exited <-chan error, t0 time.Time, moved []*kroRef, ded *kroRef, rgdObj client.Object, ev *ShardEvent) *reactions {
	re := &reactions{done: make(chan struct{})}
	go func() {
		defer close(re.done)
		if err := <-exited; err != nil {
			re.fail(err)
			return
		}
		var wg sync.WaitGroup
		copyName := providerName + "-" + chartSecret
		for _, r := range moved {
			if err := s.pl.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: r.tenant, Name: copyName}}); err != nil {
				re.fail(fmt.Errorf("deleting %s/%s: %w", r.tenant, copyName, err))
				continue
			}
			wg.Go(func() {
				at, err := s.tr.waitAddedAfter(ctx, "platform|"+r.tenant+"/"+copyName, t0)
				if err != nil {
					re.fail(err)
					return
				}
				re.mu.Lock()
				re.restored = append(re.restored, at.Sub(t0))
				re.mu.Unlock()
			})
		}
		if err := s.ded[0].Delete(ctx, rgdObj); err != nil {
			re.fail(fmt.Errorf("deleting the RGD: %w", err))
		} else {
			wg.Go(func() {
				seen, err := s.tr.wait(ctx, []string{"gone|" + string(ded.uid)}, "the blocked Kro to be gone")
				if err != nil {
					re.fail(err)
					return
				}
				s.mu.Lock()
				ev.BlockedDeletionSeconds = round3(seen["gone|"+string(ded.uid)].Sub(t0).Seconds())
				s.extra = slices.DeleteFunc(s.extra, func(k string) bool { return k == kroNamespace+"/"+ded.name })
				s.mu.Unlock()
			})
		}
		wg.Wait()
	}()
	return re
}

// takeover is what polling the replicas found after an event.
type takeover struct {
	kind      string
	victim    *replica
	survivors []string
	t0        time.Time

	firstDetected, detected, reengaged, steppedBack, leaseGone time.Time
}

// snapshot scrapes the polled replicas, and on SIGTERM reads the victim's Lease, all at
// once; each answer is timed when it came (an upper bound of when its state began).
func (s *shardHarness) snapshot(ctx context.Context, to *takeover, polled []string) ([]timedState, time.Time, error) {
	snaps := make([]timedState, len(polled))
	var wg sync.WaitGroup
	for i, id := range polled {
		wg.Go(func() {
			st, err := s.scrape(s.rep(id))
			snaps[i] = timedState{st, err, time.Now()}
		})
	}
	var leaseErr error
	var leaseAt time.Time
	if to.kind == "SIGTERM" && to.leaseGone.IsZero() {
		wg.Go(func() {
			leaseErr = s.leases.Get(ctx, client.ObjectKey{Namespace: podNamespace, Name: "service-provider-" + providerName + "-" + to.victim.id}, &coordinationv1.Lease{})
			leaseAt = time.Now()
		})
	}
	wg.Wait()
	return snaps, leaseAt, leaseErr
}

// pollTakeover polls every 200 ms until the others have taken over and done is closed.
func (s *shardHarness) pollTakeover(ctx context.Context, to *takeover, done <-chan struct{}, ev *ShardEvent) error {
	polled := to.survivors
	if isPartition(to.kind) {
		polled = append(slices.Clone(to.survivors), to.victim.id)
	}
	deadline := to.t0.Add(waitTimeout)
	for {
		live := len(s.liveKros())
		snaps, leaseAt, leaseErr := s.snapshot(ctx, to, polled)
		all, sum, last := to.account(polled, snaps, live, ev)
		if all && to.detected.IsZero() {
			to.detected = last
		}
		if !to.detected.IsZero() && to.reengaged.IsZero() && sum >= live {
			to.reengaged = last
		}
		if apierrors.IsNotFound(leaseErr) {
			to.leaseGone = leaseAt
		}
		select {
		case <-done:
			if !to.reengaged.IsZero() && (!isPartition(to.kind) || !to.steppedBack.IsZero()) {
				return nil
			}
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s %s: the others did not take over in %s: detected %v, engaged %d of %d", to.kind, to.victim.id, waitTimeout, !to.detected.IsZero(), sum, live)
		}
		if err := sleep(ctx, 200*time.Millisecond); err != nil {
			return err
		}
	}
}

// account takes in one snapshot: whether every survivor counts one member less, the
// ControlPlanes they have engaged, and when the last answer came.
func (to *takeover) account(polled []string, snaps []timedState, live int, ev *ShardEvent) (all bool, sum int, last time.Time) {
	all, ownedSum := true, 0
	for i, id := range polled {
		sn := snaps[i]
		switch {
		case sn.err != nil:
			all = false
			continue
		case id == to.victim.id: // cut off, still running
			if sn.st.members == 0 && to.steppedBack.IsZero() {
				to.steppedBack = sn.at
			}
			if n := int(sn.st.members); n > 0 && (ev.CutMembersMin == 0 || n < ev.CutMembersMin) {
				ev.CutMembersMin = n
			}
			ownedSum += int(sn.st.owned)
			continue
		case int(sn.st.members) != len(to.survivors):
			all = false
		case to.firstDetected.IsZero():
			to.firstDetected = sn.at
		}
		last = later(last, sn.at)
		sum += int(sn.st.engaged)
		ownedSum += int(sn.st.owned)
	}
	ev.MaxOwnedOverCount = max(ev.MaxOwnedOverCount, ownedSum-live)
	return all, sum, last
}

// writesSince are the write requests of replicas since before, Lease renewals (their
// PUTs to the platform API server) left out, by method.
func (s *shardHarness) writesSince(before map[string]repState, replicas []string) (map[string]float64, error) {
	out := map[string]float64{}
	for _, id := range replicas {
		st, err := s.scrape(s.rep(id))
		if err != nil {
			return nil, err
		}
		leases := Delta(before[id].platform, st.platform)["PUT"]
		for k, v := range Delta(before[id].requests, st.requests) {
			if k == "PUT" {
				v -= leases
			}
			if slices.Contains(writeVerbs, k) && v > 0 {
				out[k] += v
			}
		}
	}
	return out, nil
}

type timedState struct {
	st  repState
	err error
	at  time.Time
}

package bench

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/openmcp-project/service-provider-kro/providers/sharding"
)

// How the replicas of the sharded run share the Kros: the share sharding.Owner gives each,
// the wait until every replica holds exactly its share, the balance, and a replica
// rejoining until the share is as before.

// liveKros are the Kros that exist now.
func (s *shardHarness) liveKros() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append(slices.Clone(s.names), s.extra...)
}

func expectedShares(keys, members []string) map[string]int {
	out := map[string]int{}
	for _, m := range members {
		out[m] = 0
	}
	for _, k := range keys {
		out[sharding.Owner(k, members)]++
	}
	return out
}

// balancedNow tells whether members share the live Kros as sharding.Owner says: each
// counts all members, owns its share, has engaged exactly its share and an empty queue.
func (s *shardHarness) balancedNow(members []string) (bool, string) {
	want := expectedShares(s.liveKros(), members)
	for _, id := range members {
		st, err := s.scrape(s.rep(id))
		if err != nil {
			return false, fmt.Sprintf("%s: %v", id, err)
		}
		if int(st.members) != len(members) || int(st.owned) != want[id] || int(st.engaged) != want[id] || st.depth != 0 {
			return false, fmt.Sprintf("%s: members %v of %d, owned %v of %d, engaged %v, queue %v", id, st.members, len(members), st.owned, want[id], st.engaged, st.depth)
		}
	}
	return true, ""
}

func (s *shardHarness) waitBalanced(ctx context.Context, members []string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, why := s.balancedNow(members)
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the replicas %v did not settle: %s", members, why)
		}
		if err := sleep(ctx, 200*time.Millisecond); err != nil {
			return err
		}
	}
}

func (s *shardHarness) balance(members []string) (Balance, error) {
	b := Balance{Owned: map[string]int{}, Engaged: map[string]int{}, Expected: expectedShares(s.liveKros(), members)}
	for _, id := range members {
		st, err := s.scrape(s.rep(id))
		if err != nil {
			return b, err
		}
		b.Owned[id], b.Engaged[id] = int(st.owned), int(st.engaged)
		b.OwnedSum += int(st.owned)
	}
	b.Mean = round(float64(b.OwnedSum) / float64(len(members)))
	for _, n := range b.Owned {
		if b.Mean > 0 {
			b.MaxDeviationPct = max(b.MaxDeviationPct, round(100*abs(float64(n)-float64(b.OwnedSum)/float64(len(members)))/(float64(b.OwnedSum)/float64(len(members)))))
		}
	}
	return b, nil
}

func abs(v float64) float64 {
	if v < 0 {
		return -v
	}
	return v
}

// rejoin brings r back with start and measures until it is a member again and the
// replicas share the Kros as before.
func (s *shardHarness) rejoin(ctx context.Context, r *replica, after string, start func() error) (Rejoin, error) {
	rj := Rejoin{After: after, Replica: r.id}
	s.phase("rejoin of " + r.id + " after " + after)
	s.tr.startCounting()
	t0 := time.Now()
	if err := start(); err != nil {
		return rj, err
	}
	all := s.ids()
	rj.Moved = expectedShares(s.liveKros(), all)[r.id]
	var joined time.Time
	deadline := t0.Add(waitTimeout)
	for {
		if joined.IsZero() {
			if st, err := s.scrape(r); err == nil && int(st.members) == len(all) {
				joined = time.Now()
			}
		}
		if !joined.IsZero() {
			ok, _ := s.balancedNow(all)
			now := time.Now()
			if ok {
				rj.SecondsToJoined = round3(joined.Sub(t0).Seconds())
				rj.SecondsToBalanced = round3(now.Sub(t0).Seconds())
				changes, _, notReady := s.tr.stopCounting()
				rj.ObjectChanges, rj.KrosNotReady = changes, byReason(notReady)
				break
			}
		}
		if time.Now().After(deadline) {
			_, why := s.balancedNow(all)
			return rj, fmt.Errorf("%s did not rejoin after %s: %s", r.id, after, why)
		}
		if err := sleep(ctx, 200*time.Millisecond); err != nil {
			return rj, err
		}
	}
	s.logf("sharded: %s back after %s: joined %.1f s, balanced %.1f s (%d Kros its own again)", r.id, after, rj.SecondsToJoined, rj.SecondsToBalanced, rj.Moved)
	return rj, nil
}

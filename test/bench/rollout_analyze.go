package bench

// What a change did, from the recorder's snapshot: whether it is finished, and its
// figures.

import (
	"fmt"
	"slices"
	"time"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
)

// revision is the version's revision after the change: the one the ProviderConfig's
// status names last, once it is not the one before.
func (s rolloutSnapshot) revision() string {
	if l := s.last(); l != nil && l.vs.Revision != s.oldRev {
		return l.vs.Revision
	}
	return ""
}

func (s rolloutSnapshot) last() *pcSeen {
	if len(s.pc) == 0 {
		return nil
	}
	return &s.pc[len(s.pc)-1]
}

// completeAt is when the status first said the rollout of rev was Complete for n Kros.
func (s rolloutSnapshot) completeAt(rev string, n int) (time.Time, bool) {
	for _, p := range s.pc {
		if p.vs.Revision == rev && p.vs.Rollout == v1alpha1.RolloutComplete && int(p.vs.Updated) == n && p.vs.Kros == int32(n) {
			return p.at, true
		}
	}
	return time.Time{}, false
}

// finished tells whether every Kro of refs was seen Ready with the revision, its
// HelmRelease with the new values, and the status Complete; or what is missing.
func (s rolloutSnapshot) finished(refs []*kroRef) (bool, string) {
	rev := s.revision()
	if rev == "" {
		return false, "no status for the change yet"
	}
	changed, ready := 0, 0
	for _, k := range refs {
		if _, ok := s.hrChanged[k.tenant]; ok {
			changed++
		}
		if _, ok := s.kroReady[kroNamespace+"/"+k.name][rev]; ok {
			ready++
		}
	}
	_, complete := s.completeAt(rev, len(refs))
	if changed == len(refs) && ready == len(refs) && complete {
		return true, ""
	}
	l := s.last()
	return false, fmt.Sprintf("%d of %d HelmReleases changed, %d Kros Ready with %s; status: %s, %d updated, %d updating, %d failed: %s",
		changed, len(refs), ready, rev, l.vs.Rollout, l.vs.Updated, len(l.vs.Updating), len(l.vs.Failed), l.vs.Message)
}

// analyze fills in r's figures from what was seen of the change made at start.
func (s rolloutSnapshot) analyze(r *RolloutRun, refs []*kroRef, start time.Time, policy bool) {
	rev := s.revision()
	r.Revision = rev
	var spans []span
	var unavailable, upgrade, toKro []time.Duration
	var first, lastReady time.Time
	for _, k := range refs {
		ch := s.hrChanged[k.tenant]
		ready := s.kroReady[kroNamespace+"/"+k.name][rev]
		spans = append(spans, span{ch.at, ready})
		unavailable = append(unavailable, ready.Sub(ch.at))
		if hr, ok := s.hrReady[k.tenant]; ok {
			upgrade = append(upgrade, hr.Sub(ch.at))
			toKro = append(toKro, ready.Sub(hr))
		}
		if first.IsZero() || ch.at.Before(first) {
			first = ch.at
		}
		lastReady = later(lastReady, ready)
		r.HelmReleaseSpecChanges += s.hrSpecChanges[k.tenant]
		if !policy {
			continue
		}
		// The first status that admitted the Kro to the revision.
		admitted := int64(0)
		for _, p := range s.pc {
			if p.vs.Revision == rev && slices.ContainsFunc(p.vs.Updating, func(m v1alpha1.RolloutMember) bool { return m.Kro == kroNamespace+"/"+k.name }) {
				admitted = p.rv
				break
			}
		}
		if admitted == 0 || ch.rv < admitted {
			r.ChangedBeforeAdmitted++
		}
	}
	for _, p := range s.pc {
		if p.vs.Revision == rev {
			r.MostAdmitted = max(r.MostAdmitted, len(p.vs.Updating))
		}
	}
	r.MostUnavailable = mostAtOnce(spans)
	r.Unavailable = Summarize(unavailable)
	r.Upgrade, r.ReadyToKroReady = Summarize(upgrade), Summarize(toKro)
	r.SecondsToFirstChange = round3(first.Sub(start).Seconds())
	r.SecondsToAllUpdated = round3(lastReady.Sub(start).Seconds())
	if at, ok := s.completeAt(rev, len(refs)); ok {
		r.SecondsToComplete = round3(at.Sub(start).Seconds())
	}
	r.StatusWrites = s.statusWrites
}

// span is a period from start to end.
type span struct{ start, end time.Time }

// mostAtOnce is the most spans that overlap at one moment; a span that ends when another
// starts does not overlap it.
func mostAtOnce(spans []span) int {
	type edge struct {
		at    time.Time
		delta int
	}
	var edges []edge
	for _, s := range spans {
		edges = append(edges, edge{s.start, 1}, edge{s.end, -1})
	}
	slices.SortFunc(edges, func(a, b edge) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.delta - b.delta // ends first
	})
	most, now := 0, 0
	for _, e := range edges {
		now += e.delta
		most = max(most, now)
	}
	return most
}

package bench

// What a change did, from the recorder's snapshot: whether it is finished, and its
// figures.

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
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

// completeAt is when the status first said the rollout of rev was Complete for n Kros,
// updated of them running it healthily (the others got it while unavailable).
func (s rolloutSnapshot) completeAt(rev string, n, updated int) (pcSeen, bool) {
	for _, p := range s.pc {
		if p.vs.Revision == rev && p.vs.Rollout == v1alpha1.RolloutComplete && int(p.vs.Updated) == updated && p.vs.Kros == int32(n) {
			return p, true
		}
	}
	return pcSeen{}, false
}

// finished tells whether every Kro of refs was seen Ready with the revision (those of
// pre, unavailable before the change, only with its HelmRelease changed), its HelmRelease
// with the new values, and the status Complete; or what is missing.
func (s rolloutSnapshot) finished(refs []*kroRef, pre map[string]bool) (bool, string) {
	rev := s.revision()
	if rev == "" {
		return false, "no status for the change yet"
	}
	changed, ready := 0, 0
	for _, k := range refs {
		if _, ok := s.hrChanged[k.tenant]; ok {
			changed++
		}
		if _, ok := s.kroReady[kroNamespace+"/"+k.name][rev]; ok || pre[k.name] {
			ready++
		}
	}
	_, complete := s.completeAt(rev, len(refs), len(refs)-len(pre))
	if changed == len(refs) && ready == len(refs) && complete {
		return true, ""
	}
	l := s.last()
	return false, fmt.Sprintf("%d of %d HelmReleases changed, %d Kros Ready with %s (%d unavailable before counted in); status: %s, %d updated, %d updating, %d failed: %s",
		changed, len(refs), ready, rev, len(pre), l.vs.Rollout, l.vs.Updated, len(l.vs.Updating), len(l.vs.Failed), l.vs.Message)
}

// analyze fills in r's figures from what was seen of the change made at start. The Kros
// of pre (by name) were unavailable before the change and stay so: each counts as
// unavailable throughout, and none is waited for to become Ready.
func (s rolloutSnapshot) analyze(r *RolloutRun, refs []*kroRef, pre map[string]bool, start time.Time, policy bool) {
	rev := s.revision()
	r.Revision = rev
	var spans []span
	var unavailable, upgrade, toKro []time.Duration
	var first, lastReady time.Time
	for _, k := range refs {
		ch := s.hrChanged[k.tenant]
		if first.IsZero() || ch.at.Before(first) {
			first = ch.at
		}
		r.HelmReleaseSpecChanges += s.hrSpecChanges[k.tenant]
		if pre[k.name] {
			spans = append(spans, span{start, start.Add(24 * time.Hour)})
		} else {
			ready := s.kroReady[kroNamespace+"/"+k.name][rev]
			spans = append(spans, span{ch.at, ready})
			unavailable = append(unavailable, ready.Sub(ch.at))
			if hr, ok := s.hrReady[k.tenant]; ok {
				upgrade = append(upgrade, hr.Sub(ch.at))
				toKro = append(toKro, ready.Sub(hr))
			}
			lastReady = later(lastReady, ready)
		}
		if policy && !s.admittedBefore(kroNamespace+"/"+k.name, rev, ch.rv) {
			r.ChangedBeforeAdmitted++
		}
	}
	failed := map[string]bool{}
	for _, p := range s.pc {
		if p.vs.Revision != rev {
			continue
		}
		r.MostAdmitted = max(r.MostAdmitted, len(p.vs.Updating))
		for _, m := range p.vs.Failed {
			failed[m.Kro] = true
		}
	}
	r.FailedKros = len(failed)
	for _, k := range refs {
		if pre[k.name] && failed[kroNamespace+"/"+k.name] {
			r.FailedUnavailableBefore++
		}
	}
	r.MostUnavailable = mostAtOnce(spans)
	r.Unavailable = Summarize(unavailable)
	r.Upgrade, r.ReadyToKroReady = Summarize(upgrade), Summarize(toKro)
	r.SecondsToFirstChange = round3(first.Sub(start).Seconds())
	r.SecondsToAllUpdated = round3(lastReady.Sub(start).Seconds())
	if p, ok := s.completeAt(rev, len(refs), len(refs)-len(pre)); ok {
		r.SecondsToComplete = round3(p.at.Sub(start).Seconds())
		if len(pre) > 0 {
			r.UnavailableBefore = len(pre)
			r.CompleteMessage = p.vs.Message
			r.MessageNamesUnavailable = namesUnavailable(p.vs.Message, pre)
		}
	}
	r.StatusWrites = s.statusWrites
}

// admittedBefore: a status admitted the Kro to rev (listed it among updating) at a
// resourceVersion below rv, that of its HelmRelease's change.
func (s rolloutSnapshot) admittedBefore(kro, rev string, rv int64) bool {
	for _, p := range s.pc {
		if p.vs.Revision == rev && slices.ContainsFunc(p.vs.Updating, func(m v1alpha1.RolloutMember) bool { return m.Kro == kro }) {
			return rv >= p.rv
		}
	}
	return false
}

// handedUnavailableText introduces, in the provider's message of a version, the Kros that
// got the revision while unavailable (controllers/rollout.go, progress).
const handedUnavailableText = " Kros got the revision while unavailable, which counts as no failure: "

// namesUnavailable: the message says that exactly the Kros of pre (by name) got the
// revision while unavailable, naming only Kros of pre and counting the rest.
func namesUnavailable(msg string, pre map[string]bool) bool {
	head, list, ok := strings.Cut(msg, handedUnavailableText)
	if !ok || !strings.HasSuffix(head, "; "+strconv.Itoa(len(pre))) {
		return false
	}
	list, _, _ = strings.Cut(list, ";")
	named, more := list, 0
	if i := strings.LastIndex(list, " and "); i >= 0 {
		if _, err := fmt.Sscanf(list[i:], " and %d more", &more); err != nil {
			return false
		}
		named = list[:i]
	}
	names := strings.Split(named, ", ")
	for _, n := range names {
		if !pre[strings.TrimPrefix(n, kroNamespace+"/")] {
			return false
		}
	}
	return len(names)+more == len(pre)
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

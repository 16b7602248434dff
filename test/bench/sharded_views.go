package bench

import (
	"bufio"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/openmcp-project/service-provider-kro/providers/sharding"
)

// logViews reads the members each replica saw over time from its "members changed" log
// lines (the sharding logger's, --zap-time-encoding=rfc3339nano).
func logViews(path, replica string) ([]viewChange, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	var out []viewChange
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if !strings.Contains(string(line), `"members changed"`) {
			continue
		}
		var l struct {
			TS      string   `json:"ts"`
			Logger  string   `json:"logger"`
			Msg     string   `json:"msg"`
			Members []string `json:"members"`
		}
		if err := json.Unmarshal(line, &l); err != nil || l.Logger != "sharding" || l.Msg != "members changed" {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, l.TS)
		if err != nil {
			return nil, fmt.Errorf("%s: time %q: %w", path, l.TS, err)
		}
		out = append(out, viewChange{at: at, replica: replica, members: l.Members})
	}
	return out, sc.Err()
}

// window is a period in which some Kros were owned by two replicas.
type window struct {
	start, end time.Time
	kros       map[string]bool
	most       int
	owners     map[string]bool
}

// ownershipWindows sweeps the replicas' views in time order and returns the periods in
// which some key had more than one owner, each replica owning what sharding.Owner gives
// it over the members it sees.
func ownershipWindows(changes []viewChange, keys []string) []window {
	slices.SortStableFunc(changes, func(a, b viewChange) int { return a.at.Compare(b.at) })
	views := map[string][]string{}
	var out []window
	var cur *window
	for i, c := range changes {
		views[c.replica] = c.members
		if i+1 < len(changes) && !changes[i+1].at.After(c.at) {
			continue // the next change is at the same instant
		}
		end := time.Time{}
		if i+1 < len(changes) {
			end = changes[i+1].at
		}
		doubled, owners := map[string]bool{}, map[string]bool{}
		for _, k := range keys {
			var by []string
			for id, m := range views {
				if sharding.Owner(k, m) == id {
					by = append(by, id)
				}
			}
			if len(by) > 1 {
				doubled[k] = true
				for _, id := range by {
					owners[id] = true
				}
			}
		}
		switch {
		case len(doubled) > 0 && cur == nil:
			cur = &window{start: c.at, kros: doubled, most: len(doubled), owners: owners}
		case len(doubled) > 0:
			for k := range doubled {
				cur.kros[k] = true
			}
			for id := range owners {
				cur.owners[id] = true
			}
			cur.most = max(cur.most, len(doubled))
		case cur != nil:
			cur.end = c.at
			out = append(out, *cur)
			cur = nil
		}
		if end.IsZero() && cur != nil { // the last view holds to the end: no end known
			cur.end = c.at
			out = append(out, *cur)
		}
	}
	return out
}

// ownedBetween tells whether replica owned key by its own view at some time in [from, to].
func ownedBetween(changes []viewChange, replica, key string, from, to time.Time) bool {
	var view []string
	for _, c := range changes { // sorted by time
		if c.replica != replica {
			continue
		}
		if c.at.After(to) {
			break
		}
		if !c.at.After(from) {
			view = c.members
			continue
		}
		if sharding.Owner(key, view) == replica {
			return true
		}
		view = c.members
	}
	return sharding.Owner(key, view) == replica
}

// doubleOwnership derives the double ownership from the replicas' logs and the writes
// the harness attributed to them.
func (s *shardHarness) doubleOwnership() (DoubleOwnership, error) {
	var changes []viewChange
	for _, r := range s.reps {
		v, err := logViews(filepath.Join(s.cfg.WorkDir, "provider-"+r.id+".log"), r.id)
		if err != nil {
			return DoubleOwnership{}, err
		}
		changes = append(changes, v...)
	}
	s.mu.Lock()
	changes = append(changes, s.downs...)
	writes := slices.Clone(s.writes)
	phases := slices.Clone(s.phases)
	s.mu.Unlock()
	keys := slices.Clone(s.names)
	for _, r := range s.kros {
		if k := kroNamespace + "/" + r.name; !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	slices.SortStableFunc(changes, func(a, b viewChange) int { return a.at.Compare(b.at) })
	// Before the Kros were created no key existed to be owned twice.
	var from time.Time
	for _, p := range phases {
		if p.what == phaseKrosCreated {
			from = p.at
		}
	}
	var ws []window
	for _, w := range ownershipWindows(slices.Clone(changes), keys) {
		if w.end.Before(from) {
			continue
		}
		if w.start.Before(from) {
			w.start = from
		}
		ws = append(ws, w)
	}
	d := DoubleOwnership{Windows: len(ws), KroWrites: map[string]int{}}
	for _, w := range ws {
		length := float64(w.end.Sub(w.start)) / float64(time.Millisecond)
		d.TotalMs += length
		if length >= d.LongestMs {
			d.LongestMs, d.LongestKros = round(length), w.most
			d.LongestWhen = when(phases, w.start)
		}
		if len(d.List) < 20 {
			d.List = append(d.List, OwnershipWindow{When: when(phases, w.start), Ms: round(length), Kros: len(w.kros), Replicas: slices.Sorted(maps.Keys(w.owners))})
		}
	}
	d.TotalMs = round(d.TotalMs)
	for _, w := range writes {
		d.KroWrites[w.replica]++
		for _, win := range ws {
			if win.kros[w.kro] && !w.at.Before(win.start) && !w.at.After(win.end.Add(time.Second)) {
				d.DuplicatedWrites++
				break
			}
		}
		if !ownedBetween(changes, w.replica, w.kro, w.at.Add(-time.Second), w.at) {
			d.NonOwnerWrites++
			if len(d.NonOwnerWriteExamples) < 5 {
				d.NonOwnerWriteExamples = append(d.NonOwnerWriteExamples,
					fmt.Sprintf("%s wrote %s at %s (%s)", w.replica, w.kro, w.at.Format("15:04:05.000"), when(phases, w.at)))
			}
		}
	}
	return d, nil
}

const phaseKrosCreated = "Kros created"

// when names the phase of the run at t: "SIGKILL replica-1 +12.3 s".
func when(phases []phase, t time.Time) string {
	out := ""
	for _, p := range phases {
		if p.at.After(t) {
			break
		}
		out = fmt.Sprintf("%s +%.1f s", p.what, t.Sub(p.at).Seconds())
	}
	return out
}

package bench

import (
	"fmt"
	"testing"
	"time"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
)

func TestMostAtOnce(t *testing.T) {
	at := func(ms int) time.Time { return time.Unix(1000, 0).Add(time.Duration(ms) * time.Millisecond) }
	for _, c := range []struct {
		name  string
		spans []span
		want  int
	}{
		{"none", nil, 0},
		{"one", []span{{at(0), at(10)}}, 1},
		{"all at once", []span{{at(0), at(10)}, {at(1), at(11)}, {at(2), at(12)}}, 3},
		{"one after the other", []span{{at(0), at(10)}, {at(10), at(20)}, {at(20), at(30)}}, 1},
		{"two at a time", []span{{at(0), at(10)}, {at(5), at(15)}, {at(10), at(20)}, {at(15), at(25)}}, 2},
	} {
		if got := mostAtOnce(c.spans); got != c.want {
			t.Errorf("%s: mostAtOnce = %d, want %d", c.name, got, c.want)
		}
	}
}

// TestRolloutAnalyze: three Kros admitted two at a time; the third's HelmRelease changes
// only after the status admitted it.
func TestRolloutAnalyze(t *testing.T) {
	start := time.Unix(1000, 0)
	at := func(ms int) time.Time { return start.Add(time.Duration(ms) * time.Millisecond) }
	refs := []*kroRef{{name: "cp-1", tenant: "t1"}, {name: "cp-2", tenant: "t2"}, {name: "cp-3", tenant: "t3"}}
	member := func(name string) v1alpha1.RolloutMember {
		return v1alpha1.RolloutMember{Kro: kroNamespace + "/" + name}
	}
	vs := func(rollout v1alpha1.RolloutPhase, updated int32, updating ...string) v1alpha1.VersionStatus {
		v := v1alpha1.VersionStatus{Version: versionShared, Kros: 3, Revision: "new", Updated: updated, Rollout: rollout}
		for _, u := range updating {
			v.Updating = append(v.Updating, member(u))
		}
		return v
	}
	s := rolloutSnapshot{
		version: versionShared, oldRev: "old",
		hrChanged:     map[string]seenAt{"t1": {at(100), 11}, "t2": {at(110), 12}, "t3": {at(2200), 21}},
		hrReady:       map[string]time.Time{"t1": at(2000), "t2": at(2200), "t3": at(4200)},
		hrSpecChanges: map[string]int{"t1": 1, "t2": 1, "t3": 1},
		kroReady: map[string]map[string]time.Time{
			"bench/cp-1": {"new": at(2100)}, "bench/cp-2": {"new": at(2300)}, "bench/cp-3": {"old": at(50), "new": at(4300)},
		},
		pc: []pcSeen{
			{at(50), 10, vs(v1alpha1.RolloutProgressing, 0, "cp-1", "cp-2")},
			{at(2150), 20, vs(v1alpha1.RolloutProgressing, 1, "cp-2", "cp-3")},
			{at(2350), 22, vs(v1alpha1.RolloutProgressing, 2, "cp-3")},
			{at(4400), 30, vs(v1alpha1.RolloutComplete, 3)},
		},
		statusWrites: 4,
	}
	if done, why := s.finished(refs, nil); !done {
		t.Fatalf("not finished: %s", why)
	}
	r := RolloutRun{Kros: 3, Limit: 2}
	s.analyze(&r, refs, nil, start, true)
	if r.MostUnavailable != 2 || r.MostAdmitted != 2 || r.ChangedBeforeAdmitted != 0 {
		t.Errorf("most unavailable %d, admitted %d, changed before admitted %d; want 2, 2, 0", r.MostUnavailable, r.MostAdmitted, r.ChangedBeforeAdmitted)
	}
	if r.Upgrade.Count != 3 || r.Upgrade.Max != 2090 || r.ReadyToKroReady.Max != 100 {
		t.Errorf("upgrade %+v, HelmRelease Ready → Kro Ready %+v; want 3 with max 2090 ms and 100 ms", r.Upgrade, r.ReadyToKroReady)
	}
	if r.SecondsToFirstChange != 0.1 || r.SecondsToAllUpdated != 4.3 || r.SecondsToComplete != 4.4 || r.HelmReleaseSpecChanges != 3 || r.StatusWrites != 4 {
		t.Errorf("figures %+v", r)
	}
	// cp-3's HelmRelease changing before the status admitted it is counted.
	s.hrChanged["t3"] = seenAt{at(2050), 19}
	r = RolloutRun{Kros: 3, Limit: 2}
	s.analyze(&r, refs, nil, start, true)
	if r.ChangedBeforeAdmitted != 1 || r.MostUnavailable != 3 {
		t.Errorf("changed before admitted %d, most unavailable %d; want 1, 3", r.ChangedBeforeAdmitted, r.MostUnavailable)
	}
	res := &RolloutResults{Kros: 3, SharedAPIServers: 1, HelmUpgradeSeconds: 2, Runs: []RolloutRun{r}}
	res.Targets = EvaluateRollout(res)
	if len(res.Targets) != 1 || res.Targets[0].Met {
		t.Errorf("targets %+v, want one missed", res.Targets)
	}
	rr := sample()
	rr.Rollout = res
	md := Markdown(rr, "l.svg", "m.svg")
	for _, want := range []string{"## Rollout of a ProviderConfig change", "| 3 | **no** | 2 | 1 |", "-modes rollout -rollout-kros 3"} {
		expectIn(t, "markdown with a rollout", md, want)
	}
}

// TestRolloutAnalyzeUnavailable: three Kros under maxUnavailable 2, cp-3 unavailable
// before the change: it counts as unavailable throughout, so the others go one at a
// time, and it is given the revision last without becoming Ready.
func TestRolloutAnalyzeUnavailable(t *testing.T) {
	start := time.Unix(1000, 0)
	at := func(ms int) time.Time { return start.Add(time.Duration(ms) * time.Millisecond) }
	refs := []*kroRef{{name: "cp-1", tenant: "t1"}, {name: "cp-2", tenant: "t2"}, {name: "cp-3", tenant: "t3"}}
	pre := map[string]bool{"cp-3": true}
	vs := func(rollout v1alpha1.RolloutPhase, updated int32, msg string, updating ...v1alpha1.RolloutMember) v1alpha1.VersionStatus {
		return v1alpha1.VersionStatus{Version: versionShared, Kros: 3, Revision: "new", Updated: updated, Rollout: rollout, Updating: updating, Message: msg}
	}
	m := func(name string, unavailable bool) v1alpha1.RolloutMember {
		return v1alpha1.RolloutMember{Kro: kroNamespace + "/" + name, Unavailable: unavailable}
	}
	complete := "2 of 3 Kros run revision new; 1" + handedUnavailableText + "bench/cp-3"
	s := rolloutSnapshot{
		version: versionShared, oldRev: "old",
		hrChanged:     map[string]seenAt{"t1": {at(100), 11}, "t2": {at(2200), 21}, "t3": {at(4400), 31}},
		hrReady:       map[string]time.Time{"t1": at(2000), "t2": at(4200)},
		hrSpecChanges: map[string]int{"t1": 1, "t2": 1, "t3": 1},
		kroReady:      map[string]map[string]time.Time{"bench/cp-1": {"new": at(2100)}, "bench/cp-2": {"new": at(4300)}},
		pc: []pcSeen{
			{at(50), 10, vs(v1alpha1.RolloutProgressing, 0, "", m("cp-1", false))},
			{at(2150), 20, vs(v1alpha1.RolloutProgressing, 1, "", m("cp-2", false))},
			{at(4350), 30, vs(v1alpha1.RolloutProgressing, 2, "", m("cp-3", true))},
			{at(4500), 40, vs(v1alpha1.RolloutComplete, 2, complete)},
		},
		statusWrites: 4,
	}
	if done, why := s.finished(refs, pre); !done {
		t.Fatalf("not finished: %s", why)
	}
	r := RolloutRun{Kros: 3, Limit: 2}
	s.analyze(&r, refs, pre, start, true)
	if r.MostUnavailable != 2 || r.ChangedBeforeAdmitted != 0 || r.FailedKros != 0 || r.UnavailableBefore != 1 || !r.MessageNamesUnavailable {
		t.Errorf("figures %+v", r)
	}
	if r.SecondsToAllUpdated != 4.3 || r.SecondsToComplete != 4.5 || r.Unavailable.Count != 2 {
		t.Errorf("times %+v", r)
	}
	// cp-3 listed among the failed once counts, and a Kro that is not cp-3 named is no match.
	s.pc[2].vs.Failed = []v1alpha1.RolloutMember{m("cp-3", false)}
	s.pc[3].vs.Message = "2 of 3 Kros run revision new; 1" + handedUnavailableText + "bench/cp-2"
	r = RolloutRun{Kros: 3, Limit: 2}
	s.analyze(&r, refs, pre, start, true)
	if r.FailedKros != 1 || r.FailedUnavailableBefore != 1 || r.MessageNamesUnavailable || unavailableMet(r) {
		t.Errorf("failed %d, of those unavailable %d, named %v; want 1, 1, false", r.FailedKros, r.FailedUnavailableBefore, r.MessageNamesUnavailable)
	}
}

func TestNamesUnavailable(t *testing.T) {
	pre := map[string]bool{}
	for _, n := range []string{"un-0011", "un-0031", "un-0051", "un-0071", "un-0091", "un-0111", "un-0131"} {
		pre[n] = true
	}
	for _, c := range []struct {
		msg  string
		want bool
	}{
		{"993 of 1000 Kros run revision r; 7" + handedUnavailableText + "bench/un-0011, bench/un-0031, bench/un-0051, bench/un-0071, bench/un-0091 and 2 more", true},
		{"993 of 1000 Kros run revision r; 7" + handedUnavailableText + "bench/un-0011, bench/un-0031, bench/un-0051, bench/un-0071, bench/un-0091 and 1 more", false},
		{"993 of 1000 Kros run revision r; 6" + handedUnavailableText + "bench/un-0011, bench/un-0031, bench/un-0051, bench/un-0071, bench/un-0091 and 2 more", false},
		{"993 of 1000 Kros run revision r; 7" + handedUnavailableText + "bench/un-0011, bench/un-0002, bench/un-0051, bench/un-0071, bench/un-0091 and 2 more", false},
		{"993 of 1000 Kros run revision r", false},
	} {
		if got := namesUnavailable(c.msg, pre); got != c.want {
			t.Errorf("namesUnavailable(%q) = %v, want %v", c.msg, got, c.want)
		}
	}
	refs := make([]*kroRef, 1000)
	for i := range refs {
		refs[i] = &kroRef{name: fmt.Sprintf("un-%04d", i+1)}
	}
	set := unavailableSet(refs, 0.05)
	if len(set) != 50 || !set["un-0011"] || !set["un-0991"] || set["un-0010"] {
		t.Errorf("unavailableSet: %d Kros, want 50 from un-0011 to un-0991", len(set))
	}
	if v, err := ParseShare("5%"); err != nil || v != 0.05 {
		t.Errorf("ParseShare(5%%) = %v, %v", v, err)
	}
}

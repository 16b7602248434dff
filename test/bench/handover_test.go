package bench

import (
	"slices"
	"strings"
	"testing"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

// release is a HelmRelease of the Helm release kro in kro-system unless changed.
func release(namespace, name string, suspend bool, change ...func(*helmv2.HelmRelease)) helmv2.HelmRelease {
	hr := helmv2.HelmRelease{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec:       helmv2.HelmReleaseSpec{ReleaseName: "kro", TargetNamespace: "kro-system", StorageNamespace: "kro-system", Suspend: suspend},
	}
	for _, c := range change {
		c(&hr)
	}
	return hr
}

func TestTallyReleases(t *testing.T) {
	for _, c := range []struct {
		name       string
		hrs        []helmv2.HelmRelease
		violations []string
		overlaps   int
	}{
		{"none", nil, nil, 0},
		{"the earlier alone", []helmv2.HelmRelease{release("t1", "kro-helm-release", false)}, nil, 0},
		{"the provider's beside the suspended earlier", []helmv2.HelmRelease{
			release("t1", "kro-helm-release", true), release("t1", "kro", false),
		}, nil, 1},
		{"both suspended", []helmv2.HelmRelease{
			release("t1", "kro-helm-release", true), release("t1", "kro", true),
		}, nil, 1},
		{"both driving the release", []helmv2.HelmRelease{
			release("t1", "kro", false), release("t1", "kro-helm-release", false),
		}, []string{"t1 (storage kro-system): kro, kro-helm-release"}, 0},
		{"one per tenant namespace", []helmv2.HelmRelease{
			release("t1", "kro", false), release("t2", "kro-helm-release", false),
		}, nil, 0},
		{"another release", []helmv2.HelmRelease{
			release("t1", "kro", false), release("t1", "other", false, func(hr *helmv2.HelmRelease) { hr.Spec.ReleaseName = "someone-elses" }),
		}, nil, 0},
		{"the default release name is not kro", []helmv2.HelmRelease{
			release("t1", "kro", false), release("t1", "kro-helm-release", false, func(hr *helmv2.HelmRelease) { hr.Spec.ReleaseName = "" }),
		}, nil, 0},
		{"another storage namespace", []helmv2.HelmRelease{
			release("t1", "kro", false), release("t1", "kro-helm-release", false, func(hr *helmv2.HelmRelease) { hr.Spec.StorageNamespace = "elsewhere" }),
		}, nil, 0},
		{"two namespaces in violation, one overlapping", []helmv2.HelmRelease{
			release("t2", "kro", false), release("t2", "kro-helm-release", false),
			release("t1", "kro", false), release("t1", "kro-helm-release", false),
			release("t3", "kro", false), release("t3", "kro-helm-release", true),
		}, []string{"t1 (storage kro-system): kro, kro-helm-release", "t2 (storage kro-system): kro, kro-helm-release"}, 1},
	} {
		got := tallyReleases(c.hrs)
		if !slices.Equal(got.violations, c.violations) || got.overlaps != c.overlaps {
			t.Errorf("%s: violations %q, overlaps %d; want %q, %d", c.name, got.violations, got.overlaps, c.violations, c.overlaps)
		}
	}
}

func TestEarlierKeysAndLeft(t *testing.T) {
	e := testenv.EarlierInstallation{KroName: "cp-0001", TenantNamespace: "t1"}
	keys := earlierKeys(e, true)
	want := []string{
		"HelmRelease t1/kro-helm-release", "OCIRepository t1/kro-oci-repository",
		"Secret t1/" + e.AccessSecretName(), "AccessRequest t1/" + e.AccessRequestName(),
	}
	if !slices.Equal(keys, want) {
		t.Fatalf("earlierKeys = %q, want %q", keys, want)
	}
	if got := earlierKeys(e, false); len(got) != 3 {
		t.Errorf("without access: %q", got)
	}
	present := map[string]bool{"HelmRelease t1/kro": true, "OCIRepository t1/kro-oci-repository": true}
	if got := left(keys, present); !slices.Equal(got, []string{"OCIRepository t1/kro-oci-repository"}) {
		t.Errorf("left = %q", got)
	}
	if got := left(keys, map[string]bool{}); got != nil {
		t.Errorf("left of nothing = %q", got)
	}
}

// TestLookerRecord: a Kro goes through the hand-over over three looks; the times are the
// looks' and the violation of the second look is counted once.
func TestLookerRecord(t *testing.T) {
	start := time.Unix(1000, 0)
	at := func(ms int) time.Time { return start.Add(time.Duration(ms) * time.Millisecond) }
	e := testenv.EarlierInstallation{KroName: "cp-0001", TenantNamespace: "t1"}
	k := &handoverKro{ref: &kroRef{name: "cp-0001", tenant: "t1"}, earlier: e, keys: earlierKeys(e, false)}
	l := newLooker(nil, []*handoverKro{k}, false, start)
	all := map[string]bool{}
	for _, key := range k.keys {
		all[key] = true
	}
	stages := func() [3]time.Time { return [3]time.Time{k.suspended, k.ownApplied, k.done} }
	l.record(lookView{present: all, releases: []helmv2.HelmRelease{release("t1", "kro-helm-release", false)}}, at(0), time.Millisecond)
	if stages() != [3]time.Time{} || l.pending() != 1 {
		t.Fatalf("after the first look: %+v", k)
	}
	withOwn := map[string]bool{"HelmRelease t1/kro": true}
	for key := range all {
		withOwn[key] = true
	}
	l.record(lookView{present: withOwn, ready: map[string]bool{"cp-0001": true}, releases: []helmv2.HelmRelease{
		release("t1", "kro-helm-release", false), release("t1", "kro", false),
	}}, at(200), 2*time.Millisecond)
	l.record(lookView{present: withOwn, ready: map[string]bool{"cp-0001": true}, releases: []helmv2.HelmRelease{
		release("t1", "kro-helm-release", true), release("t1", "kro", false),
	}}, at(400), 3*time.Millisecond)
	if stages() != [3]time.Time{at(400), at(200), {}} {
		t.Fatalf("after the third look: %+v", k)
	}
	l.record(lookView{present: map[string]bool{"HelmRelease t1/kro": true}, ready: map[string]bool{"cp-0001": true},
		releases: []helmv2.HelmRelease{release("t1", "kro", false)}}, at(600), 4*time.Millisecond)
	if k.done != at(600) || l.pending() != 0 {
		t.Fatalf("after the fourth look: %+v", k)
	}
	run := HandoverRun{Kros: 1}
	l.summarize(&run)
	type summary struct {
		looks, violations, overlaps, examples int
		first, all, done, suspended, own      float64
	}
	got := summary{run.Looks, run.Violations, run.Overlaps, len(run.ViolationExamples),
		run.SecondsToFirst, run.SecondsToAll, run.HandedOver.Median, run.Suspended.Median, run.OwnApplied.Median}
	if want := (summary{4, 1, 1, 1, 0.6, 0.6, 600, 400, 200}); got != want {
		t.Errorf("summary: %+v, want %+v", got, want)
	}
}

func TestParseCounts(t *testing.T) {
	for in, want := range map[string][]int{"1,100": {1, 100}, "0": nil, " 2 ": {2}, "0,5": {5}} {
		got, err := ParseCounts(in)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("ParseCounts(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "-1", "a", "1,,2"} {
		if _, err := ParseCounts(in); err == nil {
			t.Errorf("ParseCounts(%q): no error", in)
		}
	}
}

// TestHandoverMarkdown: the section renders every run, spells out a violation, and its
// target is missed by it.
func TestHandoverMarkdown(t *testing.T) {
	r := &HandoverResults{SharedAPIServers: 2, AccessRequests: true, LookIntervalMs: 200, Machine: Machine{CPUs: 2}, Runs: []HandoverRun{
		{Kros: 1, Looks: 9, SecondsToAll: 1.2, HandedOver: Dist{Count: 1, Median: 1200, P99: 1200, Max: 1200}},
		{Kros: 100, Looks: 40, Violations: 1, ViolationExamples: []string{"look 7 at 1.40 s: t9 (storage kro-system): kro, kro-helm-release"},
			SecondsToAll: 8.5, HandedOver: Dist{Count: 100, Median: 5000, P99: 8400, Max: 8500}},
	}}
	r.Targets = EvaluateHandover(r)
	if len(r.Targets) != 2 || !r.Targets[0].Met || r.Targets[1].Met {
		t.Fatalf("targets: %+v", r.Targets)
	}
	md := Markdown(&Results{Mode: "provider", Handover: r}, "l.svg", "m.svg")
	for _, want := range []string{
		"## Hand-over from the earlier provider",
		"| 1 | 0.00 s |", "| 100 | 0.00 s |",
		"N=100, violation: look 7 at 1.40 s: t9",
		"-modes handover -handover-kros 1,100 -handover-look 200ms -shared-apiservers 2",
		"chart pull secret copy, AccessRequest.",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("the markdown lacks %q", want)
		}
	}
}

package rollout

import (
	"fmt"
	"testing"

	. "github.com/onsi/gomega"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/rollout/rollouttest"
)

// Pure tests of a rollout's plan (spec.rollout.plan): what it shows, that it admits
// nobody, and that its approval follows it.

func planVersion(chart, values string) *v1alpha1.KroVersion {
	v := &v1alpha1.KroVersion{Version: "v1", ChartVersion: chart}
	if values != "" {
		v.HelmValues = &apiextensionsv1.JSON{Raw: []byte(values)}
	}
	return v
}

// planned plans newRev of v1 with the old revision's artifacts kept.
func planned(g Gomega, policy *v1alpha1.RolloutPolicy, prev *v1alpha1.VersionStatus, kros ...v1alpha1.Kro) Plan {
	view := View{Kros: kros, VersionOf: map[string]string{rollouttest.OldRev: "v1", rollouttest.NewRev: "v1"},
		Artifacts:       map[string]*v1alpha1.KroVersion{rollouttest.OldRev: planVersion("0.9.3", `{"config":{"logLevel":"info"},"foo":1}`)},
		Current:         planVersion("0.9.4", `{"config":{"logLevel":"debug"},"image":{"pullPolicy":"Always"}}`),
		NamespaceLabels: rollouttest.NamespaceLabels}
	p, err := PlanRollout(policy, false, v1alpha1.VersionStatus{Version: "v1", Revision: rollouttest.NewRev, Kros: int32(len(kros))}, prev, view, rollouttest.T0)
	g.Expect(err).NotTo(HaveOccurred())
	return p
}

func withRGDs(k v1alpha1.Kro, total, ready int32) v1alpha1.Kro {
	k.Status.ResourceGraphDefinitions = &v1alpha1.ResourceGraphDefinitionSummary{Total: total, Ready: ready}
	return k
}

func TestAPlanAdmitsNobodyAndShowsTheOrder(t *testing.T) {
	g := NewWithT(t)
	policy := &v1alpha1.RolloutPolicy{Plan: true, MaxUnavailable: ptr.To(intstr.FromInt32(2)),
		Canary: &metav1.LabelSelector{MatchLabels: map[string]string{"ring": "canary"}}}
	kros := []v1alpha1.Kro{
		withRGDs(rollouttest.Kro("a", rollouttest.OldRev, true), 3, 3),
		withRGDs(rollouttest.Kro("b", rollouttest.OldRev, false), 1, 0),
		rollouttest.Kro("c", rollouttest.OldRev, true), // reports no RGDs
		withRGDs(rollouttest.CanaryKro("y", rollouttest.OldRev, false), 2, 1),
		withRGDs(rollouttest.CanaryKro("z", rollouttest.OldRev, true), 4, 4),
		rollouttest.Kro("done", rollouttest.NewRev, true), // runs the revision: not in the plan
	}
	p := planned(g, policy, nil, kros...)
	g.Expect(p.Rollout).To(Equal(v1alpha1.RolloutPlanned))
	g.Expect(p.Updating).To(BeEmpty(), "a plan admits nobody")
	g.Expect(p.Updated).To(BeEquivalentTo(1))
	g.Expect(p.Plan).NotTo(BeNil())
	g.Expect(rollouttest.PlannedNames(p.Plan)).To(Equal([]string{"ring-canary/z", "ring-canary/y", "ns/a", "ns/c", "ns/b"}),
		"canaries first, available before unavailable, each in name order")
	g.Expect(p.Plan.Revision).To(Equal(rollouttest.NewRev))
	g.Expect(p.Plan.From).To(Equal(rollouttest.OldRev))
	g.Expect(p.Plan.RGDs).To(BeEquivalentTo(10))
	g.Expect(p.Plan.Kros[0]).To(Equal(v1alpha1.PlannedKro{Kro: "ring-canary/z", Canary: true, RGDs: ptr.To(int32(4)), RGDsReady: ptr.To(int32(4))}))
	g.Expect(p.Plan.Kros[1].Unavailable).To(BeTrue())
	g.Expect(p.Plan.Kros[3].RGDs).To(BeNil(), "a Kro that reports no RGDs has none shown")
	g.Expect(p.Plan.Changes).To(Equal("chart 0.9.3 → 0.9.4; values: ~config.logLevel, -foo, +image.pullPolicy"))
	g.Expect(p.Plan.Summary).To(Equal("v1: 5 Kros (2 canaries, 2 unavailable), 10 RGDs; chart 0.9.3 → 0.9.4; values: ~config.logLevel, -foo, +image.pullPolicy"))
	g.Expect(p.Message).To(And(HavePrefix("planned"), ContainSubstring("ring-canary/z, ring-canary/y, ns/a, ns/c, ns/b"), ContainSubstring("spec.rollout.plan")))

	// Computed, not stored: without the previous status, the same plan.
	again := planned(g, policy, &p.VersionStatus, kros...)
	g.Expect(again.VersionStatus).To(Equal(p.VersionStatus))
}

// TestAnApprovedPlanIsFollowed: once approved, the rollout admits in the planned order,
// although the usual order has changed meanwhile (a Kro came that sorts first); a plan of
// another revision is void.
func TestAnApprovedPlanIsFollowed(t *testing.T) {
	g := NewWithT(t)
	policy := &v1alpha1.RolloutPolicy{Plan: true, MaxUnavailable: ptr.To(intstr.FromInt32(1))}
	b, c := rollouttest.Kro("b", rollouttest.OldRev, true), rollouttest.Kro("c", rollouttest.OldRev, true)
	p := planned(g, policy, nil, b, c)
	g.Expect(rollouttest.PlannedNames(p.Plan)).To(Equal([]string{"ns/b", "ns/c"}))
	// Reorder the plan as an older status may have it (b had been unavailable, say).
	p.Plan.Kros[0], p.Plan.Kros[1] = p.Plan.Kros[1], p.Plan.Kros[0]

	a := rollouttest.Kro("a", rollouttest.OldRev, true) // came while planned
	policy.Plan = false
	approved := planned(g, policy, &p.VersionStatus, a, b, c)
	g.Expect(approved.Rollout).To(Equal(v1alpha1.RolloutProgressing))
	g.Expect(rollouttest.MemberNames(approved.Updating)).To(Equal([]string{"ns/c"}), "the plan's first, not the first by name")
	g.Expect(approved.Plan).To(Equal(p.Plan), "the approved plan stays while Kros wait")

	// The next reconcile still follows it.
	c = rollouttest.Kro("c", rollouttest.NewRev, true)
	next := planned(g, policy, &approved.VersionStatus, a, b, c)
	g.Expect(rollouttest.MemberNames(next.Updating)).To(Equal([]string{"ns/b"}))
	b = rollouttest.Kro("b", rollouttest.NewRev, true)
	next = planned(g, policy, &next.VersionStatus, a, b, c)
	g.Expect(rollouttest.MemberNames(next.Updating)).To(Equal([]string{"ns/a"}), "the Kro the plan does not name comes after")
	a = rollouttest.Kro("a", rollouttest.NewRev, true)
	next = planned(g, policy, &next.VersionStatus, a, b, c)
	g.Expect(next.Rollout).To(Equal(v1alpha1.RolloutComplete))
	g.Expect(next.Plan).To(BeNil(), "no Kro waits: the plan is done")

	// A plan of another revision is void: the usual order.
	stale := p.DeepCopy()
	stale.Plan.Revision = "kro-v1-cccccccccc"
	p = planned(g, policy, stale, rollouttest.Kro("b", rollouttest.OldRev, true), rollouttest.Kro("c", rollouttest.OldRev, true))
	g.Expect(rollouttest.MemberNames(p.Updating)).To(Equal([]string{"ns/b"}))
	g.Expect(p.Plan).To(BeNil())
}

// TestAPlanIsBounded: at most planMaxKros Kros listed, the rest counted.
func TestAPlanIsBounded(t *testing.T) {
	g := NewWithT(t)
	var kros []v1alpha1.Kro
	for i := range planMaxKros + 7 {
		kros = append(kros, withRGDs(rollouttest.Kro(fmt.Sprintf("k%03d", i), rollouttest.OldRev, true), 1, 1))
	}
	p := planned(g, &v1alpha1.RolloutPolicy{Plan: true}, nil, kros...)
	g.Expect(p.Plan.Kros).To(HaveLen(planMaxKros))
	g.Expect(p.Plan.More).To(BeEquivalentTo(7))
	g.Expect(p.Plan.RGDs).To(BeEquivalentTo(planMaxKros + 7))
	g.Expect(p.Plan.Summary).To(HavePrefix(fmt.Sprintf("v1: %d Kros, %d RGDs", planMaxKros+7, planMaxKros+7)))
	g.Expect(p.Message).To(ContainSubstring("and %d more", planMaxKros+7-5))
}

// TestAPausedPlanStillShows: failures pause the version; the plan still shows what is
// left to do.
func TestAPausedPlanStillShows(t *testing.T) {
	g := NewWithT(t)
	policy := &v1alpha1.RolloutPolicy{Plan: true}
	prev := &v1alpha1.VersionStatus{Version: "v1", Revision: rollouttest.NewRev, Failed: []v1alpha1.RolloutMember{{Kro: "ns/a", Since: metav1.NewTime(rollouttest.T0), Reason: "upgrade failed"}}}
	p := planned(g, policy, prev, rollouttest.Kro("a", rollouttest.NewRev, false), rollouttest.Kro("b", rollouttest.OldRev, true))
	g.Expect(p.Rollout).To(Equal(v1alpha1.RolloutPaused))
	g.Expect(rollouttest.PlannedNames(p.Plan)).To(Equal([]string{"ns/b"}))
}

func TestArtifactChanges(t *testing.T) {
	g := NewWithT(t)
	old := planVersion("0.9.3", `{"a":{"b":1,"c":[1,2]},"secret":{"password":"hunter2"},"d":{}}`)
	cur := planVersion("0.9.3", `{"a":{"b":1,"c":[1,3]},"secret":{"password":"s3cr3t"},"e":{"f.g/h":"x"}}`)
	got := artifactChanges(old, cur, rollouttest.OldRev)
	g.Expect(got).To(Equal(`values: ~a.c, -d, +e["f.g/h"], ~secret.password`))
	g.Expect(got).NotTo(Or(ContainSubstring("hunter2"), ContainSubstring("s3cr3t")), "paths only, never values")

	cur.ChartURL, cur.ChartPullSecret = "oci://registry.example/kro", "pull"
	g.Expect(artifactChanges(old, cur, rollouttest.OldRev)).To(HavePrefix("chartURL oci://registry.k8s.io/kro/charts/kro → oci://registry.example/kro; chartPullSecret none → pull; values:"))

	g.Expect(artifactChanges(old, old, rollouttest.OldRev)).To(Equal("no change"))
	g.Expect(artifactChanges(nil, cur, rollouttest.OldRev)).To(ContainSubstring("not kept"))

	many := planVersion("0.9.3", `{"k1":1,"k2":1,"k3":1,"k4":1,"k5":1,"k6":1,"k7":1}`)
	g.Expect(artifactChanges(planVersion("0.9.3", ""), many, rollouttest.OldRev)).To(Equal("values: +k1, +k2, +k3, +k4, +k5 and 2 more"))
}

func TestMostRun(t *testing.T) {
	g := NewWithT(t)
	a, b, c := rollouttest.Kro("a", "r2", true), rollouttest.Kro("b", "r1", true), rollouttest.Kro("c", "r2", true)
	g.Expect(mostRun([]*v1alpha1.Kro{&a, &b, &c}, nil)).To(Equal("r2"))
	g.Expect(mostRun([]*v1alpha1.Kro{&a, &b}, nil)).To(Equal("r1"), "a tie goes to the first by name")
	g.Expect(mostRun([]*v1alpha1.Kro{&a, &b}, map[string]Record{"ns/b": {Revision: "r2"}})).To(Equal("r2"), "the HelmRelease's record counts")
}

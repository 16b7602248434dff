package rollout

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/openmcp-project/openmcp-operator/api/constants"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/rollout/rollouttest"
)

// Pure tests of the rollout's state (issue 21, holes 1 and 2): the plan rebuilt from the
// HelmReleases' records when the ProviderConfig's status is lost, and Deployment-like
// admission.

// planWith plans newRev of v1 with the HelmReleases' records.
func planWith(g Gomega, policy *v1alpha1.RolloutPolicy, prev *v1alpha1.VersionStatus, records map[string]Record, now time.Time, kros ...v1alpha1.Kro) Plan {
	view := View{Kros: kros, Records: records, VersionOf: map[string]string{rollouttest.OldRev: "v1", rollouttest.NewRev: "v1", "kro-v0-cccccccccc": "v0"}}
	p, err := PlanRollout(policy, false, v1alpha1.VersionStatus{Version: "v1", Revision: rollouttest.NewRev, Kros: int32(len(kros))}, prev, view, now)
	g.Expect(err).NotTo(HaveOccurred())
	return p
}

func admittedRecord(rev string, since time.Time, failed string) Record {
	return Record{Revision: rev, Admission: &Admission{Since: metav1.NewTime(since)}, Failed: failed}
}

// TestALostStatusIsRebuiltFromTheRecords: without the status, the Kro admitted before
// is still updating, since its admission (its health timeout runs on), and nobody else
// is admitted in its place; a Kro counted as failed is still failed, and the version
// stays paused.
func TestALostStatusIsRebuiltFromTheRecords(t *testing.T) {
	g := NewWithT(t)
	policy := &v1alpha1.RolloutPolicy{MaxUnavailable: ptr.To(intstr.FromInt32(1))}
	a, b := rollouttest.Kro("a", rollouttest.OldRev, false), rollouttest.Kro("b", rollouttest.OldRev, true)
	records := map[string]Record{"ns/a": admittedRecord(rollouttest.NewRev, rollouttest.T0, ""), "ns/b": {Revision: rollouttest.OldRev}}

	p := planWith(g, policy, nil, records, rollouttest.T0.Add(time.Minute), a, b)
	g.Expect(rollouttest.MemberNames(p.Updating)).To(Equal([]string{"ns/a"}))
	g.Expect(p.Updating[0].Since.Time).To(Equal(rollouttest.T0), "the admission's time comes from the record")
	g.Expect(p.RecheckIn).To(Equal(defaultHealthTimeout - time.Minute))

	records["ns/a"] = admittedRecord(rollouttest.NewRev, rollouttest.T0, "upgrade failed")
	p = planWith(g, policy, nil, records, rollouttest.T0.Add(2*time.Minute), a, b)
	g.Expect(p.Rollout).To(Equal(v1alpha1.RolloutPaused))
	g.Expect(p.Failed).To(ConsistOf(HaveField("Reason", "upgrade failed")))
	g.Expect(p.Updating).To(BeEmpty())

	// A record of an older revision admits nothing to the current one.
	records["ns/a"] = admittedRecord(rollouttest.OldRev, rollouttest.T0, "")
	p = planWith(g, policy, nil, records, rollouttest.T0.Add(3*time.Minute), rollouttest.Kro("a", rollouttest.OldRev, true), b)
	g.Expect(rollouttest.MemberNames(p.Updating)).To(Equal([]string{"ns/a"}))
	g.Expect(p.Updating[0].Since.Time).To(Equal(rollouttest.T0.Add(3*time.Minute)), "admitted now, not by the record")
}

// TestARestoredKroWithoutRevisionWaits: a Kro whose status lost status.revision still
// runs the old revision by its HelmRelease's record: it waits for its admission.
func TestARestoredKroWithoutRevisionWaits(t *testing.T) {
	g := NewWithT(t)
	policy := &v1alpha1.RolloutPolicy{MaxUnavailable: ptr.To(intstr.FromInt32(1))}
	a, b := rollouttest.Kro("a", rollouttest.OldRev, false), rollouttest.Kro("b", "", true)
	records := map[string]Record{"ns/a": admittedRecord(rollouttest.NewRev, rollouttest.T0, ""), "ns/b": {Revision: rollouttest.OldRev}}
	p := planWith(g, policy, nil, records, rollouttest.T0, a, b)
	g.Expect(rollouttest.MemberNames(p.Updating)).To(Equal([]string{"ns/a"}))
	g.Expect(p.Message).To(ContainSubstring("the next Kros wait"), "b waits, though its status names no revision")
}

// TestUnavailableKrosCountButDoNotFail: a Kro that was unavailable before the change
// takes one of maxUnavailable, is admitted last, and never fails the revision; the
// rollout completes with it.
func TestUnavailableKrosCountButDoNotFail(t *testing.T) {
	g := NewWithT(t)
	policy := &v1alpha1.RolloutPolicy{MaxUnavailable: ptr.To(intstr.FromInt32(2)), HealthTimeout: &metav1.Duration{Duration: time.Minute}}
	a, b, h := rollouttest.Kro("a", rollouttest.OldRev, true), rollouttest.Kro("b", rollouttest.OldRev, true), rollouttest.Kro("h", rollouttest.OldRev, false)
	records := map[string]Record{}

	p := planWith(g, policy, nil, records, rollouttest.T0, a, b, h)
	g.Expect(rollouttest.MemberNames(p.Updating)).To(Equal([]string{"ns/a"}), "h is first by name but unavailable, and it takes a slot")
	g.Expect(p.Message).To(ContainSubstring("1 Kros that are unavailable are updated last, or once they recover: ns/h"))

	a = rollouttest.Kro("a", rollouttest.NewRev, true)
	p = planWith(g, policy, &p.VersionStatus, records, rollouttest.T0.Add(time.Minute), a, b, h)
	g.Expect(rollouttest.MemberNames(p.Updating)).To(Equal([]string{"ns/b"}))

	b = rollouttest.Kro("b", rollouttest.NewRev, true)
	p = planWith(g, policy, &p.VersionStatus, records, rollouttest.T0.Add(2*time.Minute), a, b, h)
	g.Expect(p.Updating).To(ConsistOf(HaveField("Unavailable", true)), "h goes last")
	g.Expect(p.Rollout).To(Equal(v1alpha1.RolloutProgressing))

	// Long past the health timeout h is neither healthy nor failed.
	p = planWith(g, policy, &p.VersionStatus, records, rollouttest.T0.Add(time.Hour), a, b, h)
	g.Expect(p.Failed).To(BeEmpty())
	g.Expect(rollouttest.MemberNames(p.Updating)).To(Equal([]string{"ns/h"}))

	// Once its HelmRelease carries the revision the rollout is complete, and says that h
	// is still unavailable.
	records["ns/h"] = Record{Revision: rollouttest.NewRev, Admission: admissionOf(p.Updating[0])}
	p = planWith(g, policy, &p.VersionStatus, records, rollouttest.T0.Add(time.Hour), a, b, h)
	g.Expect(p.Rollout).To(Equal(v1alpha1.RolloutComplete))
	g.Expect(p.Failed).To(BeEmpty())
	g.Expect(p.Message).To(ContainSubstring("1 Kros got the revision while unavailable, which counts as no failure: ns/h"))

	// The same, rebuilt from the records alone.
	p = planWith(g, policy, nil, records, rollouttest.T0.Add(time.Hour), a, b, h)
	g.Expect(p.Rollout).To(Equal(v1alpha1.RolloutComplete))
}

// TestARecoveredKroIsAdmittedAsAvailable: an unavailable Kro that recovers before its
// turn is admitted like any other, under the health gate.
func TestARecoveredKroIsAdmittedAsAvailable(t *testing.T) {
	g := NewWithT(t)
	policy := &v1alpha1.RolloutPolicy{MaxUnavailable: ptr.To(intstr.FromInt32(2))}
	a, h := rollouttest.Kro("a", rollouttest.OldRev, true), rollouttest.Kro("h", rollouttest.OldRev, false)
	p := planWith(g, policy, nil, nil, rollouttest.T0, a, h)
	g.Expect(rollouttest.MemberNames(p.Updating)).To(Equal([]string{"ns/a"}))
	h.Status.Phase = v1alpha1.PhaseReady
	p = planWith(g, policy, &p.VersionStatus, nil, rollouttest.T0.Add(time.Minute), a, h)
	g.Expect(p.Updating).To(HaveLen(2))
	g.Expect(p.Updating[1]).To(And(HaveField("Kro", "ns/h"), HaveField("Unavailable", false)))
}

// TestTooManyUnavailableHoldsTheRollout: Kros unavailable before the change that fill
// maxUnavailable hold every available Kro back, and the message says so.
func TestTooManyUnavailableHoldsTheRollout(t *testing.T) {
	g := NewWithT(t)
	policy := &v1alpha1.RolloutPolicy{MaxUnavailable: ptr.To(intstr.FromInt32(1))}
	p := planWith(g, policy, nil, nil, rollouttest.T0, rollouttest.Kro("a", rollouttest.OldRev, true), rollouttest.Kro("h", rollouttest.OldRev, false))
	g.Expect(p.Updating).To(BeEmpty())
	g.Expect(p.Message).To(ContainSubstring("the next Kros wait: 1 of at most 1 (maxUnavailable) are unavailable"))
}

// TestAVersionSwitchIsNoAdmission: a Kro its tenant moved onto the version from another
// one takes the current revision without an admission, so it neither takes a place
// among the updating nor fails the version.
func TestAVersionSwitchIsNoAdmission(t *testing.T) {
	g := NewWithT(t)
	policy := &v1alpha1.RolloutPolicy{MaxUnavailable: ptr.To(intstr.FromInt32(2))}
	moved := rollouttest.Kro("m", "kro-v0-cccccccccc", false)
	moved.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionHelmReleaseReady, Status: metav1.ConditionFalse,
		Reason: v1alpha1.ReasonReleaseFailed, Message: "upgrade failed", LastTransitionTime: metav1.NewTime(rollouttest.T0.Add(time.Minute))}}
	records := map[string]Record{"ns/m": {Revision: rollouttest.NewRev}}
	p := planWith(g, policy, nil, records, rollouttest.T0, rollouttest.Kro("a", rollouttest.OldRev, true), moved)
	g.Expect(rollouttest.MemberNames(p.Updating)).To(Equal([]string{"ns/a"}))
	p = planWith(g, policy, &p.VersionStatus, records, rollouttest.T0.Add(time.Hour), rollouttest.Kro("a", rollouttest.OldRev, false), moved)
	g.Expect(rollouttest.MemberNames(p.Failed)).To(Equal([]string{"ns/a"}), "only the admitted Kro can fail the revision")
}

// TestABrokenKroDoesNotHoldTheRolloutOpen: a Kro whose HelmRelease carries the revision
// without an admission (a new one, or one whose release fails for reasons of its own)
// has the revision: the rollout is Complete, and the message names it.
func TestABrokenKroDoesNotHoldTheRolloutOpen(t *testing.T) {
	g := NewWithT(t)
	records := map[string]Record{"ns/b": {Revision: rollouttest.NewRev}}
	for _, policy := range []*v1alpha1.RolloutPolicy{nil, {MaxUnavailable: ptr.To(intstr.FromInt32(1))}} {
		p := planWith(g, policy, nil, records, rollouttest.T0, rollouttest.Kro("a", rollouttest.NewRev, true), rollouttest.Kro("b", "", false))
		g.Expect(p.Rollout).To(Equal(v1alpha1.RolloutComplete))
		g.Expect(p.Updated).To(BeEquivalentTo(1))
		g.Expect(p.Message).To(ContainSubstring("1 Kros have the revision but are not Ready with it: ns/b"))
		p = planWith(g, policy, nil, nil, rollouttest.T0, rollouttest.Kro("a", rollouttest.NewRev, true), rollouttest.Kro("b", "", false))
		g.Expect(p.Rollout).To(Equal(v1alpha1.RolloutProgressing), "a Kro without a HelmRelease yet does not have it")
	}
}

// TestAnIgnoredKroIsUnavailableNotFailed: a tenant sets openmcp.cloud/operation=ignore on
// its Kro once the rollout admitted it. The Kro reconciler leaves it alone, so it never
// becomes healthy with the revision; long past the health timeout it counts as
// unavailable, and the rollout neither fails it nor pauses for everyone. An ignored Kro
// that still waits goes last, as an unavailable one.
func TestAnIgnoredKroIsUnavailableNotFailed(t *testing.T) {
	g := NewWithT(t)
	policy := &v1alpha1.RolloutPolicy{MaxUnavailable: ptr.To(intstr.FromInt32(1)), HealthTimeout: &metav1.Duration{Duration: time.Minute}}
	ignore := func(k v1alpha1.Kro) v1alpha1.Kro {
		k.Annotations = map[string]string{constants.OperationAnnotation: constants.OperationAnnotationValueIgnore}
		return k
	}
	a, b := rollouttest.Kro("a", rollouttest.OldRev, true), rollouttest.Kro("b", rollouttest.OldRev, true)
	records := map[string]Record{}
	p := planWith(g, policy, nil, records, rollouttest.T0, a, b)
	g.Expect(rollouttest.MemberNames(p.Updating)).To(Equal([]string{"ns/a"}))

	a = ignore(a)
	p = planWith(g, policy, &p.VersionStatus, records, rollouttest.T0.Add(time.Hour), a, b)
	g.Expect(p.Failed).To(BeEmpty(), "an ignored Kro fails no revision")
	g.Expect(p.Rollout).NotTo(Equal(v1alpha1.RolloutPaused))
	g.Expect(p.Updating).To(ContainElement(And(HaveField("Kro", "ns/a"), HaveField("Unavailable", true))))

	// Ignored before its turn, it waits as an unavailable Kro (which takes a slot, as
	// any unavailable Kro does): b goes first.
	policy.MaxUnavailable = ptr.To(intstr.FromInt32(2))
	p = planWith(g, policy, nil, records, rollouttest.T0, ignore(rollouttest.Kro("a", rollouttest.OldRev, true)), rollouttest.Kro("b", rollouttest.OldRev, true))
	g.Expect(rollouttest.MemberNames(p.Updating)).To(Equal([]string{"ns/b"}))
}

package rollout

import (
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/foreign"
	"github.com/openmcp-project/service-provider-kro/controllers/rollout/rollouttest"
)

// Pure tests of the rollout's decisions: no API server.

func plan(g Gomega, policy *v1alpha1.RolloutPolicy, paused bool, prev *v1alpha1.VersionStatus, now time.Time, kros ...v1alpha1.Kro) Plan {
	view := View{Kros: kros, VersionOf: map[string]string{rollouttest.OldRev: "v1", rollouttest.NewRev: "v1"}, NamespaceLabels: rollouttest.NamespaceLabels}
	p, err := PlanRollout(policy, paused, v1alpha1.VersionStatus{Version: "v1", Revision: rollouttest.NewRev, Kros: int32(len(kros))}, prev, view, now)
	g.Expect(err).NotTo(HaveOccurred())
	return p
}

func TestRolloutWithoutPolicyAdmitsNobody(t *testing.T) {
	g := NewWithT(t)
	p := plan(g, nil, false, nil, rollouttest.T0, rollouttest.Kro("a", rollouttest.NewRev, true), rollouttest.Kro("b", rollouttest.OldRev, true))
	g.Expect(p.Rollout).To(Equal(v1alpha1.RolloutProgressing))
	g.Expect(p.Updated).To(BeEquivalentTo(1))
	g.Expect(p.Updating).To(BeEmpty(), "without a policy every Kro moves on its own")
	p = plan(g, nil, false, nil, rollouttest.T0, rollouttest.Kro("a", rollouttest.NewRev, true), rollouttest.Kro("b", rollouttest.NewRev, true))
	g.Expect(p.Rollout).To(Equal(v1alpha1.RolloutComplete))
}

func TestRolloutOneAtATime(t *testing.T) {
	g := NewWithT(t)
	policy := &v1alpha1.RolloutPolicy{MaxUnavailable: ptr.To(intstr.FromInt32(1))}
	a, b, c := rollouttest.Kro("a", rollouttest.OldRev, true), rollouttest.Kro("b", rollouttest.OldRev, true), rollouttest.Kro("c", rollouttest.OldRev, true)

	p := plan(g, policy, false, nil, rollouttest.T0, a, b, c)
	g.Expect(rollouttest.MemberNames(p.Updating)).To(Equal([]string{"ns/a"}), "the first in name order goes alone")
	g.Expect(p.Rollout).To(Equal(v1alpha1.RolloutProgressing))
	g.Expect(p.RecheckIn).To(Equal(defaultHealthTimeout))

	// a is being upgraded: not Ready yet; nobody else goes.
	a.Status.Phase = v1alpha1.PhaseProgressing
	p = plan(g, policy, false, &p.VersionStatus, rollouttest.T0.Add(time.Minute), a, b, c)
	g.Expect(rollouttest.MemberNames(p.Updating)).To(Equal([]string{"ns/a"}))

	// a is Ready with the new revision: b goes.
	a = rollouttest.Kro("a", rollouttest.NewRev, true)
	p = plan(g, policy, false, &p.VersionStatus, rollouttest.T0.Add(2*time.Minute), a, b, c)
	g.Expect(p.Updated).To(BeEquivalentTo(1))
	g.Expect(rollouttest.MemberNames(p.Updating)).To(Equal([]string{"ns/b"}))

	b, c = rollouttest.Kro("b", rollouttest.NewRev, true), rollouttest.Kro("c", rollouttest.NewRev, true)
	p = plan(g, policy, false, &p.VersionStatus, rollouttest.T0.Add(3*time.Minute), a, b, c)
	g.Expect(p.Rollout).To(Equal(v1alpha1.RolloutComplete))
	g.Expect(p.Updated).To(BeEquivalentTo(3))
	g.Expect(p.Updating).To(BeEmpty())
}

func TestRolloutPercentageAndNewKros(t *testing.T) {
	g := NewWithT(t)
	policy := &v1alpha1.RolloutPolicy{MaxUnavailable: ptr.To(intstr.FromString("50%"))}
	kros := []v1alpha1.Kro{rollouttest.Kro("a", rollouttest.OldRev, true), rollouttest.Kro("b", rollouttest.OldRev, true), rollouttest.Kro("c", rollouttest.OldRev, true), rollouttest.Kro("d", rollouttest.OldRev, true),
		rollouttest.Kro("new", "", false)} // a new Kro gets the current artifacts at once, without an admission
	p := plan(g, policy, false, nil, rollouttest.T0, kros...)
	g.Expect(rollouttest.MemberNames(p.Updating)).To(Equal([]string{"ns/a"}), "50%% of 5 rounds down to 2, and the new Kro, not yet Ready, is unavailable")
	kros[4].Status.Phase = v1alpha1.PhaseReady
	p = plan(g, policy, false, nil, rollouttest.T0, kros...)
	g.Expect(rollouttest.MemberNames(p.Updating)).To(Equal([]string{"ns/a", "ns/b"}), "once it is Ready, two go")
}

func TestRolloutCanariesFirst(t *testing.T) {
	g := NewWithT(t)
	policy := &v1alpha1.RolloutPolicy{MaxUnavailable: ptr.To(intstr.FromInt32(2)),
		Canary: &metav1.LabelSelector{MatchLabels: map[string]string{"ring": "canary"}}}
	a, z := rollouttest.Kro("a", rollouttest.OldRev, true), rollouttest.CanaryKro("z", rollouttest.OldRev, true)
	p := plan(g, policy, false, nil, rollouttest.T0, a, z)
	g.Expect(rollouttest.MemberNames(p.Updating)).To(Equal([]string{"ring-canary/z"}), "only the canary, though there is room for two")
	z = rollouttest.CanaryKro("z", rollouttest.NewRev, true)
	p = plan(g, policy, false, &p.VersionStatus, rollouttest.T0.Add(time.Minute), a, z)
	g.Expect(rollouttest.MemberNames(p.Updating)).To(Equal([]string{"ns/a"}), "the others once the canary is healthy")
}

// TestAFailedCanaryHoldsTheOthersBack (issue 21, hole 3): with failureThreshold above 1
// a failed canary does not pause the version, but it still gates every Kro that is not
// a canary, and the message names it.
func TestAFailedCanaryHoldsTheOthersBack(t *testing.T) {
	g := NewWithT(t)
	policy := &v1alpha1.RolloutPolicy{MaxUnavailable: ptr.To(intstr.FromInt32(2)), FailureThreshold: ptr.To(int32(2)),
		Canary: &metav1.LabelSelector{MatchLabels: map[string]string{"ring": "canary"}}}
	a, b, z := rollouttest.Kro("a", rollouttest.OldRev, true), rollouttest.Kro("b", rollouttest.OldRev, true), rollouttest.CanaryKro("z", rollouttest.OldRev, true)
	p := plan(g, policy, false, nil, rollouttest.T0, a, b, z)
	g.Expect(rollouttest.MemberNames(p.Updating)).To(Equal([]string{"ring-canary/z"}))

	z.Status.Phase = v1alpha1.PhaseProgressing
	z.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionHelmReleaseReady, Status: metav1.ConditionFalse,
		Reason: v1alpha1.ReasonReleaseFailed, Message: "upgrade failed", LastTransitionTime: metav1.NewTime(rollouttest.T0.Add(time.Minute))}}
	for i := 2; i < 5; i++ {
		p = plan(g, policy, false, &p.VersionStatus, rollouttest.T0.Add(time.Duration(i)*time.Minute), a, b, z)
		g.Expect(p.Rollout).To(Equal(v1alpha1.RolloutProgressing), "one failure of two allowed does not pause")
		g.Expect(rollouttest.MemberNames(p.Failed)).To(Equal([]string{"ring-canary/z"}))
		g.Expect(p.Updating).To(BeEmpty(), "no Kro that is not a canary goes while the canary failed")
		g.Expect(p.Message).To(ContainSubstring("canaries failed with revision " + rollouttest.NewRev + ": ring-canary/z (upgrade failed)"))
	}
}

func TestRolloutPausesOnFailureAndAFixResumes(t *testing.T) {
	g := NewWithT(t)
	policy := &v1alpha1.RolloutPolicy{MaxUnavailable: ptr.To(intstr.FromInt32(1))}
	a, b := rollouttest.Kro("a", rollouttest.OldRev, true), rollouttest.Kro("b", rollouttest.OldRev, true)
	p := plan(g, policy, false, nil, rollouttest.T0, a, b)
	g.Expect(rollouttest.MemberNames(p.Updating)).To(Equal([]string{"ns/a"}))

	// a's upgrade fails after it was admitted.
	a.Status.Phase = v1alpha1.PhaseProgressing
	a.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionHelmReleaseReady, Status: metav1.ConditionFalse,
		Reason: v1alpha1.ReasonReleaseFailed, Message: "upgrade failed: Deployment kro is invalid", LastTransitionTime: metav1.NewTime(rollouttest.T0.Add(time.Minute))}}
	p = plan(g, policy, false, &p.VersionStatus, rollouttest.T0.Add(2*time.Minute), a, b)
	g.Expect(p.Rollout).To(Equal(v1alpha1.RolloutPaused))
	g.Expect(rollouttest.MemberNames(p.Failed)).To(Equal([]string{"ns/a"}))
	g.Expect(p.Failed[0].Reason).To(ContainSubstring("Deployment kro is invalid"))
	g.Expect(p.Updating).To(BeEmpty(), "b is not touched")
	g.Expect(p.Message).To(ContainSubstring("fix or revert"))

	// Paused, it stays paused: b is still not admitted.
	p = plan(g, policy, false, &p.VersionStatus, rollouttest.T0.Add(3*time.Minute), a, b)
	g.Expect(p.Rollout).To(Equal(v1alpha1.RolloutPaused))
	g.Expect(p.Updating).To(BeEmpty())

	// A revert: the version's artifacts are the old ones again, so the update revision is
	// oldRev. a never became Ready with newRev and still runs oldRev: it counts as
	// updated at once, and so does b; the failure belonged to another revision.
	view := View{Kros: []v1alpha1.Kro{rollouttest.Kro("a", rollouttest.OldRev, true), b}, VersionOf: map[string]string{rollouttest.OldRev: "v1", rollouttest.NewRev: "v1"}}
	p2, err := PlanRollout(policy, false, v1alpha1.VersionStatus{Version: "v1", Revision: rollouttest.OldRev}, &p.VersionStatus, view, rollouttest.T0.Add(4*time.Minute))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(p2.Rollout).To(Equal(v1alpha1.RolloutComplete))
	g.Expect(p2.Failed).To(BeEmpty())
}

func TestRolloutHealthGates(t *testing.T) {
	g := NewWithT(t)
	policy := &v1alpha1.RolloutPolicy{HealthTimeout: &metav1.Duration{Duration: time.Minute}, FailureThreshold: ptr.To[int32](2)}
	a, b := rollouttest.Kro("a", rollouttest.OldRev, true), rollouttest.Kro("b", rollouttest.OldRev, true)
	a.Status.ResourceGraphDefinitions = &v1alpha1.ResourceGraphDefinitionSummary{Total: 3, Ready: 3}
	p := plan(g, policy, false, nil, rollouttest.T0, a, b)
	g.Expect(p.Updating).To(HaveLen(1))
	g.Expect(p.Updating[0].RGDsReady).To(BeEquivalentTo(3), "the RGDs Ready before are recorded")

	// Ready with the revision, but one RGD fewer Ready: still updating.
	a = rollouttest.Kro("a", rollouttest.NewRev, true)
	a.Status.ResourceGraphDefinitions = &v1alpha1.ResourceGraphDefinitionSummary{Total: 3, Ready: 2}
	p = plan(g, policy, false, &p.VersionStatus, rollouttest.T0.Add(30*time.Second), a, b)
	g.Expect(rollouttest.MemberNames(p.Updating)).To(Equal([]string{"ns/a"}))
	g.Expect(p.RecheckIn).To(Equal(30 * time.Second))

	// Past the timeout it fails; one failure is below the threshold of 2, so the rollout
	// goes on, but a failed Kro is unavailable: under maxUnavailable 1, b waits.
	p = plan(g, policy, false, &p.VersionStatus, rollouttest.T0.Add(61*time.Second), a, b)
	g.Expect(rollouttest.MemberNames(p.Failed)).To(Equal([]string{"ns/a"}))
	g.Expect(p.Failed[0].Reason).To(ContainSubstring("not healthy within 1m0s"))
	g.Expect(p.Rollout).To(Equal(v1alpha1.RolloutProgressing))
	g.Expect(p.Updating).To(BeEmpty())
	g.Expect(p.Message).To(ContainSubstring("1 of at most 1 (maxUnavailable) are unavailable"))

	// With room for two, b goes on.
	policy.MaxUnavailable = ptr.To(intstr.FromInt32(2))
	p = plan(g, policy, false, &p.VersionStatus, rollouttest.T0.Add(62*time.Second), a, b)
	g.Expect(rollouttest.MemberNames(p.Failed)).To(Equal([]string{"ns/a"}))
	g.Expect(rollouttest.MemberNames(p.Updating)).To(Equal([]string{"ns/b"}))
}

func TestRolloutPausedByAnnotation(t *testing.T) {
	g := NewWithT(t)
	policy := &v1alpha1.RolloutPolicy{}
	p := plan(g, policy, true, nil, rollouttest.T0, rollouttest.Kro("a", rollouttest.OldRev, true))
	g.Expect(p.Rollout).To(Equal(v1alpha1.RolloutPaused))
	g.Expect(p.Updating).To(BeEmpty())
	g.Expect(p.Message).To(ContainSubstring(v1alpha1.AnnotationRolloutPaused))
}

func TestRevisionNames(t *testing.T) {
	g := NewWithT(t)
	v := &v1alpha1.KroVersion{Version: "V0.9.4+Build_1", ChartVersion: "0.9.4", ChartURL: "oci://r/kro",
		HelmValues: &apiextensionsv1.JSON{Raw: []byte(`{"b":1,"a":{"y":2,"x":1}}`)}}
	n1, err := RevisionName("kro", v)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(n1).To(MatchRegexp(`^kro-v0-9-4-build-1-[0-9a-f]{10}$`))
	same := v.DeepCopy()
	same.HelmValues.Raw = []byte(`{"a":{"x":1,"y":2},"b":1}`)
	n2, _ := RevisionName("kro", same)
	g.Expect(n2).To(Equal(n1), "the order of keys does not make another revision")
	other := v.DeepCopy()
	other.HelmValues.Raw = []byte(`{"a":{"x":1,"y":3},"b":1}`)
	n3, _ := RevisionName("kro", other)
	g.Expect(n3).NotTo(Equal(n1))
	_, err = RevisionName("kro", &v1alpha1.KroVersion{Version: "v", HelmValues: &apiextensionsv1.JSON{Raw: []byte(`{`)}})
	g.Expect(err).To(HaveOccurred())

	cr, err := NewRevision("kro", "ns", v, 3)
	g.Expect(err).NotTo(HaveOccurred())
	back, err := RevisionArtifacts(cr)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(back).To(Equal(v))
	g.Expect(cr.Labels).To(HaveKeyWithValue(v1alpha1.LabelVersion, foreign.LabelValue("V0.9.4+Build_1")))
	g.Expect(validation.IsValidLabelValue(cr.Labels[v1alpha1.LabelVersion])).To(BeEmpty(), "a version with build metadata makes a valid label value")
	g.Expect(cr.Revision).To(BeEquivalentTo(3))
}

func TestSortByKey(t *testing.T) {
	g := NewWithT(t)
	var kros []v1alpha1.Kro
	for _, key := range []string{"b/x", "a-b/y", "a/z", "a/x"} {
		ns, name, _ := strings.Cut(key, "/")
		kros = append(kros, v1alpha1.Kro{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: v1alpha1.KroSpec{Version: key}})
	}
	sortByKey(kros)
	var got []string
	for i := range kros {
		g.Expect(kros[i].Spec.Version).To(Equal(KroKey(&kros[i])), "each Kro moved whole")
		got = append(got, KroKey(&kros[i]))
	}
	g.Expect(got).To(Equal([]string{"a-b/y", "a/x", "a/z", "b/x"}), "the order of the keys as strings")
}

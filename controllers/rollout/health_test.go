package rollout

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/rollout/rollouttest"
)

// Pure tests of the rollout's health gate (rollout_health.go), then one against real API
// servers.

// gatePrev is the status of a rollout that updates ns/a, admitted at rolloutT0 with 10
// of 10 instances Ready.
func gatePrev() *v1alpha1.VersionStatus {
	return &v1alpha1.VersionStatus{Version: "v1", Revision: rollouttest.NewRev, Updating: []v1alpha1.RolloutMember{
		{Kro: "ns/a", Since: metav1.NewTime(rollouttest.T0), Instances: &v1alpha1.InstanceCounts{Total: 10, Ready: 10}},
	}}
}

// gateKro is ns/a Ready with the new revision, with kro's health as given.
func gateKro(h *v1alpha1.RolloutHealth) v1alpha1.Kro {
	k := rollouttest.Kro("a", rollouttest.NewRev, true)
	k.Status.RolloutHealth = h
	return k
}

func health(total, ready int32, deploymentAvailable bool, notReady ...v1alpha1.InstanceState) *v1alpha1.RolloutHealth {
	return &v1alpha1.RolloutHealth{Revision: rollouttest.NewRev, Instances: v1alpha1.InstanceCounts{Total: total, Ready: ready},
		NotReady: notReady, DeploymentAvailable: deploymentAvailable, Deployment: "Deployment kro-system/kro: 0 of 1 replicas updated, 0 available"}
}

func TestGateFailsAKroWhoseInstancesFell(t *testing.T) {
	g := NewWithT(t)
	k := gateKro(health(10, 8, true,
		v1alpha1.InstanceState{Kind: "WebApp", Namespace: "team-a", Name: "shop", Reason: "ResourcesNotReady"},
		v1alpha1.InstanceState{Kind: "WebApp", Namespace: "team-b", Name: "blog", Reason: "NoReadyCondition"}))
	p := plan(g, policyOfOne(), false, gatePrev(), rollouttest.T0.Add(time.Minute), k)
	g.Expect(p.Updated).To(BeZero())
	g.Expect(rollouttest.MemberNames(p.Failed)).To(Equal([]string{"ns/a"}), "a smaller share Ready fails the Kro at once, before the timeout")
	g.Expect(p.Failed[0].Reason).To(Equal("instances Ready fell from 10/10 to 8/10: WebApp team-a/shop not Ready: ResourcesNotReady; WebApp team-b/blog not Ready: NoReadyCondition"))
	g.Expect(p.Failed[0].Instances).To(Equal(&v1alpha1.InstanceCounts{Total: 10, Ready: 10}), "the baseline stays with the member")
}

// TestGateJudgesInstancesNotReady: more instances, all Ready, is no fall; one more not
// Ready is.
func TestGateJudgesInstancesNotReady(t *testing.T) {
	g := NewWithT(t)
	// More instances, all Ready: none turned not Ready.
	p := plan(g, policyOfOne(), false, gatePrev(), rollouttest.T0.Add(time.Minute), gateKro(health(12, 12, true)))
	g.Expect(p.Updated).To(BeEquivalentTo(1))
	g.Expect(p.Failed).To(BeEmpty())
	// 9 of 10 after 10 of 10 did fall.
	p = plan(g, policyOfOne(), false, gatePrev(), rollouttest.T0.Add(time.Minute), gateKro(health(10, 9, true)))
	g.Expect(rollouttest.MemberNames(p.Failed)).To(Equal([]string{"ns/a"}))
}

func TestGateWaitsForKrosDeployment(t *testing.T) {
	g := NewWithT(t)
	k := gateKro(health(10, 10, false))
	p := plan(g, policyOfOne(), false, gatePrev(), rollouttest.T0.Add(time.Minute), k)
	g.Expect(p.Updated).To(BeZero(), "a Deployment that has not finished its rollout is not healthy")
	g.Expect(rollouttest.MemberNames(p.Updating)).To(Equal([]string{"ns/a"}), "and not a failure before the timeout")
	g.Expect(p.Failed).To(BeEmpty())

	p = plan(g, policyOfOne(), false, gatePrev(), rollouttest.T0.Add(defaultHealthTimeout), k)
	g.Expect(rollouttest.MemberNames(p.Failed)).To(Equal([]string{"ns/a"}))
	g.Expect(p.Failed[0].Reason).To(Equal("not healthy within 10m0s: kro's Deployment is not available: Deployment kro-system/kro: 0 of 1 replicas updated, 0 available"))
}

func TestGateNamesTheRGDsThatFell(t *testing.T) {
	g := NewWithT(t)
	prev := gatePrev()
	prev.Updating[0].RGDsReady = 3
	k := gateKro(health(10, 10, true))
	k.Status.ResourceGraphDefinitions = &v1alpha1.ResourceGraphDefinitionSummary{Total: 3, Ready: 2,
		NotReady: []v1alpha1.ResourceGraphDefinitionState{{Name: "webapp", Reason: "InvalidGraph"}}}
	p := plan(g, policyOfOne(), false, prev, rollouttest.T0.Add(defaultHealthTimeout), k)
	g.Expect(rollouttest.MemberNames(p.Failed)).To(Equal([]string{"ns/a"}))
	g.Expect(p.Failed[0].Reason).To(Equal("not healthy within 10m0s: ResourceGraphDefinitions Ready fell from 3 to 2: webapp (InvalidGraph)"))
}

func TestGateWaitsForHealthOfTheRevision(t *testing.T) {
	g := NewWithT(t)
	h := health(10, 10, true)
	h.Revision = rollouttest.OldRev
	p := plan(g, policyOfOne(), false, gatePrev(), rollouttest.T0.Add(time.Minute), gateKro(h))
	g.Expect(p.Updated).To(BeZero(), "health read with another revision says nothing of this one")
	g.Expect(rollouttest.MemberNames(p.Updating)).To(Equal([]string{"ns/a"}))
}

// TestGateTakesTheBaselineFromTheRecord: the Kro reconciler takes the instance baseline
// after the admission and records it on the HelmRelease; the status learns it from there.
func TestGateTakesTheBaselineFromTheRecord(t *testing.T) {
	g := NewWithT(t)
	prev := gatePrev()
	prev.Updating[0].Instances = nil
	view := View{Kros: []v1alpha1.Kro{gateKro(health(4, 2, true))}, VersionOf: map[string]string{rollouttest.OldRev: "v1", rollouttest.NewRev: "v1"},
		Records: map[string]Record{"ns/a": {Revision: rollouttest.NewRev, Admission: &Admission{
			Since: metav1.NewTime(rollouttest.T0), Instances: &v1alpha1.InstanceCounts{Total: 4, Ready: 4}}}}}
	p, err := PlanRollout(policyOfOne(), false, v1alpha1.VersionStatus{Version: "v1", Revision: rollouttest.NewRev, Kros: 1}, prev, view, rollouttest.T0.Add(time.Minute))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(rollouttest.MemberNames(p.Failed)).To(Equal([]string{"ns/a"}))
	g.Expect(p.Failed[0].Reason).To(HavePrefix("instances Ready fell from 4/4 to 2/4"))
	g.Expect(p.Failed[0].Instances).To(Equal(&v1alpha1.InstanceCounts{Total: 4, Ready: 4}))

	// And the HelmRelease keeps it while the status does not carry it yet.
	adm := admissionOf(prev.Updating[0])
	carryInstanceBaseline(adm, view.Records["ns/a"], rollouttest.NewRev)
	g.Expect(adm.Instances).To(Equal(&v1alpha1.InstanceCounts{Total: 4, Ready: 4}))
}

func policyOfOne() *v1alpha1.RolloutPolicy {
	return &v1alpha1.RolloutPolicy{MaxUnavailable: ptr.To(intstr.FromInt32(1))}
}

// TestGateKeepsAFailedKroFailed: the next plan, with the failure in its previous status,
// does not count the Kro as updated while its instances are still down.
func TestGateKeepsAFailedKroFailed(t *testing.T) {
	g := NewWithT(t)
	k := gateKro(health(10, 8, true))
	p := plan(g, policyOfOne(), false, gatePrev(), rollouttest.T0.Add(time.Minute), k)
	g.Expect(rollouttest.MemberNames(p.Failed)).To(Equal([]string{"ns/a"}))
	p = plan(g, policyOfOne(), false, &p.VersionStatus, rollouttest.T0.Add(2*time.Minute), k)
	g.Expect(rollouttest.MemberNames(p.Failed)).To(Equal([]string{"ns/a"}))
	g.Expect(p.Updated).To(BeZero())
	// Its instances are back: it counts as updated, as a failed Kro that recovers does.
	p = plan(g, policyOfOne(), false, &p.VersionStatus, rollouttest.T0.Add(3*time.Minute), gateKro(health(10, 10, true)))
	g.Expect(p.Failed).To(BeEmpty())
	g.Expect(p.Updated).To(BeEquivalentTo(1))
}

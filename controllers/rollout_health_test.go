package controllers

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

// Pure tests of the rollout's health gate (rollout_health.go), then one against real API
// servers.

// gatePrev is the status of a rollout that updates ns/a, admitted at rolloutT0 with 10
// of 10 instances Ready.
func gatePrev() *v1alpha1.VersionStatus {
	return &v1alpha1.VersionStatus{Version: "v1", Revision: newRev, Updating: []v1alpha1.RolloutMember{
		{Kro: "ns/a", Since: metav1.NewTime(rolloutT0), Instances: &v1alpha1.InstanceCounts{Total: 10, Ready: 10}},
	}}
}

// gateKro is ns/a Ready with the new revision, with kro's health as given.
func gateKro(h *v1alpha1.RolloutHealth) v1alpha1.Kro {
	k := rolloutKro("a", newRev, true)
	k.Status.RolloutHealth = h
	return k
}

func health(total, ready int32, deploymentAvailable bool, notReady ...v1alpha1.InstanceState) *v1alpha1.RolloutHealth {
	return &v1alpha1.RolloutHealth{Revision: newRev, Instances: v1alpha1.InstanceCounts{Total: total, Ready: ready},
		NotReady: notReady, DeploymentAvailable: deploymentAvailable, Deployment: "Deployment kro-system/kro: 0 of 1 replicas updated, 0 available"}
}

func TestGateFailsAKroWhoseInstancesFell(t *testing.T) {
	g := NewWithT(t)
	k := gateKro(health(10, 8, true,
		v1alpha1.InstanceState{Kind: "WebApp", Namespace: "team-a", Name: "shop", Reason: "ResourcesNotReady"},
		v1alpha1.InstanceState{Kind: "WebApp", Namespace: "team-b", Name: "blog", Reason: "NoReadyCondition"}))
	p := plan(g, policyOfOne(), false, gatePrev(), rolloutT0.Add(time.Minute), k)
	g.Expect(p.Updated).To(BeZero())
	g.Expect(kroNames(p.Failed)).To(Equal([]string{"ns/a"}), "a smaller share Ready fails the Kro at once, before the timeout")
	g.Expect(p.Failed[0].Reason).To(Equal("instances Ready fell from 10/10 to 8/10: WebApp team-a/shop not Ready: ResourcesNotReady; WebApp team-b/blog not Ready: NoReadyCondition"))
	g.Expect(p.Failed[0].Instances).To(Equal(&v1alpha1.InstanceCounts{Total: 10, Ready: 10}), "the baseline stays with the member")
}

// TestGateJudgesInstancesNotReady: more instances, all Ready, is no fall; one more not
// Ready is.
func TestGateJudgesInstancesNotReady(t *testing.T) {
	g := NewWithT(t)
	// More instances, all Ready: none turned not Ready.
	p := plan(g, policyOfOne(), false, gatePrev(), rolloutT0.Add(time.Minute), gateKro(health(12, 12, true)))
	g.Expect(p.Updated).To(BeEquivalentTo(1))
	g.Expect(p.Failed).To(BeEmpty())
	// 9 of 10 after 10 of 10 did fall.
	p = plan(g, policyOfOne(), false, gatePrev(), rolloutT0.Add(time.Minute), gateKro(health(10, 9, true)))
	g.Expect(kroNames(p.Failed)).To(Equal([]string{"ns/a"}))
}

func TestGateWaitsForKrosDeployment(t *testing.T) {
	g := NewWithT(t)
	k := gateKro(health(10, 10, false))
	p := plan(g, policyOfOne(), false, gatePrev(), rolloutT0.Add(time.Minute), k)
	g.Expect(p.Updated).To(BeZero(), "a Deployment that has not finished its rollout is not healthy")
	g.Expect(kroNames(p.Updating)).To(Equal([]string{"ns/a"}), "and not a failure before the timeout")
	g.Expect(p.Failed).To(BeEmpty())

	p = plan(g, policyOfOne(), false, gatePrev(), rolloutT0.Add(defaultHealthTimeout), k)
	g.Expect(kroNames(p.Failed)).To(Equal([]string{"ns/a"}))
	g.Expect(p.Failed[0].Reason).To(Equal("not healthy within 10m0s: kro's Deployment is not available: Deployment kro-system/kro: 0 of 1 replicas updated, 0 available"))
}

func TestGateNamesTheRGDsThatFell(t *testing.T) {
	g := NewWithT(t)
	prev := gatePrev()
	prev.Updating[0].RGDsReady = 3
	k := gateKro(health(10, 10, true))
	k.Status.ResourceGraphDefinitions = &v1alpha1.ResourceGraphDefinitionSummary{Total: 3, Ready: 2,
		NotReady: []v1alpha1.ResourceGraphDefinitionState{{Name: "webapp", Reason: "InvalidGraph"}}}
	p := plan(g, policyOfOne(), false, prev, rolloutT0.Add(defaultHealthTimeout), k)
	g.Expect(kroNames(p.Failed)).To(Equal([]string{"ns/a"}))
	g.Expect(p.Failed[0].Reason).To(Equal("not healthy within 10m0s: ResourceGraphDefinitions Ready fell from 3 to 2: webapp (InvalidGraph)"))
}

func TestGateWaitsForHealthOfTheRevision(t *testing.T) {
	g := NewWithT(t)
	h := health(10, 10, true)
	h.Revision = oldRev
	p := plan(g, policyOfOne(), false, gatePrev(), rolloutT0.Add(time.Minute), gateKro(h))
	g.Expect(p.Updated).To(BeZero(), "health read with another revision says nothing of this one")
	g.Expect(kroNames(p.Updating)).To(Equal([]string{"ns/a"}))
}

// TestGateTakesTheBaselineFromTheRecord: the Kro reconciler takes the instance baseline
// after the admission and records it on the HelmRelease; the status learns it from there.
func TestGateTakesTheBaselineFromTheRecord(t *testing.T) {
	g := NewWithT(t)
	prev := gatePrev()
	prev.Updating[0].Instances = nil
	view := rolloutView{kros: []v1alpha1.Kro{gateKro(health(4, 2, true))}, versionOf: map[string]string{oldRev: "v1", newRev: "v1"},
		records: map[string]releaseRecord{"ns/a": {Revision: newRev, Admission: &admissionRecord{
			Since: metav1.NewTime(rolloutT0), Instances: &v1alpha1.InstanceCounts{Total: 4, Ready: 4}}}}}
	p, err := planRollout(policyOfOne(), false, v1alpha1.VersionStatus{Version: "v1", Revision: newRev, Kros: 1}, prev, view, rolloutT0.Add(time.Minute))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(kroNames(p.Failed)).To(Equal([]string{"ns/a"}))
	g.Expect(p.Failed[0].Reason).To(HavePrefix("instances Ready fell from 4/4 to 2/4"))
	g.Expect(p.Failed[0].Instances).To(Equal(&v1alpha1.InstanceCounts{Total: 4, Ready: 4}))

	// And the HelmRelease keeps it while the status does not carry it yet.
	adm := admissionOf(prev.Updating[0])
	carryInstanceBaseline(adm, view.records["ns/a"], newRev)
	g.Expect(adm.Instances).To(Equal(&v1alpha1.InstanceCounts{Total: 4, Ready: 4}))
}

func TestInstanceAndDeploymentReadiness(t *testing.T) {
	g := NewWithT(t)
	i := &listedInstance{Status: json.RawMessage(`{"conditions":[{"type":"InstanceManaged","status":"True"},` +
		`{"type":"Ready","status":"False","reason":"ResourcesNotReady","message":"skipped"}],"other":{"large":"skipped"}}`)}
	ready, reason := instanceReady(i.instanceConditions())
	g.Expect(ready).To(BeFalse())
	g.Expect(reason).To(Equal("ResourcesNotReady"))
	_, reason = instanceReady((&listedInstance{}).instanceConditions())
	g.Expect(reason).To(Equal("NoReadyCondition"))
	_, reason = instanceReady((&listedInstance{Status: json.RawMessage(`{"conditions":"not a list"}`)}).instanceConditions())
	g.Expect(reason).To(Equal("NoReadyCondition"), "conditions of another shape are none")

	d := testenv.AvailableKroDeployment()
	ok, _ := deploymentDone(d)
	g.Expect(ok).To(BeTrue())
	d.Generation = 3
	ok, msg := deploymentDone(d)
	g.Expect(ok).To(BeFalse())
	g.Expect(msg).To(ContainSubstring("generation 3 not yet observed"))
	d.Status.ObservedGeneration, d.Status.UpdatedReplicas = 3, 1
	ok, _ = deploymentDone(d)
	g.Expect(ok).To(BeFalse(), "one of two replicas updated")
}

// setInstanceReady sets an instance's Ready condition as kro would (the test CRD has no
// status subresource).
func setInstanceReady(g Gomega, c client.Client, u *unstructured.Unstructured, status metav1.ConditionStatus, reason string) {
	g.Eventually(func() error {
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(u), u); err != nil {
			return err
		}
		u.Object["status"] = map[string]any{"conditions": []any{
			map[string]any{"type": "Ready", "status": string(status), "reason": reason, "message": "set by the test",
				"lastTransitionTime": time.Now().UTC().Format(time.RFC3339)},
		}}
		return c.Update(context.Background(), u)
	}, timeout, interval).Should(Succeed())
}

// TestRolloutFailsAKroWhoseInstanceTurnsNotReady (issue 21, kro's own health): the
// admitted Kro's HelmRelease turns Ready with the new revision, but one of the instances
// of a kind kro generated, Ready at the admission, is not Ready any more: the rollout
// fails the Kro and names the instance, and the next Kro keeps the old values.
func TestRolloutFailsAKroWhoseInstanceTurnsNotReady(t *testing.T) {
	g := withClusters(t)
	ctx := context.Background()
	rgd := uniq("shop")
	kind := "Shop" + rgd[len(rgd)-6:]
	instance := kroKind(t, g, controlPlane.Client, kind, rgd)
	instance.SetName(uniq("shop"))
	g.Expect(controlPlane.Client.Create(ctx, instance)).To(Succeed())
	t.Cleanup(func() { _ = controlPlane.Client.Delete(context.Background(), instance) })
	setInstanceReady(g, controlPlane.Client, instance, metav1.ConditionTrue, "AllResourcesReady")

	kros, v, _, after := changeUnderRollout(t, g)
	first, key := kros[0], client.ObjectKeyFromObject(kros[0]).String()
	g.Eventually(func(g Gomega) {
		vs := versionStatus(g, v.Version)
		g.Expect(kroNames(vs.Updating)).To(Equal([]string{key}))
		g.Expect(vs.Updating[0].Instances).NotTo(BeNil(), "the baseline is taken")
		g.Expect(vs.Updating[0].Instances.Ready).To(Equal(vs.Updating[0].Instances.Total))
		g.Expect(valuesOf(g, first)).To(ContainSubstring("debug"))
	}, timeout, interval).Should(Succeed())
	g.Expect(getHelmRelease(g, first).Annotations[v1alpha1.AnnotationRolloutAdmission]).To(ContainSubstring(`"instances"`),
		"the baseline is recorded on the HelmRelease, to survive a lost status")

	// kro's upgrade leaves the instance not Ready; helm-controller reports the upgrade done.
	setInstanceReady(g, controlPlane.Client, instance, metav1.ConditionFalse, "ResourcesNotReady")
	fluxReady(g, getHelmRelease(g, first), metav1.ConditionTrue, "Helm upgrade succeeded")
	g.Eventually(func(g Gomega) { g.Expect(getKro(g, first).Status.Revision).To(Equal(after)) }, timeout, interval).Should(Succeed())

	want := kind + " default/" + instance.GetName() + " not Ready: ResourcesNotReady"
	g.Eventually(func(g Gomega) {
		vs := versionStatus(g, v.Version)
		g.Expect(kroNames(vs.Failed)).To(Equal([]string{key}), "status %+v, Kro's health %+v", vs, getKro(g, first).Status.RolloutHealth)
		g.Expect(vs.Failed[0].Reason).To(HavePrefix("instances Ready fell from "))
		g.Expect(vs.Failed[0].Reason).To(ContainSubstring(want))
		g.Expect(vs.Rollout).To(Equal(v1alpha1.RolloutPaused))
	}, timeout, interval).Should(Succeed())
	g.Consistently(func(g Gomega) { g.Expect(valuesOf(g, kros[1])).To(ContainSubstring(`"info"`)) }).
		WithTimeout(time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
}

func policyOfOne() *v1alpha1.RolloutPolicy {
	return &v1alpha1.RolloutPolicy{MaxUnavailable: ptr.To(intstr.FromInt32(1))}
}

// TestGateKeepsAFailedKroFailed: the next plan, with the failure in its previous status,
// does not count the Kro as updated while its instances are still down.
func TestGateKeepsAFailedKroFailed(t *testing.T) {
	g := NewWithT(t)
	k := gateKro(health(10, 8, true))
	p := plan(g, policyOfOne(), false, gatePrev(), rolloutT0.Add(time.Minute), k)
	g.Expect(kroNames(p.Failed)).To(Equal([]string{"ns/a"}))
	p = plan(g, policyOfOne(), false, &p.VersionStatus, rolloutT0.Add(2*time.Minute), k)
	g.Expect(kroNames(p.Failed)).To(Equal([]string{"ns/a"}))
	g.Expect(p.Updated).To(BeZero())
	// Its instances are back: it counts as updated, as a failed Kro that recovers does.
	p = plan(g, policyOfOne(), false, &p.VersionStatus, rolloutT0.Add(3*time.Minute), gateKro(health(10, 10, true)))
	g.Expect(p.Failed).To(BeEmpty())
	g.Expect(p.Updated).To(BeEquivalentTo(1))
}

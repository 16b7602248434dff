package controllers

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
)

// The health gate judges the instances that were there before the upgrade: one a tenant
// creates during the upgrade has not had its time to become Ready (issue 31, point 8).

// TestGateDoesNotJudgeNewInstances: 10 of 10 Ready at the admission, and an eleventh
// instance created since that is not Ready yet: the Kro is updated, not failed.
func TestGateDoesNotJudgeNewInstances(t *testing.T) {
	g := NewWithT(t)
	h := health(10, 10, true)
	h.NewInstances = &v1alpha1.InstanceCounts{Total: 1}
	p := plan(g, policyOfOne(), false, gatePrev(), rolloutT0.Add(time.Minute), gateKro(h))
	g.Expect(p.Failed).To(BeEmpty())
	g.Expect(p.Updated).To(BeEquivalentTo(1))
}

// TestGateCountsInstancesThatTurnedNotReady: what fails a Kro is more of the old
// instances not Ready than at the admission; deleting instances fails nothing.
func TestGateCountsInstancesThatTurnedNotReady(t *testing.T) {
	g := NewWithT(t)
	prev := func(total, ready int32) *v1alpha1.VersionStatus {
		p := gatePrev()
		p.Updating[0].Instances = &v1alpha1.InstanceCounts{Total: total, Ready: ready}
		return p
	}
	for _, c := range []struct {
		base, now [2]int32 // total, ready
		fails     bool
	}{
		{[2]int32{10, 10}, [2]int32{9, 9}, false}, // a Ready one deleted
		{[2]int32{10, 9}, [2]int32{9, 8}, false},  // a Ready one deleted: a smaller share Ready, and no regression
		{[2]int32{10, 8}, [2]int32{7, 6}, false},  // two deleted, one of them not Ready: 1 not Ready after 2
		{[2]int32{10, 8}, [2]int32{10, 7}, true},  // one more not Ready
		{[2]int32{10, 8}, [2]int32{9, 6}, true},   // a Ready one deleted, another turned not Ready
		{[2]int32{10, 10}, [2]int32{10, 9}, true},
	} {
		h := health(c.now[0], c.now[1], true)
		p := plan(g, policyOfOne(), false, prev(c.base[0], c.base[1]), rolloutT0.Add(time.Minute), gateKro(h))
		if c.fails {
			g.Expect(kroNames(p.Failed)).To(Equal([]string{"ns/a"}), "%v → %v", c.base, c.now)
		} else {
			g.Expect(p.Failed).To(BeEmpty(), "%v → %v", c.base, c.now)
			g.Expect(p.Updated).To(BeEquivalentTo(1), "%v → %v", c.base, c.now)
		}
	}
}

// TestCountInstanceSetsNewOnesApart: an instance created after the admission is counted
// in NewInstances and not named; one of the admission's second is an old one.
func TestCountInstanceSetsNewOnesApart(t *testing.T) {
	g := NewWithT(t)
	since := rolloutT0
	at := func(name string, created time.Time) *listedInstance {
		i := &listedInstance{}
		i.Metadata.Namespace, i.Metadata.Name = "team-a", name
		i.Metadata.CreationTimestamp = metav1.NewTime(created)
		return i
	}
	h := &v1alpha1.RolloutHealth{}
	countInstance(h, "Shop", at("old", since.Add(-time.Hour)), since)
	countInstance(h, "Shop", at("same-second", since), since)
	countInstance(h, "Shop", at("new", since.Add(time.Second)), since)
	g.Expect(h.Instances).To(Equal(v1alpha1.InstanceCounts{Total: 2}))
	g.Expect(h.NewInstances).To(Equal(&v1alpha1.InstanceCounts{Total: 1}))
	g.Expect(h.NotReady).To(HaveLen(2))
	g.Expect(h.NotReady[1].Name).To(Equal("same-second"))
}

// TestANewInstanceDoesNotFailARollout, against real API servers: instance A is Ready on
// the ControlPlane. The first Kro is admitted; once its baseline is taken, the tenant
// creates instance B, not Ready yet, and the upgrade succeeds: the Kro is updated, not
// failed, and the next one is admitted. Its baseline counts B, created before its
// admission; then A, Ready at that baseline, turns not Ready: the second Kro fails and
// the rollout pauses.
func TestANewInstanceDoesNotFailARollout(t *testing.T) {
	g := withClusters(t)
	ctx := context.Background()
	rgd := uniq("shop")
	kind := "Shop" + rgd[len(rgd)-6:]
	a := kroKind(t, g, controlPlane.Client, kind, rgd)
	b := a.DeepCopy()
	a.SetName(uniq("a"))
	g.Expect(controlPlane.Client.Create(ctx, a)).To(Succeed())
	t.Cleanup(func() { _ = controlPlane.Client.Delete(context.Background(), a) })
	setInstanceReady(g, controlPlane.Client, a, metav1.ConditionTrue, "AllResourcesReady")

	kros, v, _, after := changeUnderRollout(t, g)
	first, second := client.ObjectKeyFromObject(kros[0]).String(), client.ObjectKeyFromObject(kros[1]).String()
	var since time.Time
	g.Eventually(func(g Gomega) {
		vs := versionStatus(g, v.Version)
		g.Expect(kroNames(vs.Updating)).To(Equal([]string{first}))
		g.Expect(vs.Updating[0].Instances).To(Equal(&v1alpha1.InstanceCounts{Total: 1, Ready: 1}), "the baseline is taken")
		g.Expect(valuesOf(g, kros[0])).To(ContainSubstring("debug"))
		since = vs.Updating[0].Since.Time
	}, timeout, interval).Should(Succeed())

	// B is created a second after the admission at least (both are kept to the second),
	// and is not Ready: kro has not processed it yet.
	time.Sleep(time.Until(since.Add(1100 * time.Millisecond)))
	b.SetName(uniq("b"))
	g.Expect(controlPlane.Client.Create(ctx, b)).To(Succeed())
	t.Cleanup(func() { _ = controlPlane.Client.Delete(context.Background(), b) })
	fluxReady(g, getHelmRelease(g, kros[0]), metav1.ConditionTrue, "Helm upgrade succeeded")
	g.Eventually(func(g Gomega) {
		k := getKro(g, kros[0])
		g.Expect(k.Status.Revision).To(Equal(after))
		vs := versionStatus(g, v.Version)
		g.Expect(vs.Failed).To(BeEmpty(), "status %+v, Kro's health %+v", vs, k.Status.RolloutHealth)
		g.Expect(vs.Updated).To(BeEquivalentTo(1))
		g.Expect(kroNames(vs.Updating)).To(Equal([]string{second}))
		g.Expect(vs.Updating[0].Instances).To(Equal(&v1alpha1.InstanceCounts{Total: 2, Ready: 1}), "B counts for the Kro admitted after it")
		g.Expect(valuesOf(g, kros[1])).To(ContainSubstring("debug"))
	}, timeout, interval).Should(Succeed())
	h := getKro(g, kros[0]).Status.RolloutHealth
	if h != nil && h.Revision == after { // the first Kro's last health read, if it is still gated
		g.Expect(h.NewInstances).To(Equal(&v1alpha1.InstanceCounts{Total: 1}))
	}

	// A, Ready at the second Kro's baseline, turns not Ready with its upgrade.
	setInstanceReady(g, controlPlane.Client, a, metav1.ConditionFalse, "ResourcesNotReady")
	fluxReady(g, getHelmRelease(g, kros[1]), metav1.ConditionTrue, "Helm upgrade succeeded")
	want := kind + " default/" + a.GetName() + " not Ready: ResourcesNotReady"
	g.Eventually(func(g Gomega) {
		vs := versionStatus(g, v.Version)
		g.Expect(kroNames(vs.Failed)).To(Equal([]string{second}), "status %+v, Kro's health %+v", vs, getKro(g, kros[1]).Status.RolloutHealth)
		g.Expect(vs.Failed[0].Reason).To(HavePrefix("instances Ready fell from 1/2 to 0/2"))
		g.Expect(vs.Failed[0].Reason).To(ContainSubstring(want))
		g.Expect(vs.Rollout).To(Equal(v1alpha1.RolloutPaused))
	}, timeout, interval).Should(Succeed())
}

package controllers

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/rollout/rollouttest"
)

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
		g.Expect(rollouttest.MemberNames(vs.Updating)).To(Equal([]string{key}))
		g.Expect(vs.Updating[0].Instances).NotTo(BeNil(), "the baseline is taken")
		g.Expect(vs.Updating[0].Instances.Ready).To(Equal(vs.Updating[0].Instances.Total))
		g.Expect(valuesOf(g, first)).To(ContainSubstring("debug"))
	}, timeout, interval).Should(Succeed())
	g.Expect(getHelmRelease(g, first).Annotations[v1alpha1.AnnotationRolloutAdmission]).To(ContainSubstring(`"instances"`),
		"the baseline is recorded on the HelmRelease, to survive a lost status")
	eventuallyCondition(g, first, v1alpha1.ConditionRolloutHealthObserved, metav1.ConditionTrue, v1alpha1.ReasonReconcileSuccess, "status.rolloutHealth")

	// kro's upgrade leaves the instance not Ready; helm-controller reports the upgrade done.
	setInstanceReady(g, controlPlane.Client, instance, metav1.ConditionFalse, "ResourcesNotReady")
	fluxReady(g, getHelmRelease(g, first), metav1.ConditionTrue, "Helm upgrade succeeded")
	g.Eventually(func(g Gomega) { g.Expect(getKro(g, first).Status.Revision).To(Equal(after)) }, timeout, interval).Should(Succeed())

	want := kind + " default/" + instance.GetName() + " not Ready: ResourcesNotReady"
	g.Eventually(func(g Gomega) {
		vs := versionStatus(g, v.Version)
		g.Expect(rollouttest.MemberNames(vs.Failed)).To(Equal([]string{key}), "status %+v, Kro's health %+v", vs, getKro(g, first).Status.RolloutHealth)
		g.Expect(vs.Failed[0].Reason).To(HavePrefix("instances Ready fell from "))
		g.Expect(vs.Failed[0].Reason).To(ContainSubstring(want))
		g.Expect(vs.Rollout).To(Equal(v1alpha1.RolloutPaused))
	}, timeout, interval).Should(Succeed())
	g.Consistently(func(g Gomega) { g.Expect(valuesOf(g, kros[1])).To(ContainSubstring(`"info"`)) }).
		WithTimeout(time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
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
		g.Expect(rollouttest.MemberNames(vs.Updating)).To(Equal([]string{first}))
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
		g.Expect(rollouttest.MemberNames(vs.Updating)).To(Equal([]string{second}))
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
		g.Expect(rollouttest.MemberNames(vs.Failed)).To(Equal([]string{second}), "status %+v, Kro's health %+v", vs, getKro(g, kros[1]).Status.RolloutHealth)
		g.Expect(vs.Failed[0].Reason).To(HavePrefix("instances Ready fell from 1/2 to 0/2"))
		g.Expect(vs.Failed[0].Reason).To(ContainSubstring(want))
		g.Expect(vs.Rollout).To(Equal(v1alpha1.RolloutPaused))
	}, timeout, interval).Should(Succeed())
}

package controllers

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/rollout"
	"github.com/openmcp-project/service-provider-kro/controllers/rollout/rollouttest"
)

// spec.rollout.plan against real API servers: a change is planned, nothing moves, and
// the approval admits the Kros in the planned order.

// providerConfigEvents are the notes of the ProviderConfig's events of a reason.
func providerConfigEvents(g Gomega, reason string) []string {
	list := &eventsv1.EventList{}
	g.Expect(platform.Client.List(context.Background(), list, client.InNamespace(metav1.NamespaceDefault))).To(Succeed())
	var out []string
	for _, e := range list.Items {
		if e.Regarding.Kind == "ProviderConfig" && e.Regarding.Name == providerName && e.Reason == reason {
			out = append(out, e.Note)
		}
	}
	return out
}

func plannedKroNames(plan *v1alpha1.PlannedRollout) []string {
	if plan == nil {
		return nil
	}
	return rollouttest.PlannedNames(plan)
}

// TestAPlanIsShownThenApproved: under plan: true a change of the helmValues, then of the
// chart version, admits nobody; the status shows the plan of the last change (canary
// first), and the approval admits the Kros one at a time in that order.
func TestAPlanIsShownThenApproved(t *testing.T) {
	g := withClusters(t)
	label := func(kros []*v1alpha1.Kro) { labelNamespace(g, kros[2], `{"ring":"canary"}`) }
	policy := &v1alpha1.RolloutPolicy{Plan: true, MaxUnavailable: ptr.To(intstr.FromInt32(1)),
		Canary: &metav1.LabelSelector{MatchLabels: map[string]string{"ring": "canary"}}}
	kros, v, before, first := changeUnderPolicy(t, g, policy, label)
	g.Eventually(func(g Gomega) {
		vs := versionStatus(g, v.Version)
		g.Expect(vs.Rollout).To(Equal(v1alpha1.RolloutPlanned))
		g.Expect(vs.Plan).NotTo(BeNil())
		g.Expect(vs.Plan.Revision).To(Equal(first))
	}, timeout, interval).Should(Succeed())

	// The artifacts change again while planned: the plan is made anew, for the new revision.
	v.ChartVersion = "0.9.4"
	offerVersion(g, v)
	after, err := rollout.RevisionName(providerName, &v)
	g.Expect(err).NotTo(HaveOccurred())
	order := []string{client.ObjectKeyFromObject(kros[2]).String(), client.ObjectKeyFromObject(kros[0]).String(), client.ObjectKeyFromObject(kros[1]).String()}
	g.Eventually(func(g Gomega) {
		vs := versionStatus(g, v.Version)
		g.Expect(vs.Revision).To(Equal(after))
		g.Expect(vs.Rollout).To(Equal(v1alpha1.RolloutPlanned))
		g.Expect(vs.Updating).To(BeEmpty())
		g.Expect(vs.Plan).NotTo(BeNil())
		g.Expect(vs.Plan.Revision).To(Equal(after))
		g.Expect(vs.Plan.From).To(Equal(before))
		g.Expect(plannedKroNames(vs.Plan)).To(Equal(order), "the canary first, then by name")
		g.Expect(vs.Plan.Kros[0].Canary).To(BeTrue())
		var rgds int32
		for i, k := range []*v1alpha1.Kro{kros[2], kros[0], kros[1]} {
			if s := getKro(g, k).Status.ResourceGraphDefinitions; s != nil {
				rgds += s.Total
				g.Expect(vs.Plan.Kros[i].RGDs).To(HaveValue(Equal(s.Total)))
			}
		}
		g.Expect(vs.Plan.RGDs).To(Equal(rgds))
		g.Expect(vs.Plan.Changes).To(Equal("chart 0.9.3 → 0.9.4; values: ~config.logLevel"))
		g.Expect(vs.Plan.Summary).To(HavePrefix(v.Version + ": 3 Kros (1 canary)"))
		g.Expect(vs.Message).To(HavePrefix("planned"))
	}, timeout, interval).Should(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(providerConfigEvents(g, "RolloutPlanned")).To(ContainElement(ContainSubstring(v.Version + ": 3 Kros")))
	}, timeout, interval).Should(Succeed())

	// Nothing moves while planned: the HelmReleases and OCIRepositories keep the old
	// artifacts, and the Kros say why.
	gens := map[string]int64{}
	for _, k := range kros {
		gens[k.Name] = getHelmRelease(g, k).Generation
		eventuallyCondition(g, k, v1alpha1.ConditionVersionResolved, metav1.ConditionTrue, v1alpha1.ReasonRolloutPending, before, after)
	}
	g.Consistently(func(g Gomega) {
		for _, k := range kros {
			g.Expect(valuesOf(g, k)).To(ContainSubstring(`"info"`), k.Name)
			g.Expect(getHelmRelease(g, k).Generation).To(Equal(gens[k.Name]), k.Name)
			g.Expect(getOCIRepository(g, k).Spec.Reference.Tag).To(Equal("0.9.3"), k.Name)
		}
		g.Expect(versionStatus(g, v.Version).Rollout).To(Equal(v1alpha1.RolloutPlanned))
	}).WithTimeout(3 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())

	// Approved: admitted one at a time in the planned order.
	approved := policy.DeepCopy()
	approved.Plan = false
	setRollout(t, g, approved)
	for i, key := range order {
		k := map[string]*v1alpha1.Kro{order[0]: kros[2], order[1]: kros[0], order[2]: kros[1]}[key]
		g.Eventually(func(g Gomega) {
			vs := versionStatus(g, v.Version)
			g.Expect(vs.Rollout).To(Equal(v1alpha1.RolloutProgressing))
			g.Expect(rollouttest.MemberNames(vs.Updating)).To(Equal([]string{key}))
			g.Expect(getOCIRepository(g, k).Spec.Reference.Tag).To(Equal("0.9.4"))
		}, timeout, interval).Should(Succeed())
		for _, later := range order[i+1:] {
			other := map[string]*v1alpha1.Kro{order[0]: kros[2], order[1]: kros[0], order[2]: kros[1]}[later]
			g.Expect(valuesOf(g, other)).To(ContainSubstring(`"info"`), "%s is admitted after %s", later, key)
		}
		fluxReady(g, getOCIRepository(g, k), metav1.ConditionTrue, "stored artifact")
		fluxReady(g, getHelmRelease(g, k), metav1.ConditionTrue, "Helm upgrade succeeded")
		g.Eventually(func(g Gomega) { g.Expect(getKro(g, k).Status.Revision).To(Equal(after)) }, timeout, interval).Should(Succeed())
	}
	g.Eventually(func(g Gomega) {
		vs := versionStatus(g, v.Version)
		g.Expect(vs.Rollout).To(Equal(v1alpha1.RolloutComplete))
		g.Expect(vs.Updated).To(BeEquivalentTo(3))
		g.Expect(vs.Plan).To(BeNil(), "no Kro waits: the plan is done")
	}, timeout, interval).Should(Succeed())
	g.Expect(providerConfigEvents(g, "RolloutApproved")).NotTo(BeEmpty())
}

package controllers

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/rollout/rollouttest"
)

// Canaries are chosen by the labels of a Kro's Namespace, which the platform team sets,
// never by the Kro's own labels, which its tenant writes (issue 31, point 8).

// TestATenantCannotSteerTheCanaries, against real API servers: the tenant of one Kro
// labels it ring=canary, the tenant of another, whose Namespace the platform labelled
// ring=canary, labels its Kro ring=stable. The plan, and the rollout once approved, take
// the Namespace's word; relabelling the Namespaces changes the plan at once.
func TestATenantCannotSteerTheCanaries(t *testing.T) {
	g := withClusters(t)
	ctx := context.Background()
	tenantLabels := func(k *v1alpha1.Kro, labels string) {
		g.Expect(onboarding.Client.Patch(ctx, k, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":`+labels+`}}`)))).To(Succeed())
	}
	prepare := func(kros []*v1alpha1.Kro) {
		tenantLabels(kros[0], `{"ring":"canary"}`)
		tenantLabels(kros[2], `{"ring":"stable"}`)
		labelNamespace(g, kros[2], `{"ring":"canary"}`)
	}
	policy := &v1alpha1.RolloutPolicy{Plan: true, MaxUnavailable: ptr.To(intstr.FromInt32(2)), Canary: rollouttest.RingCanary()}
	kros, v, _, _ := changeUnderPolicy(t, g, policy, prepare)
	key := func(i int) string { return client.ObjectKeyFromObject(kros[i]).String() }
	planIs := func(order []int, canaries ...bool) {
		t.Helper()
		g.Eventually(func(g Gomega) {
			vs := versionStatus(g, v.Version)
			g.Expect(vs.Rollout).To(Equal(v1alpha1.RolloutPlanned))
			g.Expect(vs.Plan).NotTo(BeNil())
			var names []string
			var flags []bool
			for _, pk := range vs.Plan.Kros {
				names, flags = append(names, pk.Kro), append(flags, pk.Canary)
			}
			want := make([]string, 0, len(order))
			for _, i := range order {
				want = append(want, key(i))
			}
			g.Expect(names).To(Equal(want))
			g.Expect(flags).To(Equal(canaries))
		}, timeout, interval).Should(Succeed())
	}
	planIs([]int{2, 0, 1}, true, false, false)

	// The platform moves the label: the plan follows the Namespaces, not the Kros.
	labelNamespace(g, kros[2], `{"ring":null}`)
	labelNamespace(g, kros[0], `{"ring":"canary"}`)
	planIs([]int{0, 1, 2}, true, true, false)
	labelNamespace(g, kros[0], `{"ring":null}`)
	labelNamespace(g, kros[2], `{"ring":"canary"}`)
	planIs([]int{2, 0, 1}, true, false, false)

	// Approved: the canary goes alone, though maxUnavailable leaves room for two.
	approved := *policy
	approved.Plan = false
	setRollout(t, g, &approved)
	g.Eventually(func(g Gomega) {
		vs := versionStatus(g, v.Version)
		g.Expect(rollouttest.MemberNames(vs.Updating)).To(Equal([]string{key(2)}))
		g.Expect(vs.Message).To(ContainSubstring("1 Kros carry labels of their own that spec.rollout.canary matches"))
		g.Expect(vs.Message).To(ContainSubstring(key(0)))
		g.Expect(valuesOf(g, kros[2])).To(ContainSubstring("debug"))
	}, timeout, interval).Should(Succeed())
	g.Consistently(func(g Gomega) {
		g.Expect(valuesOf(g, kros[0])).To(ContainSubstring(`"info"`), "the Kro that labelled itself a canary waits")
		g.Expect(rollouttest.MemberNames(versionStatus(g, v.Version).Updating)).To(Equal([]string{key(2)}))
	}).WithTimeout(2 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
}

package rollout

import (
	"testing"

	. "github.com/onsi/gomega"

	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/rollout/rollouttest"
)

// TestATenantsOwnLabelsMakeNoCanary: a Kro that labels itself ring=canary is no canary,
// and one in the canaries' Namespace that labels itself otherwise stays one; the
// version's message names the Kro whose labels would have made it one.
func TestATenantsOwnLabelsMakeNoCanary(t *testing.T) {
	g := NewWithT(t)
	policy := &v1alpha1.RolloutPolicy{MaxUnavailable: ptr.To(intstr.FromInt32(2)), Canary: rollouttest.RingCanary()}
	self := rollouttest.Kro("a", rollouttest.OldRev, true, "ring", "canary")
	exempt := rollouttest.CanaryKro("z", rollouttest.OldRev, true, "ring", "stable")
	p := plan(g, policy, false, nil, rollouttest.T0, self, rollouttest.Kro("b", rollouttest.OldRev, true), exempt)
	g.Expect(rollouttest.MemberNames(p.Updating)).To(Equal([]string{"ring-canary/z"}), "only the canary of the platform's choice, though there is room for two")
	g.Expect(p.Message).To(ContainSubstring("1 Kros carry labels of their own that spec.rollout.canary matches, which make no canary (it selects the labels of a Kro's Namespace): ns/a"))

	// A Namespace the cache does not know (yet) has no labels: its Kros are no canaries.
	lost := rollouttest.Kro("c", rollouttest.OldRev, true)
	lost.Namespace = "unknown"
	p = plan(g, policy, false, nil, rollouttest.T0, lost, rollouttest.Kro("b", rollouttest.OldRev, true))
	g.Expect(rollouttest.MemberNames(p.Updating)).To(Equal([]string{"ns/b", "unknown/c"}), "no canary: both go, in name order")
}

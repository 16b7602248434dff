package rollout

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/rollout/rollouttest"
)

// The health gate judges the instances that were there before the upgrade: one a tenant
// creates during the upgrade has not had its time to become Ready (issue 31, point 8).

// TestGateDoesNotJudgeNewInstances: 10 of 10 Ready at the admission, and an eleventh
// instance created since that is not Ready yet: the Kro is updated, not failed.
func TestGateDoesNotJudgeNewInstances(t *testing.T) {
	g := NewWithT(t)
	h := health(10, 10, true)
	h.NewInstances = &v1alpha1.InstanceCounts{Total: 1}
	p := plan(g, policyOfOne(), false, gatePrev(), rollouttest.T0.Add(time.Minute), gateKro(h))
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
		p := plan(g, policyOfOne(), false, prev(c.base[0], c.base[1]), rollouttest.T0.Add(time.Minute), gateKro(h))
		if c.fails {
			g.Expect(rollouttest.MemberNames(p.Failed)).To(Equal([]string{"ns/a"}), "%v → %v", c.base, c.now)
		} else {
			g.Expect(p.Failed).To(BeEmpty(), "%v → %v", c.base, c.now)
			g.Expect(p.Updated).To(BeEquivalentTo(1), "%v → %v", c.base, c.now)
		}
	}
}

package controllers

import (
	"testing"

	. "github.com/onsi/gomega"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/rollout/rollouttest"
)

func TestRolloutEventsOfAPlan(t *testing.T) {
	g := NewWithT(t)
	plan := &v1alpha1.PlannedRollout{Revision: rollouttest.NewRev, Summary: "v1: 2 Kros, 0 RGDs; chart 0.9.3 → 0.9.4"}
	planning := v1alpha1.VersionStatus{Version: "v1", Revision: rollouttest.NewRev, Rollout: v1alpha1.RolloutPlanned, Plan: plan}
	evs := rolloutEvents([]v1alpha1.VersionStatus{{Version: "v1", Revision: rollouttest.OldRev, Rollout: v1alpha1.RolloutComplete}}, []v1alpha1.VersionStatus{planning})
	g.Expect(evs).To(ConsistOf(HaveField("Reason", "RolloutPlanned")))
	g.Expect(evs[0].Note).To(ContainSubstring("chart 0.9.3 → 0.9.4"))
	g.Expect(rolloutEvents([]v1alpha1.VersionStatus{planning}, []v1alpha1.VersionStatus{planning})).To(BeEmpty())
	evs = rolloutEvents([]v1alpha1.VersionStatus{planning}, []v1alpha1.VersionStatus{{Version: "v1", Revision: rollouttest.NewRev, Rollout: v1alpha1.RolloutProgressing}})
	g.Expect(evs).To(ConsistOf(HaveField("Reason", "RolloutApproved")))
}

package rollout

import (
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/rollout/rollouttest"
)

// A version's status lists at most maxMembers Kros as updating and as failed (the CRD's
// MaxItems): the rollout admits no more, and counts the failed beyond the list.

// TestUnavailableKrosAreAdmittedNoMoreThanTheStatusLists: 1,200 unavailable Kros wait,
// which cost no availability; 1,000 are admitted, the rest wait for the next reconcile.
func TestUnavailableKrosAreAdmittedNoMoreThanTheStatusLists(t *testing.T) {
	g := NewWithT(t)
	var kros []v1alpha1.Kro
	for i := range 1200 {
		kros = append(kros, rollouttest.Kro(fmt.Sprintf("k%04d", i), rollouttest.OldRev, false))
	}
	policy := &v1alpha1.RolloutPolicy{MaxUnavailable: ptr.To(intstr.FromString("100%"))}
	p := planWith(g, policy, nil, map[string]Record{}, rollouttest.T0, kros...)
	g.Expect(p.Updating).To(HaveLen(1000))
	g.Expect(p.Updating[0].Unavailable).To(BeTrue())
}

// TestFailuresBeyondTheListAreCounted: 1,005 Kros recorded as failed; the status lists
// 1,000 and counts 5 more, all of which count towards failureThreshold and the message;
// an unlisted one keeps its failure on record.
func TestFailuresBeyondTheListAreCounted(t *testing.T) {
	g := NewWithT(t)
	var kros []v1alpha1.Kro
	records := map[string]Record{}
	for i := range 1005 {
		k := rollouttest.Kro(fmt.Sprintf("k%04d", i), rollouttest.OldRev, true)
		kros = append(kros, k)
		records[KroKey(&k)] = admittedRecord(rollouttest.NewRev, rollouttest.T0, "upgrade failed")
	}
	policy := &v1alpha1.RolloutPolicy{MaxUnavailable: ptr.To(intstr.FromString("100%")), FailureThreshold: ptr.To(int32(1003))}
	p := planWith(g, policy, nil, records, rollouttest.T0.Add(time.Minute), kros...)
	g.Expect(p.Failed).To(HaveLen(1000))
	g.Expect(p.FailedMore).To(BeEquivalentTo(5))
	g.Expect(p.Rollout).To(Equal(v1alpha1.RolloutPaused), "1,005 failed reach a threshold of 1,003")
	g.Expect(p.Message).To(HavePrefix("paused: 1005 Kros failed"))
	g.Expect(p.Message).To(ContainSubstring("and 1000 more"))

	pc := &v1alpha1.ProviderConfig{Status: v1alpha1.ProviderConfigStatus{Versions: []v1alpha1.VersionStatus{p.VersionStatus}}}
	unlisted := "ns/k1004"
	g.Expect(NextRecord(pc, "v1", rollouttest.NewRev, unlisted, records[unlisted]).Failed).To(Equal("upgrade failed"))
}

package flux_test

import (
	"testing"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	"github.com/fluxcd/pkg/apis/meta"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/openmcp-project/service-provider-kro/controllers/flux"
)

// TestForceStuckRelease: the provider asks helm-controller for a forced upgrade only of a
// HelmRelease that has said "Running 'install' action" for longer than its timeout
// while its newest release is deployed with the wanted chart (fluxcd/helm-controller#1409),
// once per episode, keeps its own request and never someone else's.
func TestForceStuckRelease(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	since := now.Add(-6 * time.Minute) // past the default timeout of 5m and the margin
	episode := "stuck-release/" + since.Format(time.RFC3339)
	deployed := helmv2.Snapshots{{Version: 1, Status: "deployed", ChartName: "kro", ChartVersion: "0.9.4+1c7c5a1b0f4b"}}
	stuck := func(mutate func(*helmv2.HelmRelease)) *helmv2.HelmRelease {
		hr := &helmv2.HelmRelease{}
		hr.Status.Conditions = []metav1.Condition{{Type: meta.ReadyCondition, Status: metav1.ConditionUnknown, Reason: meta.ProgressingReason,
			Message: "Running 'install' action with timeout of 5m0s", LastTransitionTime: metav1.NewTime(since)}}
		hr.Status.History = deployed
		if mutate != nil {
			mutate(hr)
		}
		return hr
	}
	requested := func(value string) func(*helmv2.HelmRelease) {
		return func(hr *helmv2.HelmRelease) {
			hr.Annotations = map[string]string{meta.ReconcileRequestAnnotation: value, meta.ForceRequestAnnotation: value}
		}
	}

	for _, tc := range []struct {
		name      string
		current   *helmv2.HelmRelease
		wanted    string
		request   string // the request desired carries afterwards, "" none
		asks      bool   // a new request, reported
		lookAgain time.Time
	}{
		{name: "stuck past its timeout", current: stuck(nil), wanted: "0.9.4", request: episode, asks: true},
		{name: "stuck, asked before: kept, not asked again", current: stuck(requested(episode)), wanted: "0.9.4", request: episode},
		{name: "stuck again later: a new episode", current: stuck(requested("stuck-release/2026-12-07T10:00:00Z")), wanted: "0.9.4", request: episode, asks: true},
		{name: "within the timeout: looked at again when it would be stuck", wanted: "0.9.4",
			current: stuck(func(hr *helmv2.HelmRelease) {
				hr.Status.Conditions[0].LastTransitionTime = metav1.NewTime(now.Add(-time.Minute))
			}),
			lookAgain: now.Add(-time.Minute + 5*time.Minute + 30*time.Second)},
		{name: "a longer timeout of its own", wanted: "0.9.4",
			current:   stuck(func(hr *helmv2.HelmRelease) { hr.Spec.Timeout = &metav1.Duration{Duration: 10 * time.Minute} }),
			lookAgain: since.Add(10*time.Minute + 30*time.Second)},
		{name: "ready", wanted: "0.9.4", current: stuck(func(hr *helmv2.HelmRelease) {
			hr.Status.Conditions[0].Status, hr.Status.Conditions[0].Reason = metav1.ConditionTrue, "InstallSucceeded"
		})},
		{name: "ready, our earlier request kept", wanted: "0.9.4", request: episode, current: stuck(func(hr *helmv2.HelmRelease) {
			requested(episode)(hr)
			hr.Status.Conditions[0].Status, hr.Status.Conditions[0].Reason = metav1.ConditionTrue, "UpgradeSucceeded"
		})},
		{name: "failed: helm-controller remediates", wanted: "0.9.4", current: stuck(func(hr *helmv2.HelmRelease) {
			hr.Status.Conditions[0].Status, hr.Status.Conditions[0].Reason = metav1.ConditionFalse, "InstallFailed"
		})},
		{name: "an older chart deployed: an upgrade that is not in sync", wanted: "0.9.5", current: stuck(nil)},
		{name: "the newest release pending: helm-controller unlocks it", wanted: "0.9.4", current: stuck(func(hr *helmv2.HelmRelease) {
			hr.Status.History = helmv2.Snapshots{{Version: 2, Status: "pending-upgrade", ChartVersion: "0.9.4"}}
		})},
		{name: "no release yet", wanted: "0.9.4", current: stuck(func(hr *helmv2.HelmRelease) { hr.Status.History = nil })},
		{name: "someone else's request left alone", wanted: "0.9.4", current: stuck(func(hr *helmv2.HelmRelease) {
			requested("2026-12-07T11:00:00Z")(hr)
			hr.Status.Conditions[0].Status = metav1.ConditionTrue
		})},
		{name: "a reconcile request of ours without its force request is not ours", wanted: "0.9.4", current: stuck(func(hr *helmv2.HelmRelease) {
			hr.Annotations = map[string]string{meta.ReconcileRequestAnnotation: episode}
			hr.Status.Conditions[0].Status = metav1.ConditionTrue
		})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			desired := &helmv2.HelmRelease{}
			asked, lookAgain := flux.ForceStuckRelease(desired, tc.current, tc.wanted, now)
			g.Expect(desired.Annotations[meta.ReconcileRequestAnnotation]).To(Equal(tc.request))
			g.Expect(desired.Annotations[meta.ForceRequestAnnotation]).To(Equal(tc.request))
			g.Expect(asked != "").To(Equal(tc.asks), asked)
			g.Expect(lookAgain).To(BeTemporally("==", tc.lookAgain))
			if tc.asks {
				g.Expect(asked).To(ContainSubstring("revision 1 is deployed with chart 0.9.4+1c7c5a1b0f4b"))
				g.Expect(asked).To(ContainSubstring("Running 'install' action"))
			}
		})
	}

	g := NewWithT(t)
	asked, lookAgain := flux.ForceStuckRelease(&helmv2.HelmRelease{}, nil, "0.9.4", now)
	g.Expect(asked).To(BeEmpty(), "nothing to look at before the HelmRelease exists")
	g.Expect(lookAgain.IsZero()).To(BeTrue())
}

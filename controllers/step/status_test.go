package step_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/reach"
	"github.com/openmcp-project/service-provider-kro/controllers/step"
)

func allTrue() step.Observation {
	var obs step.Observation
	for _, t := range []string{v1alpha1.ConditionVersionResolved, v1alpha1.ConditionPullSecretsReady, v1alpha1.ConditionOCIRepositoryReady, v1alpha1.ConditionControlPlaneAccessReady, v1alpha1.ConditionHelmReleaseReady, v1alpha1.ConditionKroAvailable} {
		obs.Set(t, metav1.ConditionTrue, v1alpha1.ReasonReconcileSuccess, t+" ok")
	}
	obs.ChartVersion, obs.ChartObserved = "0.9.3", true
	return obs
}

func TestComputeStatus(t *testing.T) {
	g := NewWithT(t)
	t0 := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	t1 := metav1.NewTime(t0.Add(time.Hour))

	ready := step.ComputeStatus(v1alpha1.KroStatus{}, 3, allTrue(), t0)
	g.Expect(ready.Phase).To(Equal(v1alpha1.PhaseReady))
	g.Expect(ready.ObservedGeneration).To(Equal(int64(3)))
	g.Expect(ready.ChartVersion).To(Equal("0.9.3"))
	g.Expect(ready.Conditions[0].Type).To(Equal(v1alpha1.ConditionReady))
	g.Expect(ready.Conditions[0].Status).To(Equal(metav1.ConditionTrue))

	// The same observation later changes nothing, not even transition times.
	g.Expect(step.ComputeStatus(ready, 3, allTrue(), t1)).To(Equal(ready))

	// A HelmRelease that is not ready makes the Kro Progressing, with its message.
	obs := allTrue()
	obs.Set(v1alpha1.ConditionHelmReleaseReady, metav1.ConditionFalse, v1alpha1.ReasonReconcileError, "HelmRelease x is not ready: boom")
	failing := step.ComputeStatus(ready, 4, obs, t1)
	g.Expect(failing.Phase).To(Equal(v1alpha1.PhaseProgressing))
	r := step.FindCondition(failing.Conditions, v1alpha1.ConditionReady)
	g.Expect(r.Status).To(Equal(metav1.ConditionFalse))
	g.Expect(r.Reason).To(Equal(v1alpha1.ReasonReconcileError))
	g.Expect(r.Message).To(ContainSubstring("boom"))
	g.Expect(r.LastTransitionTime).To(Equal(t1))
	g.Expect(step.FindCondition(failing.Conditions, v1alpha1.ConditionVersionResolved).LastTransitionTime).To(Equal(t0))

	// kro's Deployment gone while the HelmRelease still says Ready: Ready says so, with
	// the reason of its own and the message of KroAvailable.
	obs = allTrue()
	obs.KroAvailability(false, "kro's Deployment is missing: no Deployment of Helm release kro in namespace kro-system")
	gone := step.ComputeStatus(ready, 3, obs, t1)
	g.Expect(gone.Phase).To(Equal(v1alpha1.PhaseProgressing))
	r = step.FindCondition(gone.Conditions, v1alpha1.ConditionReady)
	g.Expect(r.Status).To(Equal(metav1.ConditionFalse))
	g.Expect(r.Reason).To(Equal(v1alpha1.ReasonKroUnavailable))
	g.Expect(r.Message).To(ContainSubstring("kro's Deployment is missing"))
	g.Expect(step.TransitionEvents(ready.Conditions, gone.Conditions)).To(ContainElement(
		HaveField("Type", corev1.EventTypeWarning)), "a Warning for kro gone")

	// Without KroAvailable observed (its step did not run), no Ready either.
	obs = allTrue()
	obs.Conditions = obs.Conditions[:len(obs.Conditions)-1]
	g.Expect(step.ComputeStatus(v1alpha1.KroStatus{}, 1, obs, t0).Phase).To(Equal(v1alpha1.PhaseProgressing))

	// Without a HelmRelease condition there is no Ready.
	var partial step.Observation
	partial.Set(v1alpha1.ConditionVersionResolved, metav1.ConditionTrue, v1alpha1.ReasonReconcileSuccess, "ok")
	g.Expect(step.ComputeStatus(v1alpha1.KroStatus{}, 1, partial, t0).Phase).To(Equal(v1alpha1.PhaseProgressing))

	// Deleting: Terminating, whatever the conditions say.
	del := allTrue()
	del.Deleting = true
	del.WaitingFor = "waiting for Flux"
	term := step.ComputeStatus(ready, 5, del, t1)
	g.Expect(term.Phase).To(Equal(v1alpha1.PhaseTerminating))
	g.Expect(step.FindCondition(term.Conditions, v1alpha1.ConditionReady).Reason).To(Equal(v1alpha1.ReasonTerminating))
	g.Expect(step.FindCondition(term.Conditions, v1alpha1.ConditionReady).Message).To(ContainSubstring("waiting for Flux"))
}

func TestTransitionEvents(t *testing.T) {
	g := NewWithT(t)
	t0 := metav1.Now()
	ready := step.ComputeStatus(v1alpha1.KroStatus{}, 1, allTrue(), t0)
	evs := step.TransitionEvents(nil, ready.Conditions)
	g.Expect(evs).To(HaveLen(1), "only Ready turning True, not every step")
	g.Expect(evs[0]).To(Equal(step.KroEvent{Type: corev1.EventTypeNormal, Reason: v1alpha1.ReasonReconcileSuccess, Action: v1alpha1.ConditionReady, Note: evs[0].Note}))

	g.Expect(step.TransitionEvents(ready.Conditions, ready.Conditions)).To(BeEmpty(), "no change, no event")

	obs := allTrue()
	obs.Set(v1alpha1.ConditionPullSecretsReady, metav1.ConditionFalse, v1alpha1.ReasonReconcileError, "secret a missing")
	broken := step.ComputeStatus(ready, 1, obs, t0)
	evs = step.TransitionEvents(ready.Conditions, broken.Conditions)
	g.Expect(evs).To(HaveLen(1))
	g.Expect(evs[0].Type).To(Equal(corev1.EventTypeWarning))
	g.Expect(evs[0].Reason).To(Equal(v1alpha1.ReasonReconcileError))
	g.Expect(evs[0].Note).To(ContainSubstring("secret a missing"))

	obs.Set(v1alpha1.ConditionPullSecretsReady, metav1.ConditionFalse, v1alpha1.ReasonReconcileError, "secret a has the wrong type")
	other := step.ComputeStatus(broken, 1, obs, t0)
	g.Expect(step.TransitionEvents(broken.Conditions, other.Conditions)).To(HaveLen(1), "another problem, another event")
}

// TestSuspendedIsReportedInReady: a Flux object suspended by someone else makes Ready
// False with the reason Suspended and the step's message, and its event a Warning, once.
func TestSuspendedIsReportedInReady(t *testing.T) {
	g := NewWithT(t)
	t0 := metav1.Now()
	ready := step.ComputeStatus(v1alpha1.KroStatus{}, 1, allTrue(), t0)
	obs := allTrue()
	obs.Set(v1alpha1.ConditionHelmReleaseReady, metav1.ConditionFalse, v1alpha1.ReasonSuspended, "HelmRelease ns/kro is suspended: resume it")
	suspended := step.ComputeStatus(ready, 1, obs, t0)
	g.Expect(suspended.Phase).To(Equal(v1alpha1.PhaseProgressing))
	r := step.FindCondition(suspended.Conditions, v1alpha1.ConditionReady)
	g.Expect(r.Status).To(Equal(metav1.ConditionFalse))
	g.Expect(r.Reason).To(Equal(v1alpha1.ReasonSuspended))
	g.Expect(r.Message).To(Equal("HelmRelease ns/kro is suspended: resume it"))
	evs := step.TransitionEvents(ready.Conditions, suspended.Conditions)
	g.Expect(evs).To(HaveLen(1))
	g.Expect(evs[0]).To(Equal(step.KroEvent{Type: corev1.EventTypeWarning, Reason: v1alpha1.ReasonSuspended, Action: v1alpha1.ConditionHelmReleaseReady,
		Note: v1alpha1.ConditionHelmReleaseReady + ": HelmRelease ns/kro is suspended: resume it"}))
	g.Expect(step.TransitionEvents(suspended.Conditions, step.ComputeStatus(suspended, 1, obs, t0).Conditions)).To(BeEmpty(), "once")
}

func TestListNames(t *testing.T) {
	g := NewWithT(t)
	g.Expect(step.ListNames([]string{"a", "b"})).To(Equal("a, b"))
	var many []string
	for i := range 13 {
		many = append(many, string(rune('a'+i)))
	}
	g.Expect(step.ListNames(many)).To(Equal("a, b, c, d, e, f, g, h, i, j and 3 more"))
}

func TestFluxReadiness(t *testing.T) {
	ready := func(status metav1.ConditionStatus, generation int64, message string) []metav1.Condition {
		return []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: status, ObservedGeneration: generation, Message: message}}
	}
	for _, tc := range []struct {
		name               string
		generation, status int64
		conds              []metav1.Condition
		want               metav1.ConditionStatus
		message            string
	}{
		{"not looked at yet", 1, 0, nil, metav1.ConditionUnknown, "waiting for Flux to reconcile it"},
		{"succeeded", 2, 2, ready(metav1.ConditionTrue, 2, "stored artifact"), metav1.ConditionTrue, "stored artifact"},
		// source-controller on a failed pull: the condition is for generation 1, status.observedGeneration is not set.
		{"first reconcile failed", 1, 0, ready(metav1.ConditionFalse, 1, "failed to get credential: unauthorized"), metav1.ConditionFalse, "failed to get credential: unauthorized"},
		{"in progress for this generation", 3, 2, ready(metav1.ConditionUnknown, 3, "reconciliation in progress"), metav1.ConditionUnknown, "reconciliation in progress"},
		// helm-controller sets Ready=True before it sets status.observedGeneration.
		{"Ready for this generation, not finished", 2, 1, ready(metav1.ConditionTrue, 2, "Helm install succeeded"), metav1.ConditionUnknown, "waiting for Flux to reconcile it"},
		{"Ready of an earlier generation", 3, 2, ready(metav1.ConditionTrue, 2, "stored artifact"), metav1.ConditionUnknown, "waiting for Flux to reconcile it"},
		{"failure of an earlier generation", 3, 1, ready(metav1.ConditionFalse, 2, "unauthorized"), metav1.ConditionUnknown, "waiting for Flux to reconcile it"},
		{"condition without observedGeneration, status current", 2, 2, ready(metav1.ConditionTrue, 0, "ok"), metav1.ConditionTrue, "ok"},
		{"condition without observedGeneration, status behind", 2, 1, ready(metav1.ConditionTrue, 0, "ok"), metav1.ConditionUnknown, "waiting for Flux to reconcile it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, message := step.FluxReadiness(tc.generation, tc.status, tc.conds)
			if status != tc.want || message != tc.message {
				t.Fatalf("fluxReadiness = %s %q, want %s %q", status, message, tc.want, tc.message)
			}
		})
	}
}

// TestEveryConditionIsReported: a reconcile that stopped at a step reports every later
// condition as not checked, with why; outside a deletion DeletionBlocked is False.
func TestEveryConditionIsReported(t *testing.T) {
	g := NewWithT(t)
	t0 := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	var obs step.Observation
	obs.Set(v1alpha1.ConditionVersionResolved, metav1.ConditionFalse, v1alpha1.ReasonVersionNotOffered, "version x is not offered")
	st := step.ComputeStatus(v1alpha1.KroStatus{}, 1, obs, t0)
	g.Expect(typesOf(st.Conditions)).To(Equal(step.ConditionsOf(v1alpha1.PlacementControlPlane)))
	ready := step.FindCondition(st.Conditions, v1alpha1.ConditionReady)
	g.Expect(ready.Reason).To(Equal(v1alpha1.ReasonReconcileError), "the seed's contract: Ready=False, ReconcileError on an unknown version")
	g.Expect(ready.Message).To(Equal("version x is not offered"))
	helm := step.FindCondition(st.Conditions, v1alpha1.ConditionHelmReleaseReady)
	g.Expect(helm.Status).To(Equal(metav1.ConditionUnknown))
	g.Expect(helm.Reason).To(Equal(v1alpha1.ReasonNotChecked))
	g.Expect(helm.Message).To(Equal("not checked: VersionResolved is False (VersionNotOffered)"))
	g.Expect(step.FindCondition(st.Conditions, v1alpha1.ConditionDeletionBlocked).Status).To(Equal(metav1.ConditionFalse))
	g.Expect(step.TransitionEvents(nil, st.Conditions)).To(HaveLen(1), "only the failing step raises an event, not the steps it kept from running")

	obs.Deleting = true
	del := step.ComputeStatus(st, 1, obs, t0)
	g.Expect(step.FindCondition(del.Conditions, v1alpha1.ConditionHelmReleaseReady).Message).To(Equal("not checked: the Kro is being deleted"))
	g.Expect(step.FindCondition(del.Conditions, v1alpha1.ConditionDeletionBlocked).Reason).To(Equal(v1alpha1.ReasonNotChecked))
}

// TestRGDSummaryCarriesItsTime: the summary keeps the time it was first observed while
// its figures stay the same, takes a new one when they change, is kept as it was only
// when asked, and is removed when the RGDs were not read.
func TestRGDSummaryCarriesItsTime(t *testing.T) {
	g := NewWithT(t)
	t0 := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	t1 := metav1.NewTime(t0.Add(time.Minute))
	first := step.ReportedRGDs(nil, step.Observation{Rgds: &v1alpha1.ResourceGraphDefinitionSummary{Total: 2, Ready: 2}}, t0)
	g.Expect(first.ObservedTime).To(Equal(t0))
	same := step.ReportedRGDs(first, step.Observation{Rgds: &v1alpha1.ResourceGraphDefinitionSummary{Total: 2, Ready: 2}}, t1)
	g.Expect(same).To(Equal(first), "an idle reconcile rewrites nothing")
	changed := step.ReportedRGDs(first, step.Observation{Rgds: &v1alpha1.ResourceGraphDefinitionSummary{Total: 2, Ready: 1}}, t1)
	g.Expect(changed.ObservedTime).To(Equal(t1))
	g.Expect(step.ReportedRGDs(first, step.Observation{RgdsKeep: true}, t1)).To(Equal(first))
	g.Expect(step.ReportedRGDs(first, step.Observation{}, t1)).To(BeNil())
}

// TestAccessMissingSince: the first time the access is seen missing stays until it is
// found again; a reconcile that did not look keeps what was there.
func TestAccessMissingSince(t *testing.T) {
	g := NewWithT(t)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	k := &v1alpha1.Kro{}
	missing := &reach.NotAvailableError{Missing: true}
	var obs step.Observation
	obs.AccessMissing(k, missing, t0)
	st := step.ComputeStatus(k.Status, 1, obs, metav1.NewTime(t0))
	g.Expect(st.AccessMissingSince.Time).To(Equal(t0))

	k.Status = st
	obs = step.Observation{}
	obs.AccessMissing(k, missing, t0.Add(time.Minute))
	g.Expect(obs.AccessMissingSince.Time).To(Equal(t0), "counted from the first time")
	g.Expect(step.ComputeStatus(k.Status, 1, step.Observation{}, metav1.NewTime(t0)).AccessMissingSince.Time).To(Equal(t0), "not looked at: kept")

	obs = step.Observation{}
	obs.AccessMissing(k, &reach.NotAvailableError{Message: "does not answer"}, t0)
	g.Expect(step.ComputeStatus(k.Status, 1, obs, metav1.NewTime(t0)).AccessMissingSince).To(BeNil(), "an access that exists is not missing")
}

// TestWorkloadClusterReadyOnlyForItsPlacement: a Kro placed on a workload cluster reports
// WorkloadClusterReady (not checked when an earlier step stopped), one on its ControlPlane
// never does; status.placement is the record of where kro was placed, which the version
// never changes by itself (placement_record.go).
func TestWorkloadClusterReadyOnlyForItsPlacement(t *testing.T) {
	g := NewWithT(t)
	t0 := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	var obs step.Observation
	obs.VersionResolved(&v1alpha1.KroVersion{Version: "v1", ChartVersion: "0.9.4", Placement: v1alpha1.PlacementWorkloadCluster})
	obs.Set(v1alpha1.ConditionControlPlaneAccessReady, metav1.ConditionFalse, v1alpha1.ReasonControlPlaneUnreachable, "down")
	st := step.ComputeStatus(v1alpha1.KroStatus{}, 1, obs, t0)
	g.Expect(st.Placement).To(BeEmpty(), "nothing was placed yet")
	wc := step.FindCondition(st.Conditions, v1alpha1.ConditionWorkloadClusterReady)
	g.Expect(wc).NotTo(BeNil())
	g.Expect(wc.Reason).To(Equal(v1alpha1.ReasonNotChecked))

	st.Placement = v1alpha1.PlacementWorkloadCluster // recorded
	obs = step.Observation{}
	obs.VersionResolved(&v1alpha1.KroVersion{Version: "v1", ChartVersion: "0.9.4"})
	st = step.ComputeStatus(st, 2, obs, t0)
	g.Expect(st.Placement).To(Equal(v1alpha1.PlacementWorkloadCluster), "the version's new placement is no record of where kro is")
	g.Expect(step.FindCondition(st.Conditions, v1alpha1.ConditionWorkloadClusterReady)).To(BeNil())

	obs = step.Observation{} // the version not resolved: the placement stays as it was
	st = step.ComputeStatus(st, 3, obs, t0)
	g.Expect(st.Placement).To(Equal(v1alpha1.PlacementWorkloadCluster))
}

// TestStepConditionsKeepTheirLegacy: a step with a condition of its own reports under it,
// and its legacy condition (v1alpha1.LegacyConditionOf) carries the same failure, so that
// Ready, the legacy condition and the "not checked" messages read as before; the event
// names the step's condition, once.
func TestStepConditionsKeepTheirLegacy(t *testing.T) {
	g := NewWithT(t)
	t0 := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	var obs step.Observation
	obs.VersionResolved(&v1alpha1.KroVersion{Version: "v1", ChartVersion: "0.9.4", Placement: v1alpha1.PlacementWorkloadCluster})
	for _, typ := range []string{v1alpha1.ConditionPullSecretsReady, v1alpha1.ConditionControlPlaneAccessReady, v1alpha1.ConditionWorkloadClusterReady, v1alpha1.ConditionOCIRepositoryReady} {
		obs.Set(typ, metav1.ConditionTrue, v1alpha1.ReasonReconcileSuccess, typ+" ok")
	}
	obs.Set(v1alpha1.ConditionControlPlanePartsReady, metav1.ConditionFalse, v1alpha1.ReasonOwnershipConflict, "a Helm release owns the CRDs")
	st := step.ComputeStatus(v1alpha1.KroStatus{}, 1, obs, t0)

	g.Expect(typesOf(st.Conditions)).To(Equal(step.ConditionsOf(v1alpha1.PlacementWorkloadCluster)))
	for _, typ := range []string{v1alpha1.ConditionControlPlanePartsReady, v1alpha1.ConditionWorkloadClusterReady} {
		c := step.FindCondition(st.Conditions, typ)
		g.Expect([]string{string(c.Status), c.Reason, c.Message}).To(Equal([]string{"False", v1alpha1.ReasonOwnershipConflict, "a Helm release owns the CRDs"}), typ)
	}
	ready := step.FindCondition(st.Conditions, v1alpha1.ConditionReady)
	g.Expect([]string{ready.Reason, ready.Message}).To(Equal([]string{v1alpha1.ReasonOwnershipConflict, "a Helm release owns the CRDs"}))
	cred := step.FindCondition(st.Conditions, v1alpha1.ConditionKroCredentialReady)
	g.Expect(cred.Message).To(Equal("not checked: WorkloadClusterReady is False (OwnershipConflict)"), "the legacy condition names the stop, as before")
	events := step.TransitionEvents(nil, st.Conditions)
	g.Expect(events).To(HaveLen(1))
	g.Expect(events[0].Action).To(Equal(v1alpha1.ConditionControlPlanePartsReady), "the event names the step's own condition")
	g.Expect(events[0].Type).To(Equal(corev1.EventTypeWarning))

	// The step recovers: its condition turns True, and WorkloadClusterReady is the
	// workload cluster's own again.
	obs.Set(v1alpha1.ConditionWorkloadClusterReady, metav1.ConditionTrue, v1alpha1.ReasonReconcileSuccess, "reached")
	obs.Set(v1alpha1.ConditionControlPlanePartsReady, metav1.ConditionTrue, v1alpha1.ReasonReconcileSuccess, "applied")
	obs.Set(v1alpha1.ConditionKroCredentialReady, metav1.ConditionTrue, v1alpha1.ReasonReconcileSuccess, "current")
	obs.Set(v1alpha1.ConditionHelmReleaseReady, metav1.ConditionTrue, v1alpha1.ReasonReconcileSuccess, "installed")
	obs.KroAvailability(true, "runs")
	st = step.ComputeStatus(st, 1, obs, t0)
	g.Expect(step.FindCondition(st.Conditions, v1alpha1.ConditionReady).Status).To(Equal(metav1.ConditionTrue))
	g.Expect(step.FindCondition(st.Conditions, v1alpha1.ConditionWorkloadClusterReady).Message).To(Equal("reached"))
}

// TestOccasionalStepConditions: the rollout's health read, the move and the earlier
// provider's release report under conditions present only while they last, after the
// others; True they leave Ready alone, not True they stop it through their legacy one.
func TestOccasionalStepConditions(t *testing.T) {
	g := NewWithT(t)
	t0 := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	obs := allTrue()
	obs.Set(v1alpha1.ConditionHandOver, metav1.ConditionTrue, v1alpha1.ReasonHandingOver, "taking over")
	obs.Set(v1alpha1.ConditionEarlierReleaseSuspended, metav1.ConditionTrue, v1alpha1.ReasonReconcileSuccess, "suspended")
	obs.Set(v1alpha1.ConditionRolloutHealthObserved, metav1.ConditionTrue, v1alpha1.ReasonReconcileSuccess, "read")
	st := step.ComputeStatus(v1alpha1.KroStatus{}, 1, obs, t0)
	g.Expect(st.Phase).To(Equal(v1alpha1.PhaseReady))
	n := len(st.Conditions)
	g.Expect([]string{st.Conditions[n-3].Type, st.Conditions[n-2].Type, st.Conditions[n-1].Type}).To(Equal([]string{
		v1alpha1.ConditionRolloutHealthObserved, v1alpha1.ConditionEarlierReleaseSuspended, v1alpha1.ConditionHandOver}))
	g.Expect(step.FindCondition(st.Conditions, v1alpha1.ConditionPlacementMoved)).To(BeNil(), "no move, no condition")

	for _, tc := range []struct{ step, legacy, reason string }{
		{v1alpha1.ConditionRolloutHealthObserved, v1alpha1.ConditionControlPlaneAccessReady, v1alpha1.ReasonReconcileError},
		{v1alpha1.ConditionPlacementMoved, v1alpha1.ConditionHelmReleaseReady, v1alpha1.ReasonMovingPlacement},
		{v1alpha1.ConditionEarlierReleaseSuspended, v1alpha1.ConditionHelmReleaseReady, v1alpha1.ReasonReconciling},
	} {
		obs := allTrue()
		obs.Set(tc.step, metav1.ConditionFalse, tc.reason, tc.step+" stops")
		st := step.ComputeStatus(v1alpha1.KroStatus{}, 1, obs, t0)
		g.Expect(step.FindCondition(st.Conditions, tc.legacy).Message).To(Equal(tc.step+" stops"), tc.step)
		ready := step.FindCondition(st.Conditions, v1alpha1.ConditionReady)
		g.Expect(ready.Status).To(Equal(metav1.ConditionFalse), tc.step)
		g.Expect(ready.Message).To(Equal(tc.step+" stops"), tc.step)
		events := step.TransitionEvents(st.Conditions, st.Conditions)
		g.Expect(events).To(BeEmpty(), "nothing changed")
		prev := allTrue()
		events = step.TransitionEvents(step.ComputeStatus(v1alpha1.KroStatus{}, 1, prev, t0).Conditions, st.Conditions)
		var actions []string
		for _, e := range events {
			actions = append(actions, e.Action)
		}
		g.Expect(actions).To(Equal([]string{tc.step}), tc.step)
	}
}

// typesOf are the conditions' types, in order.
func typesOf(conds []metav1.Condition) []string {
	out := make([]string, 0, len(conds))
	for _, c := range conds {
		out = append(out, c.Type)
	}
	return out
}

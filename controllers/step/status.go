package step

import (
	"fmt"
	"slices"
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/foreign"
)

// Limits of what the status carries.
const (
	MaxMessage       = foreign.StatusMessageMax
	maxListedNames   = foreign.StatusNamesMax
	maxSummarizedErr = 256
	maxChartVersion  = 128
)

// Observation is what one reconcile learned, in the order of its steps. Conditions
// carry type, status, reason and message; everything else is filled in by computeStatus.
type Observation struct {
	Conditions []metav1.Condition
	// Managed is what exists of the provider's objects for the Kro (see inventory).
	Managed []v1alpha1.ManagedResource
	// ChartVersion is the chart version the HelmRelease reports installed ("" when none);
	// it counts only when chartObserved, otherwise the status keeps the last one seen.
	ChartVersion  string
	ChartObserved bool
	// Rgds summarises the ControlPlane's RGDs when they were read. Without it the
	// summary is removed, unless rgdsKeep: right after an engagement the RGDs are not
	// known for a moment, and the summary keeps its figures and their older time.
	Rgds     *v1alpha1.ResourceGraphDefinitionSummary
	RgdsKeep bool
	Deleting bool
	// WaitingFor says what a deletion waits for.
	WaitingFor string
	// AccessChecked: the reconcile looked for the ControlPlane's access; then
	// accessMissingSince is when it was first found missing, or nil when it is there.
	AccessChecked      bool
	AccessMissingSince *metav1.Time
	// UnreachableSince is when a deletion that waits to remove the provider's objects
	// from the ControlPlane first found its access not working, or nil (with
	// AccessChecked) when it does not wait for that.
	UnreachableSince *metav1.Time
	// RolloutHealth is kro's health on the ControlPlane, read while a rollout updates the
	// Kro (rollout/health.go, kro_rollout.go); nil otherwise.
	RolloutHealth *v1alpha1.RolloutHealth
	// Placement is where the version places kro, once it is resolved ("" before), or the
	// side kro is leaving during a move: it chooses the conditions reported. The status
	// field of that name is a record of its own (placement_record.go).
	Placement v1alpha1.Placement
	// Revision is the ControllerRevision of the artifacts this reconcile installs with;
	// it becomes status.revision once the Kro is Ready with it.
	Revision string
}

// Set records the outcome of a step, replacing an earlier one of the same type. A step's
// condition that is not True sets its legacy condition first (v1alpha1.LegacyConditionOf):
// the legacy condition, Ready and the "not checked" messages read as they did before the
// step had a condition of its own.
func (o *Observation) Set(condType string, status metav1.ConditionStatus, reason, message string) {
	if legacy := v1alpha1.LegacyConditionOf(condType); legacy != "" && status != metav1.ConditionTrue {
		o.Set(legacy, status, reason, message)
	}
	// The reason may be another controller's (Flux's, say): it passes the door too.
	c := metav1.Condition{Type: condType, Status: status, Reason: foreign.Reason(reason, foreign.ConditionReasonMax), Message: ShortenMessage(message)}
	for i := range o.Conditions {
		if o.Conditions[i].Type == condType {
			o.Conditions[i] = c
			return
		}
	}
	o.Conditions = append(o.Conditions, c)
}

// conditionOrder is the order of a Kro's conditions in its status: Ready, then one per
// step of the reconcile, then the RGDs and the deletion. Every one is always present,
// but those of workloadOnly only for a Kro placed on a workload cluster.
var conditionOrder = []string{
	v1alpha1.ConditionReady,
	v1alpha1.ConditionVersionResolved,
	v1alpha1.ConditionPullSecretsReady,
	v1alpha1.ConditionControlPlaneAccessReady,
	v1alpha1.ConditionWorkloadClusterReady,
	v1alpha1.ConditionOCIRepositoryReady,
	v1alpha1.ConditionControlPlanePartsReady,
	v1alpha1.ConditionKroCredentialReady,
	v1alpha1.ConditionHelmReleaseReady,
	v1alpha1.ConditionKroAvailable,
	v1alpha1.ConditionResourceGraphDefinitionsReady,
	v1alpha1.ConditionDeletionBlocked,
}

// workloadOnly are the conditions of steps that run only for a Kro placed on a workload
// cluster.
var workloadOnly = []string{
	v1alpha1.ConditionWorkloadClusterReady,
	v1alpha1.ConditionControlPlanePartsReady,
	v1alpha1.ConditionKroCredentialReady,
}

// ConditionsOf are the conditions of a Kro with that placement, in order.
func ConditionsOf(p v1alpha1.Placement) []string {
	if p == v1alpha1.PlacementWorkloadCluster {
		return conditionOrder
	}
	return slices.DeleteFunc(slices.Clone(conditionOrder), func(t string) bool { return slices.Contains(workloadOnly, t) })
}

// occasional are the conditions present only while their situation lasts, in their
// order; they come after those of conditionOrder and do not take part in Ready (their
// legacy conditions do).
var occasional = []string{
	v1alpha1.ConditionPlacementMoved,
	v1alpha1.ConditionRolloutHealthObserved,
	v1alpha1.ConditionEarlierReleaseSuspended,
	v1alpha1.ConditionHandOver,
}

// conditionRank places a condition type in the status: by conditionOrder, occasional
// ones last.
func conditionRank(t string) int {
	if i := slices.Index(conditionOrder, t); i >= 0 {
		return i
	}
	if i := slices.Index(occasional, t); i >= 0 {
		return len(conditionOrder) + i
	}
	return len(conditionOrder) + len(occasional)
}

// ComputeStatus derives the Kro's status from what a reconcile observed. Conditions
// keep their last transition time while their status stays the same.
func ComputeStatus(old v1alpha1.KroStatus, generation int64, obs Observation, now metav1.Time) v1alpha1.KroStatus {
	conds := append([]metav1.Condition{readyCondition(obs)}, obs.Conditions...)
	conds = append(conds, notChecked(obs, conds)...)
	sort.SliceStable(conds, func(i, j int) bool {
		return conditionRank(conds[i].Type) < conditionRank(conds[j].Type)
	})
	for i := range conds {
		conds[i].ObservedGeneration = generation
		conds[i].LastTransitionTime = now
		for _, prev := range old.Conditions {
			if prev.Type == conds[i].Type && prev.Status == conds[i].Status {
				conds[i].LastTransitionTime = prev.LastTransitionTime
			}
		}
	}
	phase := v1alpha1.PhaseProgressing
	switch {
	case obs.Deleting:
		phase = v1alpha1.PhaseTerminating
	case conds[0].Status == metav1.ConditionTrue:
		phase = v1alpha1.PhaseReady
	}
	chartVersion := old.ChartVersion
	if obs.ChartObserved && !obs.Deleting {
		chartVersion = foreign.Text(obs.ChartVersion, maxChartVersion) // Flux's word
	}
	revision := old.Revision
	if phase == v1alpha1.PhaseReady && obs.Revision != "" {
		revision = obs.Revision
	}
	missingSince, unreachableSince := old.AccessMissingSince, old.ControlPlaneUnreachableSince
	if obs.AccessChecked {
		missingSince, unreachableSince = obs.AccessMissingSince, obs.UnreachableSince
	}
	return v1alpha1.KroStatus{
		CommonStatus: v1alpha1.CommonStatus{
			ObservedGeneration: generation,
			Phase:              phase,
			Conditions:         conds,
		},
		ChartVersion:                 chartVersion,
		Placement:                    old.Placement, // a record written ahead (placement_record.go)
		ManagedResources:             obs.Managed,
		ResourceGraphDefinitions:     ReportedRGDs(old.ResourceGraphDefinitions, obs, now),
		AccessMissingSince:           missingSince,
		ControlPlaneUnreachableSince: unreachableSince,
		Revision:                     revision,
		RolloutHealth:                obs.RolloutHealth,
	}
}

// ReportedRGDs is the summary to report: the observed one, with the time of the old one
// when the figures are the same; the old one when it is kept; otherwise none.
func ReportedRGDs(old *v1alpha1.ResourceGraphDefinitionSummary, obs Observation, now metav1.Time) *v1alpha1.ResourceGraphDefinitionSummary {
	switch {
	case obs.Rgds != nil:
		sum := obs.Rgds.DeepCopy()
		sum.ObservedTime = now
		if old != nil {
			sum.ObservedTime = old.ObservedTime
			if !equality.Semantic.DeepEqual(old, sum) {
				sum.ObservedTime = now
			}
		}
		return sum
	case obs.RgdsKeep:
		return old
	}
	return nil
}

// notChecked returns the conditions whose step did not run, as Unknown with the reason
// why. DeletionBlocked outside a deletion is False: nothing is being deleted.
func notChecked(obs Observation, have []metav1.Condition) []metav1.Condition {
	why := "the Kro is being deleted"
	if !obs.Deleting {
		why = "an earlier step did not finish"
		for _, c := range obs.Conditions {
			if c.Status != metav1.ConditionTrue && c.Type != v1alpha1.ConditionResourceGraphDefinitionsReady {
				why = fmt.Sprintf("%s is %s (%s)", c.Type, c.Status, c.Reason)
				break
			}
		}
	}
	var out []metav1.Condition
	for _, t := range ConditionsOf(obs.Placement) {
		if FindCondition(have, t) != nil {
			continue
		}
		c := metav1.Condition{Type: t, Status: metav1.ConditionUnknown, Reason: v1alpha1.ReasonNotChecked, Message: "not checked: " + why}
		if t == v1alpha1.ConditionDeletionBlocked && !obs.Deleting {
			c.Status, c.Reason, c.Message = metav1.ConditionFalse, v1alpha1.ReasonReconcileSuccess, "the Kro is not being deleted"
		}
		out = append(out, c)
	}
	return out
}

// readyCondition sums up the observed conditions: True only when every step is True, the
// HelmRelease is Ready and kro is available; otherwise it repeats the first step that is
// not True.
func readyCondition(obs Observation) metav1.Condition {
	ready := metav1.Condition{Type: v1alpha1.ConditionReady}
	if obs.Deleting {
		ready.Status, ready.Reason = metav1.ConditionFalse, v1alpha1.ReasonTerminating
		ready.Message = "kro is being removed from the ControlPlane"
		if obs.WaitingFor != "" {
			ready.Message = ShortenMessage("deleting: " + obs.WaitingFor)
		}
		return ready
	}
	helmReady, kroAvailable := false, false
	for _, c := range obs.Conditions {
		if c.Type == v1alpha1.ConditionDeletionBlocked || c.Type == v1alpha1.ConditionResourceGraphDefinitionsReady || slices.Contains(occasional, c.Type) {
			continue
		}
		if c.Status != metav1.ConditionTrue {
			ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, v1alpha1.ReasonReconciling, c.Message
			switch {
			case readyReasons[c.Reason]:
				ready.Reason = c.Reason
			case errorReasons[c.Reason]:
				ready.Reason = v1alpha1.ReasonReconcileError
			}
			return ready
		}
		helmReady = helmReady || c.Type == v1alpha1.ConditionHelmReleaseReady
		kroAvailable = kroAvailable || c.Type == v1alpha1.ConditionKroAvailable
	}
	// Ready needs what runs, not only what Helm did last: kro's Deployment available.
	if !helmReady || !kroAvailable {
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, v1alpha1.ReasonReconciling, "reconciling"
		return ready
	}
	ready.Status, ready.Reason = metav1.ConditionTrue, v1alpha1.ReasonReconcileSuccess
	ready.Message = fmt.Sprintf("kro (chart %s) is installed on the ControlPlane", obs.ChartVersion)
	return ready
}

// readyReasons are the reasons of a failing step that Ready repeats as they are.
var readyReasons = map[string]bool{
	v1alpha1.ReasonAccessDenied:      true,
	v1alpha1.ReasonUpgradeInProgress: true,
	v1alpha1.ReasonOwnershipConflict: true,
	v1alpha1.ReasonMovingPlacement:   true,
	v1alpha1.ReasonKroUnavailable:    true,
	v1alpha1.ReasonSuspended:         true,
}

// errorReasons are the reasons of a step that failed on bad input or an error; Ready
// says ReconcileError for them (the seed's contract), the step's condition the specific
// reason. Ready says Reconciling for any other reason.
var errorReasons = map[string]bool{
	v1alpha1.ReasonReconcileError:          true,
	v1alpha1.ReasonProviderConfigMissing:   true,
	v1alpha1.ReasonVersionNotOffered:       true,
	v1alpha1.ReasonInvalidProviderConfig:   true,
	v1alpha1.ReasonPullSecretMissing:       true,
	v1alpha1.ReasonPullSecretWrongType:     true,
	v1alpha1.ReasonSourceNotReady:          true,
	v1alpha1.ReasonReleaseFailed:           true,
	v1alpha1.ReasonKubeconfigInvalid:       true,
	v1alpha1.ReasonControlPlaneUnreachable: true,
	// A version placed on a workload cluster that the ControlPlane has none of is bad
	// input too, for the platform team to fix.
	v1alpha1.ReasonWorkloadClusterMissing:     true,
	v1alpha1.ReasonWorkloadClusterUnreachable: true,
}

// isWarning tells whether a step's condition with this reason makes its event a Warning.
func isWarning(reason string) bool {
	return errorReasons[reason] || reason == v1alpha1.ReasonAccessDenied || reason == v1alpha1.ReasonOwnershipConflict ||
		reason == v1alpha1.ReasonKroUnavailable || reason == v1alpha1.ReasonSuspended
}

// KroEvent is a Kubernetes event to emit on the Kro.
type KroEvent struct {
	Type, Reason, Action, Note string
}

// TransitionEvents returns one event per condition that changed: Ready turning True or
// Terminating, DeletionBlocked turning True, and every other condition turning not-True
// or, while not True, changing its message (another problem). Steps that succeed do not
// each raise an event.
func TransitionEvents(old, updated []metav1.Condition) []KroEvent {
	var out []KroEvent
	for _, c := range updated {
		prev := FindCondition(old, c.Type)
		if prev != nil && prev.Status == c.Status && prev.Reason == c.Reason &&
			(c.Status == metav1.ConditionTrue || prev.Message == c.Message || c.Type == v1alpha1.ConditionReady) ||
			c.Reason == v1alpha1.ReasonNotChecked || mirrored(c, updated) {
			continue
		}
		switch {
		case c.Type == v1alpha1.ConditionReady:
			if c.Status == metav1.ConditionTrue || c.Reason == v1alpha1.ReasonTerminating {
				out = append(out, KroEvent{corev1.EventTypeNormal, c.Reason, c.Type, c.Message})
			}
		case c.Type == v1alpha1.ConditionDeletionBlocked:
			if c.Status == metav1.ConditionTrue {
				out = append(out, KroEvent{corev1.EventTypeWarning, c.Reason, c.Type, c.Message})
			}
		case c.Status != metav1.ConditionTrue:
			typ := corev1.EventTypeNormal
			if isWarning(c.Reason) {
				typ = corev1.EventTypeWarning
			}
			out = append(out, KroEvent{typ, c.Reason, c.Type, c.Type + ": " + c.Message})
		}
	}
	return out
}

// mirrored tells whether c is a legacy condition that repeats a step's own condition
// (Observation.Set): the event names the step's condition, once.
func mirrored(c metav1.Condition, conds []metav1.Condition) bool {
	for _, d := range conds {
		if v1alpha1.LegacyConditionOf(d.Type) == c.Type && d.Status == c.Status && d.Reason == c.Reason && d.Message == c.Message {
			return true
		}
	}
	return false
}

// FindCondition is the condition of type t, or nil.
func FindCondition(conds []metav1.Condition, t string) *metav1.Condition {
	for i := range conds {
		if conds[i].Type == t {
			return &conds[i]
		}
	}
	return nil
}

// FluxReadiness reads a Flux object's Ready condition: Unknown until Flux has looked at
// the current generation. Ready=True counts once Flux has finished the generation
// (status.observedGeneration, as kstatus reads it; helm-controller sets the condition
// before it). A failure or progress counts as soon as the condition is about the current
// generation: Flux moves status.observedGeneration only when a reconcile succeeds or
// stalls, so a retried failure would otherwise never show.
func FluxReadiness(generation, observedGeneration int64, conds []metav1.Condition) (metav1.ConditionStatus, string) {
	c := FindCondition(conds, v1alpha1.ConditionReady)
	if c != nil {
		current := c.ObservedGeneration == generation || c.ObservedGeneration == 0 && observedGeneration == generation
		if current && (c.Status != metav1.ConditionTrue || observedGeneration == generation) {
			return c.Status, ShortenMessage(c.Message)
		}
	}
	return metav1.ConditionUnknown, "waiting for Flux to reconcile it"
}

// FluxCondition turns a Flux object's readiness into the Kro's condition of that step.
// A failure carries Flux's own message under failReason.
func FluxCondition(obs *Observation, condType, what string, status metav1.ConditionStatus, message, failReason string) {
	switch status {
	case metav1.ConditionTrue:
		obs.Set(condType, status, v1alpha1.ReasonReconcileSuccess, what+" is ready")
	case metav1.ConditionFalse:
		obs.Set(condType, status, failReason, what+" is not ready: "+message)
	default:
		obs.Set(condType, metav1.ConditionUnknown, v1alpha1.ReasonReconciling, what+": "+message)
	}
}

// ListNames joins at most maxListedNames names and says how many more there are.
func ListNames(names []string) string { return foreign.List(names, maxListedNames) }

// Summarize turns an internal error into one short line for a condition or an event.
func Summarize(err error) string { return foreign.Line(err.Error(), maxSummarizedErr) }

// ShortenMessage makes s a message of the status's own length (maxMessage).
func ShortenMessage(s string) string { return foreign.Text(s, MaxMessage) }

package controllers

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/clusters"
	"github.com/openmcp-project/service-provider-kro/controllers/foreign"
	"github.com/openmcp-project/service-provider-kro/controllers/step"
)

// A status the API server refuses must not freeze the object. Every foreign string passes
// the door (package foreign) on its way into a status, so a refusal means a bug or a
// limit nobody foresaw: a value over a field's length, against its pattern, a status too
// large. Then the provider writes a minimal status instead, which the API server accepts
// because it holds nothing but the provider's own values: the generation it was computed
// for, Ready False with reason StatusRefused quoting the refusal, and what later
// reconciles and the rollout rely on. A Warning event says the same, once.

// maxRefusal bounds the refusal quoted in the status and the event: the API server's
// message may quote the refused value whole.
const maxRefusal = 1024

// statusRefused says whether err is the API server refusing the content of a status,
// rather than a conflict, a missing object or an outage.
func statusRefused(err error) bool {
	return apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) || apierrors.IsRequestEntityTooLargeError(err)
}

// refusedCondition is the Ready condition of a minimal status; it keeps the transition
// time of a Ready condition that already said the same.
func refusedCondition(old []metav1.Condition, what string, err error, generation int64, now metav1.Time) metav1.Condition {
	c := metav1.Condition{
		Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonStatusRefused,
		Message: foreign.Text("the API server refused the "+what+" status the provider computed, so this minimal one stands in: "+
			foreign.Line(err.Error(), maxRefusal)+"; the provider goes on reconciling; report this as a bug of service-provider-kro", step.MaxMessage),
		ObservedGeneration: generation, LastTransitionTime: now,
	}
	if prev := meta.FindStatusCondition(old, v1alpha1.ConditionReady); prev != nil && prev.Status == c.Status && prev.Reason == c.Reason {
		c.LastTransitionTime = prev.LastTransitionTime
	}
	return c
}

// minimalKroStatus stands in for a Kro status the API server refused: the conditions
// become Ready False (StatusRefused); what the rollout and a deletion rely on stays
// (placement, revision, the times the access went missing or stopped working); the summaries go.
func minimalKroStatus(old, refused v1alpha1.KroStatus, generation int64, err error, now metav1.Time) v1alpha1.KroStatus {
	phase := v1alpha1.PhaseProgressing
	if refused.Phase == v1alpha1.PhaseTerminating {
		phase = v1alpha1.PhaseTerminating
	}
	return v1alpha1.KroStatus{
		CommonStatus: v1alpha1.CommonStatus{
			ObservedGeneration: generation, Phase: phase,
			Conditions: []metav1.Condition{refusedCondition(old.Conditions, "Kro", err, generation, now)},
		},
		Placement:                    refused.Placement,
		Revision:                     refused.Revision,
		AccessMissingSince:           refused.AccessMissingSince,
		ControlPlaneUnreachableSince: refused.ControlPlaneUnreachableSince,
	}
}

// writeRefusedKroStatus writes the minimal status of a Kro whose status was refused,
// unless it is there already, with a Warning event when it is new.
func (r *KroReconciler) writeRefusedKroStatus(ctx context.Context, s *step.Scope, base *v1alpha1.Kro, old, refused v1alpha1.KroStatus, refusal error) error {
	log.FromContext(ctx).Error(refusal, "The API server refused the Kro's status; writing a minimal one")
	minimal := minimalKroStatus(old, refused, s.Kro.Generation, refusal, metav1.Now())
	if prev := meta.FindStatusCondition(old.Conditions, v1alpha1.ConditionReady); prev == nil || prev.Reason != v1alpha1.ReasonStatusRefused {
		r.Recorder.Eventf(s.Kro, nil, corev1.EventTypeWarning, v1alpha1.ReasonStatusRefused, "Reconcile", "%s", minimal.Conditions[0].Message)
	}
	if equality.Semantic.DeepEqual(old, minimal) {
		return nil
	}
	s.Kro.Status = minimal
	s.Writes.Before(s.Kro)
	return client.IgnoreNotFound(r.Onboarding.Status().Patch(ctx, s.Kro, client.MergeFrom(base)))
}

// minimalProviderConfigStatus stands in for a ProviderConfig status the API server
// refused: the last status it accepted, which carries the rollouts' state, with Ready
// False (StatusRefused) for the current generation.
func minimalProviderConfigStatus(old v1alpha1.ProviderConfigStatus, generation int64, err error, now metav1.Time) v1alpha1.ProviderConfigStatus {
	out := *old.DeepCopy()
	out.ObservedGeneration = generation
	out.Phase = v1alpha1.PhaseProgressing
	meta.SetStatusCondition(&out.Conditions, refusedCondition(old.Conditions, "ProviderConfig", err, generation, now))
	return out
}

// writeRefusedStatus writes the minimal status of a ProviderConfig whose status was
// refused, unless it is there already, with a Warning event when it is new.
func (r *ProviderConfigReconciler) writeRefusedStatus(ctx context.Context, pc, base *v1alpha1.ProviderConfig, refusal error) error {
	log.FromContext(ctx).Error(refusal, "The API server refused the ProviderConfig's status; writing a minimal one")
	minimal := minimalProviderConfigStatus(base.Status, pc.Generation, refusal, metav1.Now())
	if prev := meta.FindStatusCondition(base.Status.Conditions, v1alpha1.ConditionReady); (prev == nil || prev.Reason != v1alpha1.ReasonStatusRefused) && r.Recorder != nil {
		r.Recorder.Eventf(pc, nil, corev1.EventTypeWarning, v1alpha1.ReasonStatusRefused, "Reconcile", "%s",
			meta.FindStatusCondition(minimal.Conditions, v1alpha1.ConditionReady).Message)
	}
	if equality.Semantic.DeepEqual(base.Status, minimal) {
		return nil
	}
	pc.Status = minimal
	err := r.Platform.Status().Patch(ctx, pc, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}), clusters.FieldOwner)
	if apierrors.IsConflict(err) {
		return nil // the next reconcile computes it again from a fresher copy
	}
	return client.IgnoreNotFound(err)
}

// Package controllers holds the provider's reconcilers.
package controllers

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/openmcp-project/openmcp-operator/api/constants"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/reach"
	"github.com/openmcp-project/service-provider-kro/controllers/step"
	"github.com/openmcp-project/service-provider-kro/providers/sharding"
)

// KroReconciler installs kro on a tenant's ControlPlane through Flux objects on the
// platform cluster, and removes it again when the Kro is deleted.
type KroReconciler struct {
	// Onboarding reads and writes Kro objects (the manager's client).
	Onboarding client.Client
	// Platform reads (cached) and writes objects on the platform cluster.
	Platform client.Client
	// PlatformReader reads the platform cluster without the cache, for what is not cached.
	PlatformReader client.Reader
	// ControlPlanes gives access to the tenants' ControlPlanes.
	ControlPlanes reach.ControlPlanes
	// Recorder emits events on Kro objects.
	Recorder events.EventRecorder
	// ProviderName is this provider's name and the name of its ProviderConfig.
	ProviderName string
	// PodNamespace is the provider's namespace on the platform cluster, where the source
	// pull secrets live.
	PodNamespace string
	// MaxConcurrentReconciles is how many Kros are reconciled at once (default 10).
	MaxConcurrentReconciles int
	// AccessGracePeriod is how long a ControlPlane's access must be missing before a
	// deletion counts the ControlPlane as gone (default deletion.DefaultAccessGracePeriod).
	AccessGracePeriod time.Duration
	// Shard, under --sharding, says which Kros this replica acts on; nil: all.
	Shard *sharding.Membership
	// Earlier reads the earlier provider's Flux objects (handover.EarlierCache); nil: the API
	// server is asked.
	Earlier client.Reader
	// AccessMode says where ControlPlane kubeconfigs come from; an earlier AccessRequest
	// that is the provider's own under openmcp is kept.
	AccessMode reach.AccessMode

	// KroTokenLifetime is the lifetime of kro's token for a ControlPlane when kro runs on
	// a workload cluster (default reach.DefaultKroTokenLifetime).
	KroTokenLifetime time.Duration

	built stepsOnce
}

// Reconcile brings a Kro's objects on the platform cluster and its ControlPlane in line
// with the Kro and the ProviderConfig, and reports what it found in one status patch.
func (r *KroReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if !owns(r.Shard, req.NamespacedName) {
		r.ControlPlanes.Disengage(ctx, req.NamespacedName)
		return ctrl.Result{}, nil
	}
	kro, released, err := r.getKro(ctx, req)
	if kro == nil || err != nil {
		if !released && err == nil {
			// Nothing of the Kro is left to bring it back when its requests go.
			return ctrl.Result{RequeueAfter: releaseRecheck}, nil
		}
		return ctrl.Result{}, err
	}
	if kro.Annotations[constants.OperationAnnotation] == constants.OperationAnnotationValueIgnore {
		return ctrl.Result{}, r.reportIgnoredDeletion(ctx, kro)
	}
	s := step.NewScope(kro)
	var res step.Result
	switch {
	case s.TenantNamespace == "":
		err = s.NoTenantNamespace()
	case !kro.DeletionTimestamp.IsZero():
		res, err = r.steps().deletion.ReconcileDelete(ctx, s)
	default:
		res, err = r.reconcileNormal(ctx, s)
	}
	if err == nil && res != step.Finalized {
		err = r.consumeReconcileOperation(ctx, kro, &s.Writes)
	}
	err = errors.Join(err, r.writeStatus(ctx, s, res, err))
	step.WaitForCache(ctx, r.Onboarding, req.NamespacedName, &s.Writes)
	if res == step.Finalized {
		return ctrl.Result{}, err
	}
	return s.Result(), err
}

// releaseRecheck is how soon a Kro that is gone is released again while openmcp is still
// finalizing a request of it.
const releaseRecheck = 5 * time.Second

// getKro reads the Kro. One that is gone without the finalizer's cleanup (force-deleted)
// gets its ControlPlane released at least, so that nothing is left engaged or requested
// for it; then it returns nil, and whether all is released.
func (r *KroReconciler) getKro(ctx context.Context, req ctrl.Request) (*v1alpha1.Kro, bool, error) {
	kro := &v1alpha1.Kro{}
	err := r.Onboarding.Get(ctx, req.NamespacedName, kro)
	if apierrors.IsNotFound(err) {
		kro.Name, kro.Namespace = req.Name, req.Namespace
		released, err := r.ControlPlanes.Release(ctx, kro)
		return nil, released, err
	}
	if err != nil {
		return nil, true, err
	}
	return kro, true, nil
}

// reconcileNormal adds the finalizer and runs the steps that install kro, in order, until
// one waits or fails; a failure is reported under the step's condition.
func (r *KroReconciler) reconcileNormal(ctx context.Context, s *step.Scope) (step.Result, error) {
	if err := r.addFinalizer(ctx, s.Kro, &s.Writes); err != nil {
		return step.Proceed, err
	}
	if err := r.steps().handOver.FindEarlier(ctx, s); err != nil {
		return step.Proceed, err
	}
	// The chart source and the values move together: the OCIRepository is applied right
	// before the HelmRelease, after every step that can stop the reconcile for a while
	// (the ControlPlane's access, the image pull secrets, the earlier provider's
	// HelmRelease). A new chart tag applied alone would have helm-controller upgrade to
	// the new chart with the old values, and under a rollout count that against the
	// version, while the Kro merely waits for its ControlPlane (issue 21, hole 4).
	steps := []step.Step{
		{Cond: v1alpha1.ConditionVersionResolved, What: "resolving the version", Run: r.steps().version.resolveVersion},
		{Cond: v1alpha1.ConditionPullSecretsReady, What: "preparing the chart pull secret", Run: r.steps().secrets.ReconcileChartPullSecret},
		{Cond: v1alpha1.ConditionControlPlaneAccessReady, What: "reaching the ControlPlane", Run: r.steps().flux.ObserveControlPlane},
		{Cond: v1alpha1.ConditionPlacementMoved, What: "moving kro to the version's placement", Run: r.steps().placement.Move.MovePlacement},
		{Cond: v1alpha1.ConditionWorkloadClusterReady, What: "reaching the workload cluster", Run: r.steps().placement.Workload.ObserveWorkloadCluster},
		{Cond: v1alpha1.ConditionRolloutHealthObserved, What: "reading kro's health for the rollout", Run: r.steps().version.observeRolloutHealth},
		{Cond: v1alpha1.ConditionPullSecretsReady, What: "copying image pull secrets to where kro runs", Run: r.steps().secrets.ReconcileImagePullSecrets},
		{Cond: v1alpha1.ConditionEarlierReleaseSuspended, What: "suspending the earlier provider's HelmRelease", Run: r.steps().handOver.SuspendEarlier},
		{Cond: v1alpha1.ConditionOCIRepositoryReady, What: "applying the OCIRepository", Run: r.steps().flux.ReconcileOCIRepository},
		{Cond: v1alpha1.ConditionControlPlanePartsReady, What: "putting kro's CRDs and RBAC on the ControlPlane", Run: r.steps().placement.Parts.ReconcileControlPlaneParts},
		{Cond: v1alpha1.ConditionKroCredentialReady, What: "preparing kro's credential for the ControlPlane", Run: r.steps().placement.Credential.ReconcileKroCredential},
		{Cond: v1alpha1.ConditionHelmReleaseReady, What: "applying the HelmRelease", Run: r.steps().flux.ReconcileHelmRelease},
		{Cond: v1alpha1.ConditionKroAvailable, What: "reading kro's Deployment", Run: r.steps().flux.ObserveKro},
		{Cond: v1alpha1.ConditionHandOver, What: "removing the earlier provider's objects", Run: r.steps().handOver.FinishHandOver},
	}
	for _, st := range steps {
		res, err := st.Run(ctx, s)
		if err != nil {
			s.Obs.StepFailed(st.Cond, st.What, err)
			return step.Proceed, err
		}
		if res != step.Proceed {
			return res, nil
		}
	}
	return step.Proceed, nil
}

// writeStatus patches the status when it changed, and emits events for the conditions
// that changed. An idle reconcile writes nothing.
// The reconcile's error only counts towards the outcome metric.
func (r *KroReconciler) writeStatus(ctx context.Context, s *step.Scope, res step.Result, reconcileErr error) error {
	if res == step.Undecided || res == step.Finalized {
		return nil
	}
	// Another replica may have taken the Kro over while this reconcile waited, for example
	// on a platform cluster this replica was cut off from: its status is the owner's now.
	if !owns(r.Shard, client.ObjectKeyFromObject(s.Kro)) {
		return nil
	}
	before := s.Before
	if err := r.steps().flux.Inventory(ctx, s); err != nil {
		return err
	}
	now := metav1.Now()
	updated := step.ComputeStatus(*before, s.Kro.Generation, s.Obs, now)
	observeReconcile(s.Kro, before, &updated, reconcileErr, now.Time)
	if equality.Semantic.DeepEqual(*before, updated) {
		return nil
	}
	for _, e := range step.TransitionEvents(before.Conditions, updated.Conditions) {
		r.Recorder.Eventf(s.Kro, nil, e.Type, e.Reason, e.Action, "%s", e.Note)
	}
	base := s.Kro.DeepCopy()
	base.Status = *before
	s.Kro.Status = updated
	s.Writes.Before(s.Kro)
	if err := r.Onboarding.Status().Patch(ctx, s.Kro, client.MergeFrom(base)); err != nil {
		if statusRefused(err) {
			return r.writeRefusedKroStatus(ctx, s, base, *before, updated, err)
		}
		return client.IgnoreNotFound(err)
	}
	return nil
}

func (r *KroReconciler) addFinalizer(ctx context.Context, kro *v1alpha1.Kro, w *step.WriteTracker) error {
	orig := kro.DeepCopy()
	if !controllerutil.AddFinalizer(kro, v1alpha1.Finalizer) {
		return nil
	}
	w.Before(kro)
	return r.Onboarding.Patch(ctx, kro, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
}

// consumeReconcileOperation removes openmcp.cloud/operation=reconcile, and only that
// annotation, once the requested reconcile has run. The removal tests that the annotation
// still says reconcile on the server: a value set since (ignore, say) is someone's newer
// request and stays; its own update brings the Kro back.
func (r *KroReconciler) consumeReconcileOperation(ctx context.Context, kro *v1alpha1.Kro, w *step.WriteTracker) error {
	if kro.Annotations[constants.OperationAnnotation] != constants.OperationAnnotationValueReconcile {
		return nil
	}
	w.Before(kro)
	path := "/metadata/annotations/" + jsonPointerEscape(constants.OperationAnnotation)
	patch := fmt.Appendf(nil, `[{"op":"test","path":%q,"value":%q},{"op":"remove","path":%q}]`,
		path, constants.OperationAnnotationValueReconcile, path)
	err := r.Onboarding.Patch(ctx, kro, client.RawPatch(types.JSONPatchType, patch))
	if apierrors.IsInvalid(err) || apierrors.IsNotFound(err) {
		// The test failed (the annotation changed or went), or the Kro is gone.
		return nil
	}
	return err
}

// jsonPointerEscape escapes one reference token of a JSON pointer (RFC 6901).
func jsonPointerEscape(token string) string {
	return strings.ReplaceAll(strings.ReplaceAll(token, "~", "~0"), "/", "~1")
}

// reportIgnoredDeletion says why a Kro that is being deleted and carries
// openmcp.cloud/operation=ignore keeps its finalizer: the deletion is paused, which is
// what ignore asks for, but not silently. It writes this one status, and a Warning event,
// once; nothing else of the Kro is touched. A Kro that is not being deleted is left
// entirely alone.
func (r *KroReconciler) reportIgnoredDeletion(ctx context.Context, kro *v1alpha1.Kro) error {
	if kro.DeletionTimestamp.IsZero() || !controllerutil.ContainsFinalizer(kro, v1alpha1.Finalizer) {
		return nil
	}
	msg := fmt.Sprintf("the deletion is paused by the annotation %s=%s: kro and the provider's objects stay in place; remove the annotation to let the deletion continue",
		constants.OperationAnnotation, constants.OperationAnnotationValueIgnore)
	conds := []metav1.Condition{
		{Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonOperationIgnored, Message: msg, ObservedGeneration: kro.Generation},
		{Type: v1alpha1.ConditionDeletionBlocked, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonOperationIgnored, Message: msg, ObservedGeneration: kro.Generation},
	}
	prevReady := meta.FindStatusCondition(kro.Status.Conditions, v1alpha1.ConditionReady)
	paused := prevReady != nil && prevReady.Reason == v1alpha1.ReasonOperationIgnored
	base := kro.DeepCopy()
	changed := kro.Status.Phase != v1alpha1.PhaseTerminating
	kro.Status.Phase = v1alpha1.PhaseTerminating
	for _, c := range conds {
		prev := meta.FindStatusCondition(kro.Status.Conditions, c.Type)
		if prev == nil || prev.Status != c.Status || prev.Reason != c.Reason || prev.Message != c.Message || prev.ObservedGeneration != c.ObservedGeneration {
			meta.SetStatusCondition(&kro.Status.Conditions, c)
			changed = true
		}
	}
	if !changed {
		return nil
	}
	if !paused {
		r.Recorder.Eventf(kro, nil, corev1.EventTypeWarning, v1alpha1.ReasonOperationIgnored, "Delete", "%s", msg)
	}
	var w step.WriteTracker
	w.Before(kro)
	err := r.Onboarding.Status().Patch(ctx, kro, client.MergeFrom(base))
	step.WaitForCache(ctx, r.Onboarding, client.ObjectKeyFromObject(kro), &w)
	return client.IgnoreNotFound(err)
}

func (r *KroReconciler) concurrency() int {
	if r.MaxConcurrentReconciles > 0 {
		return r.MaxConcurrentReconciles
	}
	return 10
}

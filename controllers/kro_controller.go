// Package controllers holds the provider's reconcilers.
package controllers

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
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
	"github.com/openmcp-project/service-provider-kro/controllers/owned"
	"github.com/openmcp-project/service-provider-kro/controllers/reach"
	"github.com/openmcp-project/service-provider-kro/controllers/rollout"
	"github.com/openmcp-project/service-provider-kro/controllers/versions"
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
	// deletion counts the ControlPlane as gone (default DefaultAccessGracePeriod).
	AccessGracePeriod time.Duration
	// Shard, under --sharding, says which Kros this replica acts on; nil: all.
	Shard *sharding.Membership
	// Earlier reads the earlier provider's Flux objects (EarlierCache); nil: the API
	// server is asked.
	Earlier client.Reader
	// AccessMode says where ControlPlane kubeconfigs come from; an earlier AccessRequest
	// that is the provider's own under openmcp is kept.
	AccessMode reach.AccessMode

	// KroTokenLifetime is the lifetime of kro's token for a ControlPlane when kro runs on
	// a workload cluster (default DefaultKroTokenLifetime).
	KroTokenLifetime time.Duration

	built stepsOnce
}

// DefaultAccessGracePeriod is the default of KroReconciler.AccessGracePeriod: long
// enough for a kubeconfig secret to be replaced or relabelled, short enough that a
// destroyed ControlPlane does not hold its Kro for long.
const DefaultAccessGracePeriod = 5 * time.Minute

// result is how a step, or a whole reconcile, ended when it did not fail. The status
// writer reads it: undecided and finalized leave the status alone.
type result int

const (
	// proceed: the step is done, the next one may run.
	proceed result = iota
	// waiting: the step waits for something (input to be fixed, an object to appear,
	// tenants' resources to go); its condition says what. No error, no backoff: a watch,
	// a recheck (scope.requeue) or the poll brings the Kro back.
	waiting
	// undecided: the ControlPlane is still being connected, so this reconcile knows less
	// than the status already says and leaves it alone. The engagement's outcome brings
	// the Kro back.
	undecided
	// finalized: the finalizer is gone, and so is the Kro; there is no status to write.
	finalized
)

// scope is what one reconcile of a Kro knows; the steps fill it in order.
type scope struct {
	kro *v1alpha1.Kro
	// before is the status as the reconcile found it.
	before             *v1alpha1.KroStatus
	tenantNamespace    string
	tenantNamespaceErr error
	obs                observation
	// pollInterval is the ProviderConfig's, the safety net behind the watches.
	pollInterval time.Duration
	// fluxShard is the key of the Flux shard for the Kro's Flux objects (fluxshards.go).
	fluxShard string

	version      *v1alpha1.KroVersion
	sources      map[string]*corev1.Secret
	chartSecret  string
	imageSecrets []string
	access       *reach.ControlPlaneAccess
	// workload is the workload cluster, for a version placed on one (workload.go).
	workload *reach.WorkloadClusterAccess
	// placedRelease is the Kro's own HelmRelease as the move step found it (nil: none).
	placedRelease *helmv2.HelmRelease
	// site is where kro runs: the ControlPlane's kro-system, or the tenant's namespace on
	// the workload cluster; set once both are reached.
	site reach.Site
	// record is what the HelmRelease records of the rollout (rollout/admission.go).
	record rollout.Record
	// gate: a rollout is updating the Kro, so its reconciles read kro's health on the
	// ControlPlane (rollout/health.go, kro_rollout.go).
	gate bool
	// chartExtras: the chart offers the deployment.extra* values, for kro on a workload
	// cluster (controlplane_parts.go).
	chartExtras bool
	// repo is the OCIRepository as applied, which the HelmRelease step may wait for.
	repo *sourcev1.OCIRepository
	// requeueAfter, when set, brings the Kro back sooner than the poll: a deletion that
	// rechecks instances or waits for the end of a grace period.
	requeueAfter time.Duration
	// writes tracks this reconcile's writes to the Kro, to wait for the cache at the end.
	writes writeTracker
	// earlier is what the earlier provider left for the Kro (handover.go); nil: nothing.
	earlier *earlier
}

// requeue asks for the Kro to come back within d.
func (s *scope) requeue(d time.Duration) {
	if d <= 0 {
		d = time.Second
	}
	if s.requeueAfter == 0 || d < s.requeueAfter {
		s.requeueAfter = d
	}
}

// result is the reconcile's result: back within the poll interval, or sooner if asked.
func (s *scope) result() ctrl.Result {
	if s.requeueAfter > 0 && s.requeueAfter < s.pollInterval {
		return ctrl.Result{RequeueAfter: s.requeueAfter}
	}
	return ctrl.Result{RequeueAfter: s.pollInterval}
}

// step is one part of the reconcile. Its error is reported under cond.
type step struct {
	cond string
	what string
	run  func(context.Context, *scope) (result, error)
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
	s := newScope(kro)
	var res result
	switch {
	case s.tenantNamespace == "":
		err = s.noTenantNamespace()
	case !kro.DeletionTimestamp.IsZero():
		res, err = r.steps().deletion.reconcileDelete(ctx, s)
	default:
		res, err = r.reconcileNormal(ctx, s)
	}
	if err == nil && res != finalized {
		err = r.consumeReconcileOperation(ctx, kro, &s.writes)
	}
	err = errors.Join(err, r.writeStatus(ctx, s, res, err))
	waitForCache(ctx, r.Onboarding, req.NamespacedName, &s.writes)
	if res == finalized {
		return ctrl.Result{}, err
	}
	return s.result(), err
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

// newScope starts a reconcile of the Kro. Its tenant namespace stays empty when it cannot
// be derived (see noTenantNamespace).
func newScope(kro *v1alpha1.Kro) *scope {
	s := &scope{kro: kro, before: kro.Status.DeepCopy(), pollInterval: versions.DefaultPollInterval()}
	s.tenantNamespace, s.tenantNamespaceErr = owned.TenantNamespace(kro)
	return s
}

// noTenantNamespace reports a Kro whose tenant namespace cannot be derived: without it
// the provider can reach nothing of the ControlPlane's, and the status says why.
func (s *scope) noTenantNamespace() error {
	s.obs.noTenantNamespace(s.tenantNamespaceErr)
	return s.tenantNamespaceErr
}

// reconcileNormal adds the finalizer and runs the steps that install kro, in order, until
// one waits or fails; a failure is reported under the step's condition.
func (r *KroReconciler) reconcileNormal(ctx context.Context, s *scope) (result, error) {
	if err := r.addFinalizer(ctx, s.kro, &s.writes); err != nil {
		return proceed, err
	}
	if err := r.steps().handOver.findEarlier(ctx, s); err != nil {
		return proceed, err
	}
	// The chart source and the values move together: the OCIRepository is applied right
	// before the HelmRelease, after every step that can stop the reconcile for a while
	// (the ControlPlane's access, the image pull secrets, the earlier provider's
	// HelmRelease). A new chart tag applied alone would have helm-controller upgrade to
	// the new chart with the old values, and under a rollout count that against the
	// version, while the Kro merely waits for its ControlPlane (issue 21, hole 4).
	steps := []step{
		{v1alpha1.ConditionVersionResolved, "resolving the version", r.steps().version.resolveVersion},
		{v1alpha1.ConditionPullSecretsReady, "preparing the chart pull secret", r.steps().secrets.reconcileChartPullSecret},
		{v1alpha1.ConditionControlPlaneAccessReady, "reaching the ControlPlane", r.steps().flux.observeControlPlane},
		{v1alpha1.ConditionHelmReleaseReady, "moving kro to the version's placement", r.steps().placement.movePlacement},
		{v1alpha1.ConditionWorkloadClusterReady, "reaching the workload cluster", r.steps().placement.observeWorkloadCluster},
		{v1alpha1.ConditionControlPlaneAccessReady, "reading kro's health for the rollout", r.steps().version.observeRolloutHealth},
		{v1alpha1.ConditionPullSecretsReady, "copying image pull secrets to where kro runs", r.steps().secrets.reconcileImagePullSecrets},
		{v1alpha1.ConditionHelmReleaseReady, "suspending the earlier provider's HelmRelease", r.steps().handOver.suspendEarlier},
		{v1alpha1.ConditionOCIRepositoryReady, "applying the OCIRepository", r.steps().flux.reconcileOCIRepository},
		{v1alpha1.ConditionWorkloadClusterReady, "putting kro's CRDs and RBAC on the ControlPlane", r.steps().placement.reconcileControlPlaneParts},
		{v1alpha1.ConditionWorkloadClusterReady, "preparing kro's credential for the ControlPlane", r.steps().placement.reconcileKroCredential},
		{v1alpha1.ConditionHelmReleaseReady, "applying the HelmRelease", r.steps().flux.reconcileHelmRelease},
		{v1alpha1.ConditionHandOver, "removing the earlier provider's objects", r.steps().handOver.finishHandOver},
	}
	for _, st := range steps {
		res, err := st.run(ctx, s)
		if err != nil {
			s.obs.stepFailed(st.cond, st.what, err)
			return proceed, err
		}
		if res != proceed {
			return res, nil
		}
	}
	return proceed, nil
}

// writeStatus patches the status when it changed, and emits events for the conditions
// that changed. An idle reconcile writes nothing.
// The reconcile's error only counts towards the outcome metric.
func (r *KroReconciler) writeStatus(ctx context.Context, s *scope, res result, reconcileErr error) error {
	if res == undecided || res == finalized {
		return nil
	}
	// Another replica may have taken the Kro over while this reconcile waited, for example
	// on a platform cluster this replica was cut off from: its status is the owner's now.
	if !owns(r.Shard, client.ObjectKeyFromObject(s.kro)) {
		return nil
	}
	before := s.before
	if err := r.steps().flux.inventory(ctx, s); err != nil {
		return err
	}
	now := metav1.Now()
	updated := computeStatus(*before, s.kro.Generation, s.obs, now)
	observeReconcile(s.kro, before, &updated, reconcileErr, now.Time)
	if equality.Semantic.DeepEqual(*before, updated) {
		return nil
	}
	for _, e := range transitionEvents(before.Conditions, updated.Conditions) {
		r.Recorder.Eventf(s.kro, nil, e.Type, e.Reason, e.Action, "%s", e.Note)
	}
	base := s.kro.DeepCopy()
	base.Status = *before
	s.kro.Status = updated
	s.writes.before(s.kro)
	if err := r.Onboarding.Status().Patch(ctx, s.kro, client.MergeFrom(base)); err != nil {
		if statusRefused(err) {
			return r.writeRefusedKroStatus(ctx, s, base, *before, updated, err)
		}
		return client.IgnoreNotFound(err)
	}
	return nil
}

func (r *KroReconciler) addFinalizer(ctx context.Context, kro *v1alpha1.Kro, w *writeTracker) error {
	orig := kro.DeepCopy()
	if !controllerutil.AddFinalizer(kro, v1alpha1.Finalizer) {
		return nil
	}
	w.before(kro)
	return r.Onboarding.Patch(ctx, kro, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
}

// consumeReconcileOperation removes openmcp.cloud/operation=reconcile, and only that
// annotation, once the requested reconcile has run. The removal tests that the annotation
// still says reconcile on the server: a value set since (ignore, say) is someone's newer
// request and stays; its own update brings the Kro back.
func (r *KroReconciler) consumeReconcileOperation(ctx context.Context, kro *v1alpha1.Kro, w *writeTracker) error {
	if kro.Annotations[constants.OperationAnnotation] != constants.OperationAnnotationValueReconcile {
		return nil
	}
	w.before(kro)
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
	var w writeTracker
	w.before(kro)
	err := r.Onboarding.Status().Patch(ctx, kro, client.MergeFrom(base))
	waitForCache(ctx, r.Onboarding, client.ObjectKeyFromObject(kro), &w)
	return client.IgnoreNotFound(err)
}

func (r *deletion) gracePeriod() time.Duration {
	if r.AccessGracePeriod > 0 {
		return r.AccessGracePeriod
	}
	return DefaultAccessGracePeriod
}

func (r *KroReconciler) concurrency() int {
	if r.MaxConcurrentReconciles > 0 {
		return r.MaxConcurrentReconciles
	}
	return 10
}

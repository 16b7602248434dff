package controllers

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/clusters"
	"github.com/openmcp-project/service-provider-kro/controllers/flux"
	"github.com/openmcp-project/service-provider-kro/controllers/pullsecrets"
	"github.com/openmcp-project/service-provider-kro/controllers/rollout"
	"github.com/openmcp-project/service-provider-kro/controllers/step"
	"github.com/openmcp-project/service-provider-kro/controllers/versions"
	"github.com/openmcp-project/service-provider-kro/providers/sharding"
)

// ProviderConfigReconciler writes the status of the provider's ProviderConfig on the
// platform cluster: whether every version's pull secrets resolve in the provider's
// namespace, and how many Kros select each version. It writes nothing else, and writes
// the status only when it changed.
type ProviderConfigReconciler struct {
	// Platform reads the ProviderConfig and the pull secrets (cached) and patches the
	// ProviderConfig's status.
	Platform client.Client
	// Onboarding lists the Kros (the manager's cache).
	Onboarding client.Reader
	// Recorder emits events on the ProviderConfig; it must write to the platform cluster.
	Recorder events.EventRecorder
	// ProviderName is the provider's name and the name of its ProviderConfig.
	ProviderName string
	// PodNamespace is the provider's namespace on the platform cluster, where the source
	// pull secrets live.
	PodNamespace string
	// ShouldWrite, when set and returning false, makes a reconcile do nothing at all, so
	// that of several replicas only one writes. Nil means always.
	ShouldWrite func() bool
	// Shard, under --sharding, makes only the replica that owns the ProviderConfig's key
	// write its status, and brings the ProviderConfig back to a replica that comes to own
	// it. nil: this replica writes.
	Shard *sharding.Membership
}

// providerConfigShardKey is what the owner of the ProviderConfig's status is computed
// from; it cannot be a Kro's key, which always has a namespace.
func providerConfigShardKey(name string) string { return "ProviderConfig " + name }

// providerConfigObservation is what one reconcile found, for the pure status function.
type providerConfigObservation struct {
	// problems are the versions' pull secret problems, in the order of spec.versions,
	// then those of the revisions Kros are held on, by name.
	problems []pullsecrets.SecretProblem
	kros     []v1alpha1.Kro
	// records are what the Kros' HelmReleases record of the rollouts (rollout/admission.go).
	records map[string]rollout.Record
	// versionOf is the version of each kept revision, by its name.
	versionOf map[string]string
	// artifacts are the artifacts of the revisions Kros are held on, by name.
	artifacts map[string]*v1alpha1.KroVersion
	// namespaceLabels are the labels of the onboarding cluster's Namespaces, by name,
	// read only when spec.rollout.canary is set: canaries are chosen by them.
	namespaceLabels map[string]map[string]string
	// now is when the observation was made: the start of a health timeout.
	now time.Time
}

// SetupWithManager registers the reconciler with the onboarding cluster's manager. The
// ProviderConfig and the pull secrets are watched through the platform cluster's cache,
// the Kros through the manager's; every event maps to the one ProviderConfig.
func (r *ProviderConfigReconciler) SetupWithManager(mgr ctrl.Manager, platform cluster.Cluster) error {
	toProviderConfig := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: client.ObjectKey{Name: r.ProviderName}}}
	})
	// Every change of the ProviderConfig counts, its own status included: a reconcile that
	// read a status older than the last write computes against stale data, and the event
	// of that write brings it back to correct it.
	ownConfig := predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetName() == r.ProviderName })
	// Only a source secret appearing or going changes the status: a secret's type cannot
	// change, and its content is not looked at.
	sourceSecrets := predicate.Funcs{
		CreateFunc:  func(e event.CreateEvent) bool { return e.Object.GetNamespace() == r.PodNamespace },
		DeleteFunc:  func(e event.DeleteEvent) bool { return e.Object.GetNamespace() == r.PodNamespace },
		UpdateFunc:  func(event.UpdateEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
	b := ctrl.NewControllerManagedBy(mgr)
	if r.Shard != nil {
		b = b.WatchesRawSource(r.ownerChanges())
	}
	return b.
		Named("providerconfig").
		WatchesRawSource(source.Kind[client.Object](platform.GetCache(), &v1alpha1.ProviderConfig{}, toProviderConfig, ownConfig)).
		WatchesRawSource(source.Kind[client.Object](platform.GetCache(), &corev1.Secret{}, toProviderConfig, sourceSecrets)).
		Watches(&v1alpha1.Kro{}, r.settled(), builder.WithPredicates(kroCountChanged{})).
		// A HelmRelease's record of the rollout (rollout/admission.go): a Kro that got the
		// revision while unavailable is done once its HelmRelease carries it.
		WatchesRawSource(source.Kind[client.Object](platform.GetCache(), &helmv2.HelmRelease{}, toProviderConfig, recordChanged{})).
		// The labels of a Kro's Namespace make it a canary of a rollout (rollout/canary.go, providerconfig_canary.go).
		WatchesMetadata(&corev1.Namespace{}, r.settled(), builder.WithPredicates(namespaceRelabelled{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: 1}).
		Complete(r)
}

// ownerChanges brings the ProviderConfig back when this replica comes to own its status.
func (r *ProviderConfigReconciler) ownerChanges() source.Source {
	key, self := providerConfigShardKey(r.ProviderName), r.Shard.Identity()
	return source.Func(func(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		r.Shard.Subscribe(func(before, after []string) {
			if sharding.Owner(key, before) != self && sharding.Owner(key, after) == self {
				q.Add(reconcile.Request{NamespacedName: client.ObjectKey{Name: r.ProviderName}})
			}
		})
		return nil
	})
}

// providerConfigSettle is how long a change of a Kro waits before it brings the
// ProviderConfig back. Each reconcile reads every Kro, so during a burst of new Kros one
// that ran for every Kro's change would cost O(N) each time, N times; the changes of
// that while are taken in one reconcile instead.
const providerConfigSettle = 500 * time.Millisecond

// settled enqueues the ProviderConfig providerConfigSettle after an event; the events
// in between add nothing.
func (r *ProviderConfigReconciler) settled() handler.EventHandler {
	req := reconcile.Request{NamespacedName: client.ObjectKey{Name: r.ProviderName}}
	add := func(q workqueue.TypedRateLimitingInterface[reconcile.Request]) { q.AddAfter(req, providerConfigSettle) }
	return handler.Funcs{
		CreateFunc: func(_ context.Context, _ event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(q)
		},
		UpdateFunc: func(_ context.Context, _ event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(q)
		},
		DeleteFunc: func(_ context.Context, _ event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(q)
		},
	}
}

// kroCountChanged lets through what can change a Kro's place in the counts: its
// creation and deletion, a new generation (spec.version), and its phase or observed
// generation.
type kroCountChanged struct{ predicate.Funcs }

func (kroCountChanged) Update(e event.UpdateEvent) bool {
	o, ok1 := e.ObjectOld.(*v1alpha1.Kro)
	n, ok2 := e.ObjectNew.(*v1alpha1.Kro)
	if !ok1 || !ok2 {
		return true
	}
	return o.Generation != n.Generation || o.Spec.Version != n.Spec.Version ||
		o.Status.Phase != n.Status.Phase || o.Status.ObservedGeneration != n.Status.ObservedGeneration ||
		// what a rollout's health gate reads
		o.Status.Revision != n.Status.Revision || rollout.RgdsReady(o) != rollout.RgdsReady(n) ||
		!equality.Semantic.DeepEqual(o.Status.RolloutHealth, n.Status.RolloutHealth) ||
		// what a plan shows
		rollout.RgdsTotal(o) != rollout.RgdsTotal(n) || !maps.Equal(o.Labels, n.Labels) ||
		!equality.Semantic.DeepEqual(meta.FindStatusCondition(o.Status.Conditions, v1alpha1.ConditionHelmReleaseReady),
			meta.FindStatusCondition(n.Status.Conditions, v1alpha1.ConditionHelmReleaseReady))
}

func (kroCountChanged) Generic(event.GenericEvent) bool { return false }

// recordChanged lets through a change of what a HelmRelease records of a rollout.
type recordChanged struct{ predicate.Funcs }

func (recordChanged) Update(e event.UpdateEvent) bool {
	o, n := e.ObjectOld.GetAnnotations(), e.ObjectNew.GetAnnotations()
	for _, k := range []string{v1alpha1.AnnotationRevision, v1alpha1.AnnotationRolloutAdmission, v1alpha1.AnnotationRolloutFailed} {
		if o[k] != n[k] {
			return true
		}
	}
	return false
}

func (recordChanged) Create(event.CreateEvent) bool   { return false }
func (recordChanged) Generic(event.GenericEvent) bool { return false }

// Reconcile computes the ProviderConfig's status and patches it when it differs from
// what is there, with an event when Ready changes.
func (r *ProviderConfigReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if req.Name != r.ProviderName || r.ShouldWrite != nil && !r.ShouldWrite() ||
		r.Shard != nil && !r.Shard.Owns(providerConfigShardKey(r.ProviderName)) {
		return ctrl.Result{}, nil
	}
	pc := &v1alpha1.ProviderConfig{}
	if err := r.Platform.Get(ctx, req.NamespacedName, pc); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	obs, err := r.observe(ctx, pc)
	if err != nil {
		return ctrl.Result{}, err
	}
	// Revisions that cannot be kept do not freeze the status: it says so, and the
	// reconcile is tried again after the status is written.
	revErr := r.keepRevisions(ctx, pc, obs.kros, obs.records)
	if revErr != nil {
		obs.problems = append(obs.problems, pullsecrets.SecretProblem{Reason: v1alpha1.ReasonReconcileError, Message: fmt.Sprintf(
			"keeping the versions' artifacts as ControllerRevisions in namespace %s failed: %s; Kros wait for a version whose revision is missing",
			r.PodNamespace, step.Summarize(revErr))})
	}
	updated, recheck := providerConfigStatus(pc, obs)
	res := ctrl.Result{RequeueAfter: recheck}
	if revErr != nil {
		res = ctrl.Result{}
	}
	if equality.Semantic.DeepEqual(pc.Status, updated) {
		return res, revErr
	}
	before := meta.FindStatusCondition(pc.Status.Conditions, v1alpha1.ConditionReady)
	var prev *metav1.Condition
	if before != nil {
		prev = before.DeepCopy()
	}
	base := pc.DeepCopy()
	pc.Status = updated
	// The patch carries the resourceVersion the status was computed from: a replica whose
	// cache is older than the last write (it took the key over, say) must not overwrite
	// the rollout's state with its own stale view. It tries again once its cache caught up.
	if err := r.Platform.Status().Patch(ctx, pc, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}), clusters.FieldOwner); err != nil {
		if apierrors.IsConflict(err) {
			return ctrl.Result{RequeueAfter: time.Second}, nil
		}
		if statusRefused(err) {
			return res, errors.Join(r.writeRefusedStatus(ctx, pc, base, err), revErr)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	events := rolloutEvents(base.Status.Versions, updated.Versions)
	if e := readyTransitionEvent(prev, meta.FindStatusCondition(updated.Conditions, v1alpha1.ConditionReady)); e != nil {
		events = append(events, *e)
	}
	if r.Recorder != nil {
		for _, e := range events {
			r.Recorder.Eventf(pc, nil, e.Type, e.Reason, e.Action, "%s", e.Note)
		}
	}
	return res, revErr
}

// observe lists the Kros and checks the pull secrets of every version, and those of the
// revisions a rollout may hold Kros on (heldRevisions): they are copied again whenever
// such a Kro is reconciled.
func (r *ProviderConfigReconciler) observe(ctx context.Context, pc *v1alpha1.ProviderConfig) (providerConfigObservation, error) {
	var obs providerConfigObservation
	list := &v1alpha1.KroList{}
	err := r.Onboarding.List(ctx, list)
	if err != nil {
		return obs, fmt.Errorf("listing Kros: %w", err)
	}
	obs.kros = list.Items
	if pc.Spec.Rollout != nil && pc.Spec.Rollout.Canary != nil {
		if obs.namespaceLabels, err = namespaceLabels(ctx, r.Onboarding); err != nil {
			return obs, err
		}
	}
	if obs.records, err = r.releaseRecords(ctx); err != nil {
		return obs, err
	}
	if obs.versionOf, err = r.keptVersions(ctx, pc); err != nil {
		return obs, err
	}
	// VersionProblems is the Kro reconciler's check, so that both objects tell the same
	// story about a secret: missing, or of the wrong type. It reads names and types only.
	secrets := &pullsecrets.Copier{Clients: step.Clients{Platform: r.Platform, PodNamespace: r.PodNamespace}}
	for i := range pc.Spec.Versions {
		problems, err := secrets.VersionProblems(ctx, &pc.Spec.Versions[i], "")
		if err != nil {
			return obs, err
		}
		obs.problems = append(obs.problems, problems...)
	}
	held, err := r.heldRevisions(ctx, pc, obs.kros, obs.records)
	if err != nil {
		return obs, err
	}
	obs.artifacts = make(map[string]*v1alpha1.KroVersion, len(held))
	for _, h := range held {
		obs.artifacts[h.name] = h.artifacts
		problems, err := secrets.VersionProblems(ctx, h.artifacts, h.name)
		if err != nil {
			return obs, err
		}
		obs.problems = append(obs.problems, problems...)
	}
	obs.now = time.Now()
	return obs, nil
}

// providerConfigStatus is the status the ProviderConfig should have, and when to look
// again for a rollout's health timeout (0: no need). Conditions keep their
// lastTransitionTime unless their status changes.
func providerConfigStatus(pc *v1alpha1.ProviderConfig, obs providerConfigObservation) (v1alpha1.ProviderConfigStatus, time.Duration) {
	st := *pc.Status.DeepCopy()
	st.ObservedGeneration = pc.Generation

	ready := metav1.Condition{Type: v1alpha1.ConditionReady, ObservedGeneration: pc.Generation}
	switch {
	case !pc.DeletionTimestamp.IsZero():
		ready.Status, ready.Reason = metav1.ConditionFalse, v1alpha1.ReasonTerminating
		ready.Message = fmt.Sprintf("ProviderConfig %q is being deleted; the Kros report %s", pc.Name, v1alpha1.ReasonProviderConfigMissing)
		st.Phase = v1alpha1.PhaseTerminating
	case len(obs.problems) > 0:
		msgs := make([]string, 0, len(obs.problems))
		for _, p := range obs.problems {
			msgs = append(msgs, p.Message)
		}
		ready.Status, ready.Reason = metav1.ConditionFalse, obs.problems[0].Reason
		ready.Message = step.ShortenMessage(strings.Join(msgs, "; "))
		st.Phase = v1alpha1.PhaseProgressing
	default:
		ready.Status, ready.Reason = metav1.ConditionTrue, v1alpha1.ReasonReconcileSuccess
		ready.Message = step.ShortenMessage(fmt.Sprintf("the pull secrets of every version resolve: %s", strings.Join(versions.OfferedVersions(pc), ", ")))
		st.Phase = v1alpha1.PhaseReady
	}
	meta.SetStatusCondition(&st.Conditions, ready)

	index := make(map[string]int, len(pc.Spec.Versions))
	statuses := make([]v1alpha1.VersionStatus, 0, len(pc.Spec.Versions))
	for _, v := range pc.Spec.Versions {
		index[v.Version] = len(statuses)
		statuses = append(statuses, v1alpha1.VersionStatus{Version: v.Version})
	}
	st.Kros, st.UnknownVersionKros = int32(len(obs.kros)), 0
	for i := range obs.kros {
		k := &obs.kros[i]
		at, ok := index[k.Spec.Version]
		if !ok {
			st.UnknownVersionKros++
			continue
		}
		statuses[at].Kros++
		if k.Status.Phase == v1alpha1.PhaseReady && k.Status.ObservedGeneration == k.Generation {
			statuses[at].Ready++
		}
	}
	st.FluxShards = flux.ShardCounts(pc.Spec.FluxShards, obs.kros)
	recheck := planRollouts(pc, obs, statuses)
	st.Versions = statuses
	if len(st.Versions) == 0 {
		st.Versions = nil
	}
	return st, recheck
}

// planRollouts fills in each version's revision and rollout (planRollout); a version
// whose plan cannot be made keeps its counts and says why in its message.
func planRollouts(pc *v1alpha1.ProviderConfig, obs providerConfigObservation, statuses []v1alpha1.VersionStatus) time.Duration {
	paused := pc.Annotations[v1alpha1.AnnotationRolloutPaused] == "true"
	var recheck time.Duration
	for i := range statuses {
		vs := &statuses[i]
		rev, err := rollout.RevisionName(pc.Name, versions.FindVersion(pc, vs.Version))
		if err != nil {
			vs.Message = step.ShortenMessage(err.Error())
			continue
		}
		vs.Revision = rev
		var prev *v1alpha1.VersionStatus
		for j := range pc.Status.Versions {
			if pc.Status.Versions[j].Version == vs.Version {
				prev = &pc.Status.Versions[j]
			}
		}
		var on []v1alpha1.Kro
		for _, k := range obs.kros {
			if k.Spec.Version == vs.Version && k.DeletionTimestamp.IsZero() {
				on = append(on, k)
			}
		}
		view := rollout.View{Kros: on, Records: obs.records, VersionOf: obs.versionOf, Artifacts: obs.artifacts, Current: versions.FindVersion(pc, vs.Version),
			NamespaceLabels: obs.namespaceLabels}
		plan, err := rollout.PlanRollout(pc.Spec.Rollout, paused, *vs, prev, view, obs.now)
		if err != nil {
			vs.Message = step.ShortenMessage(err.Error())
			continue
		}
		*vs = plan.VersionStatus
		if plan.RecheckIn > 0 && (recheck == 0 || plan.RecheckIn < recheck) {
			recheck = plan.RecheckIn
		}
	}
	return recheck
}

// rolloutEvents are the events for changes of the versions' rollouts: planned,
// approved, paused, resumed, complete.
func rolloutEvents(before, after []v1alpha1.VersionStatus) []step.KroEvent {
	var out []step.KroEvent
	for _, a := range after {
		var b v1alpha1.VersionStatus
		for _, x := range before {
			if x.Version == a.Version {
				b = x
			}
		}
		if a.Rollout == b.Rollout && a.Revision == b.Revision {
			continue
		}
		switch {
		case a.Rollout == v1alpha1.RolloutPlanned && a.Plan != nil:
			out = append(out, step.KroEvent{Type: corev1.EventTypeNormal, Reason: "RolloutPlanned", Action: "Rollout", Note: "version " + a.Version + ": " + a.Plan.Summary})
		case b.Rollout == v1alpha1.RolloutPlanned && a.Rollout == v1alpha1.RolloutProgressing:
			out = append(out, step.KroEvent{Type: corev1.EventTypeNormal, Reason: "RolloutApproved", Action: "Rollout", Note: "version " + a.Version + ": " + a.Message})
		case a.Rollout == v1alpha1.RolloutPaused:
			out = append(out, step.KroEvent{Type: corev1.EventTypeWarning, Reason: "RolloutPaused", Action: "Rollout", Note: "version " + a.Version + ": " + a.Message})
		case b.Rollout == v1alpha1.RolloutPaused:
			out = append(out, step.KroEvent{Type: corev1.EventTypeNormal, Reason: "RolloutResumed", Action: "Rollout", Note: "version " + a.Version + ": " + a.Message})
		case a.Rollout == v1alpha1.RolloutComplete && b.Rollout != "":
			out = append(out, step.KroEvent{Type: corev1.EventTypeNormal, Reason: "RolloutComplete", Action: "Rollout", Note: "version " + a.Version + ": " + a.Message})
		}
	}
	return out
}

// readyTransitionEvent is the event for a change of the ProviderConfig's Ready: Normal
// when it turns True, Warning when it turns False or its reason changes. A message that
// changes under the same status and reason raises none. The note is the condition's
// message, which names versions and secrets, never their content.
func readyTransitionEvent(prev, cur *metav1.Condition) *step.KroEvent {
	if cur == nil || prev != nil && prev.Status == cur.Status && prev.Reason == cur.Reason {
		return nil
	}
	typ := corev1.EventTypeWarning
	if cur.Status == metav1.ConditionTrue || cur.Reason == v1alpha1.ReasonTerminating {
		typ = corev1.EventTypeNormal
	}
	return &step.KroEvent{Type: typ, Reason: cur.Reason, Action: cur.Type, Note: cur.Message}
}

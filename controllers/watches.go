package controllers

import (
	"context"
	"fmt"
	"slices"
	"strings"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	"github.com/openmcp-project/openmcp-operator/api/constants"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/owned"
	"github.com/openmcp-project/service-provider-kro/controllers/rollout"
	"github.com/openmcp-project/service-provider-kro/controllers/versions"
)

// indexTenantNamespace indexes Kros by their tenant namespace on the platform cluster,
// so that an object there maps back to its Kro.
const indexTenantNamespace = "kro.tenantNamespace"

// PlatformCacheOptions restrict what the provider caches of the platform cluster: all
// secrets of its own namespace (the sources of pull secrets), but elsewhere only the
// secrets and Flux objects it created itself; of each object's managedFields only what it
// reads (CompactManagedFields).
func PlatformCacheOptions(podNamespace string) cache.Options {
	ours := labels.SelectorFromSet(labels.Set{v1alpha1.LabelManagedBy: v1alpha1.ManagedByValue})
	return cache.Options{
		DefaultTransform: owned.CompactManagedFields,
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Secret{}: {Namespaces: map[string]cache.Config{
				podNamespace:        {},
				cache.AllNamespaces: {LabelSelector: ours},
			}},
			&sourcev1.OCIRepository{}: {Label: ours},
			&helmv2.HelmRelease{}:     {Label: ours},
			// The revisions of the versions' artifacts (rollout/revisions.go, providerconfig_revisions.go).
			&appsv1.ControllerRevision{}: {Namespaces: map[string]cache.Config{podNamespace: {LabelSelector: ours}}},
		},
	}
}

// SetupWithManager registers the reconciler with the onboarding cluster's manager and
// watches the platform cluster and the ControlPlanes' access through their caches.
func (r *KroReconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager, platform cluster.Cluster) error {
	if err := mgr.GetFieldIndexer().IndexField(ctx, &v1alpha1.Kro{}, indexTenantNamespace, func(o client.Object) []string {
		ns, err := owned.TenantNamespace(o.(*v1alpha1.Kro))
		if err != nil {
			return nil
		}
		return []string{ns}
	}); err != nil {
		return fmt.Errorf("indexing Kros by tenant namespace: %w", err)
	}
	inTenantNamespace := handler.EnqueueRequestsFromMapFunc(r.steps().watches.krosInTenantNamespace)
	b := ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha1.Kro{}, builder.WithPredicates(kroChanged{})).
		WatchesRawSource(source.Kind[client.Object](platform.GetCache(), &v1alpha1.ProviderConfig{}, r.steps().watches.providerConfigChanges())).
		WatchesRawSource(source.Kind[client.Object](platform.GetCache(), &corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.steps().watches.krosOfSecret), copyChanged(r.PodNamespace))).
		WatchesRawSource(source.Kind[client.Object](platform.GetCache(), &sourcev1.OCIRepository{}, inTenantNamespace, fluxChanged{})).
		WatchesRawSource(source.Kind[client.Object](platform.GetCache(), &helmv2.HelmRelease{}, inTenantNamespace, fluxChanged{}))
	if earlier, ok := r.Earlier.(cache.Cache); ok {
		b = b.WatchesRawSource(source.Kind[client.Object](earlier, &helmv2.HelmRelease{}, inTenantNamespace)).
			WatchesRawSource(source.Kind[client.Object](earlier, &sourcev1.OCIRepository{}, inTenantNamespace))
	}
	for _, src := range r.ControlPlanes.Sources(inTenantNamespace) {
		b = b.WatchesRawSource(src)
	}
	if r.Shard != nil {
		b = b.WatchesRawSource(r.steps().watches.shardChanges())
	}
	return b.Named("kro").WithOptions(controller.Options{MaxConcurrentReconciles: r.concurrency()}).Complete(r)
}

// kroChanged lets through what a reconcile must see: spec changes, the start of
// deletion, the provider's finalizer taken away, and annotations (the operation
// annotation). Status patches, and the finalizer the reconcile itself adds, do not
// trigger a reconcile.
type kroChanged struct{ predicate.Funcs }

func (kroChanged) Update(e event.UpdateEvent) bool {
	o, n := e.ObjectOld, e.ObjectNew
	return o.GetGeneration() != n.GetGeneration() ||
		!o.GetDeletionTimestamp().Equal(n.GetDeletionTimestamp()) ||
		(controllerutil.ContainsFinalizer(o, v1alpha1.Finalizer) && !controllerutil.ContainsFinalizer(n, v1alpha1.Finalizer)) ||
		o.GetAnnotations()[constants.OperationAnnotation] != n.GetAnnotations()[constants.OperationAnnotation]
}

// krosInTenantNamespace maps an object in a tenant namespace to the Kro it belongs to.
func (r *kroWatches) krosInTenantNamespace(ctx context.Context, o client.Object) []reconcile.Request {
	list := &v1alpha1.KroList{}
	if err := r.Onboarding.List(ctx, list, client.MatchingFields{indexTenantNamespace: o.GetNamespace()}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "mapping an object to its Kro", "namespace", o.GetNamespace())
		return nil
	}
	return requests(list.Items, nil)
}

// providerConfigChanges enqueues every Kro when the ProviderConfig appears, goes, or its
// spec changes; a change of its status only the Kros a rollout has just admitted. The
// status counts the Kros and changes with them: were every change to bring every Kro
// back, each Kro would bring all the others back.
func (r *kroWatches) providerConfigChanges() handler.EventHandler {
	all := handler.EnqueueRequestsFromMapFunc(r.krosOfProviderConfig)
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			all.Create(ctx, e, q)
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			all.Delete(ctx, e, q)
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if e.ObjectOld.GetGeneration() != e.ObjectNew.GetGeneration() || !e.ObjectNew.GetDeletionTimestamp().Equal(e.ObjectOld.GetDeletionTimestamp()) {
				all.Update(ctx, e, q)
				return
			}
			old, ok1 := e.ObjectOld.(*v1alpha1.ProviderConfig)
			pc, ok2 := e.ObjectNew.(*v1alpha1.ProviderConfig)
			if !ok1 || !ok2 || pc.Name != r.ProviderName {
				return
			}
			for _, key := range newlyAdmitted(old, pc) {
				q.Add(reconcile.Request{NamespacedName: key})
			}
		},
	}
}

// newlyAdmitted are the Kros a rollout admitted, or counted as failed, between two
// states of the ProviderConfig: each records that on its HelmRelease.
func newlyAdmitted(old, pc *v1alpha1.ProviderConfig) []types.NamespacedName {
	before := map[string]bool{}
	for _, vs := range old.Status.Versions {
		for _, m := range slices.Concat(vs.Updating, vs.Failed) {
			before[vs.Revision+" "+m.Kro+" "+m.Reason] = true
		}
	}
	var out []types.NamespacedName
	for _, vs := range pc.Status.Versions {
		for _, m := range slices.Concat(vs.Updating, vs.Failed) {
			if before[vs.Revision+" "+m.Kro+" "+m.Reason] {
				continue
			}
			if ns, name, ok := strings.Cut(m.Kro, "/"); ok {
				out = append(out, types.NamespacedName{Namespace: ns, Name: name})
			}
		}
	}
	return out
}

// krosOfProviderConfig enqueues every Kro of the provider's ProviderConfig.
func (r *kroWatches) krosOfProviderConfig(ctx context.Context, o client.Object) []reconcile.Request {
	if o.GetName() != r.ProviderName {
		return nil
	}
	list := &v1alpha1.KroList{}
	if err := r.Onboarding.List(ctx, list); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing Kros")
		return nil
	}
	return requests(list.Items, nil)
}

// krosOfSecret maps a source secret in the provider's namespace to exactly the Kros
// that use it: those whose version uses it now, and those whose running revision
// (status.revision) does, as a rollout may hold them on it (chooseRevision). A copy in a
// tenant namespace maps to its Kro.
func (r *kroWatches) krosOfSecret(ctx context.Context, o client.Object) []reconcile.Request {
	if o.GetNamespace() != r.PodNamespace {
		return r.krosInTenantNamespace(ctx, o)
	}
	versions := r.versionsUsing(ctx, o.GetName())
	revisions := r.revisionsUsing(ctx, o.GetName())
	// Most secrets in the provider's namespace are nobody's pull secret (under openmcp it
	// is openmcp-operator's, with rotating access secrets): no Kro is listed for them.
	if len(versions) == 0 && len(revisions) == 0 {
		return nil
	}
	list := &v1alpha1.KroList{}
	if err := r.Onboarding.List(ctx, list); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing Kros")
		return nil
	}
	return requests(list.Items, func(k *v1alpha1.Kro) bool { return versions[k.Spec.Version] || revisions[k.Status.Revision] })
}

// versionsUsing are the versions in the ProviderConfig whose artifacts name the secret.
func (r *kroWatches) versionsUsing(ctx context.Context, secret string) map[string]bool {
	pc := &v1alpha1.ProviderConfig{}
	if err := r.Platform.Get(ctx, client.ObjectKey{Name: r.ProviderName}, pc); err != nil {
		return nil
	}
	out := map[string]bool{}
	for i := range pc.Spec.Versions {
		if usesSecret(&pc.Spec.Versions[i], secret) {
			out[pc.Spec.Versions[i].Version] = true
		}
	}
	return out
}

// revisionsUsing are the kept revisions whose artifacts name the secret. They come from
// the platform cache, a few per version, so that the mapping costs no request and does
// not grow with the Kros.
func (r *kroWatches) revisionsUsing(ctx context.Context, secret string) map[string]bool {
	list := &appsv1.ControllerRevisionList{}
	if err := r.Platform.List(ctx, list, client.InNamespace(r.PodNamespace), client.MatchingLabels{v1alpha1.LabelProvider: r.ProviderName}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing ControllerRevisions")
		return nil
	}
	out := map[string]bool{}
	for i := range list.Items {
		v, err := rollout.RevisionArtifacts(&list.Items[i])
		if err == nil && usesSecret(v, secret) {
			out[list.Items[i].Name] = true
		}
	}
	return out
}

// usesSecret tells whether artifacts name the secret as chart or image pull secret.
func usesSecret(v *v1alpha1.KroVersion, secret string) bool {
	images, _ := versions.ImagePullSecretNames(v)
	return v.ChartPullSecret == secret || slices.Contains(images, secret)
}

func requests(kros []v1alpha1.Kro, keep func(*v1alpha1.Kro) bool) []reconcile.Request {
	var out []reconcile.Request
	for i := range kros {
		if keep == nil || keep(&kros[i]) {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&kros[i])})
		}
	}
	return out
}

package controllers

import (
	"context"
	"errors"
	"fmt"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	krov1alpha1 "github.com/kubernetes-sigs/kro/api/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/clusters"
)

// reconcileDelete removes kro from the ControlPlane and everything the provider created,
// in order: wait until no ResourceGraphDefinitions are left, delete the HelmRelease and
// wait until Flux has uninstalled kro, delete the OCIRepository and every secret copy,
// then drop the finalizer. Without a HelmRelease nothing is installed and nothing is
// guarded. It never needs the version to be on offer.
func (r *KroReconciler) reconcileDelete(ctx context.Context, s *scope) (ctrl.Result, error) {
	s.obs.deleting = true
	if !controllerutil.ContainsFinalizer(s.kro, v1alpha1.Finalizer) {
		s.finalized = true
		return ctrl.Result{}, nil
	}
	hr := &helmv2.HelmRelease{}
	hrKey := client.ObjectKey{Namespace: s.tenantNamespace, Name: fluxObjectName(r.ProviderName)}
	if err := r.PlatformReader.Get(ctx, hrKey, hr); apierrors.IsNotFound(err) {
		hr = nil
	} else if err != nil {
		return ctrl.Result{}, fmt.Errorf("reading HelmRelease %s: %w", hrKey, err)
	}
	if hr == nil {
		return r.finishDeletion(ctx, s)
	}
	if !hr.DeletionTimestamp.IsZero() {
		if err := r.uninstalling(ctx, s, hr); err != nil {
			return ctrl.Result{}, err
		}
		// The HelmRelease is watched: its disappearance brings the Kro back.
		s.obs.waitingFor = fmt.Sprintf("waiting for Flux to uninstall kro from the ControlPlane and remove HelmRelease %s", hrKey)
		return ctrl.Result{}, nil
	}

	out, err := r.guardDeletion(ctx, s, hr)
	if err != nil {
		return ctrl.Result{}, err
	}
	if out == wait {
		// The ControlPlane's RGDs and its engagement are watched: the change that unblocks
		// the deletion brings the Kro back. The poll is only the safety net.
		return ctrl.Result{RequeueAfter: s.pollInterval}, nil
	}
	s.obs.set(v1alpha1.ConditionDeletionBlocked, metav1.ConditionFalse, v1alpha1.ReasonReconcileSuccess, "no ResourceGraphDefinitions block the deletion")

	if err := r.Platform.Delete(ctx, hr); client.IgnoreNotFound(err) != nil {
		return ctrl.Result{}, fmt.Errorf("deleting HelmRelease %s: %w", hrKey, err)
	}
	// The HelmRelease is watched: its disappearance brings the Kro back.
	s.obs.waitingFor = fmt.Sprintf("waiting for Flux to uninstall kro from the ControlPlane and remove HelmRelease %s", hrKey)
	return ctrl.Result{}, nil
}

// abandonRelease suspends the HelmRelease of a ControlPlane whose access is gone for
// good, so that Flux deletes it without an uninstall it could never do.
func (r *KroReconciler) abandonRelease(ctx context.Context, s *scope, hr *helmv2.HelmRelease, na *NotAvailableError) error {
	if hr.Spec.Suspend {
		return nil
	}
	orig := hr.DeepCopy()
	hr.Spec.Suspend = true
	if err := r.Platform.Patch(ctx, hr, client.MergeFrom(orig), clusters.FieldOwner); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("suspending HelmRelease %s/%s: %w", hr.Namespace, hr.Name, err)
	}
	r.Recorder.Eventf(s.kro, nil, corev1.EventTypeWarning, v1alpha1.ReasonControlPlaneGone, "Delete",
		"the ControlPlane's access is gone (%s); HelmRelease %s/%s is suspended and deleted without uninstalling kro", na.Message, hr.Namespace, hr.Name)
	return nil
}

// uninstalling reports a deletion whose HelmRelease is already being deleted: the
// uninstall is under way and nothing stops it any more, so nothing is guarded. An RGD
// created since is named as one that will be orphaned, not as a reason to block. When
// the ControlPlane's access is gone for good meanwhile, the release is abandoned.
func (r *KroReconciler) uninstalling(ctx context.Context, s *scope, hr *helmv2.HelmRelease) error {
	msg := "the uninstall of kro from the ControlPlane is under way; nothing blocks the deletion any more"
	access, err := r.ControlPlanes.Access(ctx, s.kro)
	na, notAvailable := asNotAvailable(err)
	switch {
	case err != nil && !notAvailable:
		return err
	case access != nil:
		if list, err := access.ResourceGraphDefinitions(ctx); err == nil && len(list) > 0 {
			names := rgdNames(list)
			msg = fmt.Sprintf("%s; %d ResourceGraphDefinitions created since it began will be orphaned, as kro no longer runs to manage them: %s; delete them on the ControlPlane",
				msg, len(names), listNames(names))
		}
	case na.Gone:
		if err := r.abandonRelease(ctx, s, hr, na); err != nil {
			return err
		}
	}
	s.obs.set(v1alpha1.ConditionDeletionBlocked, metav1.ConditionFalse, v1alpha1.ReasonReconcileSuccess, msg)
	return nil
}

// finishDeletion runs once no HelmRelease is left: kro was never installed, or Flux has
// uninstalled it (or dropped it with the ControlPlane's access). Nothing on the
// ControlPlane needs guarding and its access is not needed, since it may never come (a
// pending or denied AccessRequest, the kubeconfig of a destroyed ControlPlane). What the
// provider made is removed, the access released, the tenant namespace deleted if the
// provider created it and it is empty, then the finalizer.
func (r *KroReconciler) finishDeletion(ctx context.Context, s *scope) (ctrl.Result, error) {
	access, out, err := r.cleanupAccess(ctx, s)
	if err != nil || out == wait {
		return ctrl.Result{}, err
	}
	s.obs.set(v1alpha1.ConditionDeletionBlocked, metav1.ConditionFalse, v1alpha1.ReasonReconcileSuccess,
		"kro is not installed on the ControlPlane (no HelmRelease is left): nothing blocks the deletion")
	if err := r.removeLeftovers(ctx, s, access); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.ControlPlanes.Release(ctx, s.kro); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.removeTenantNamespace(ctx, s); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.removeFinalizer(ctx, s.kro, &s.writes); err != nil {
		return ctrl.Result{}, err
	}
	s.finalized = true
	return ctrl.Result{}, nil
}

// cleanupAccess returns the ControlPlane's access when it works, to remove the image
// pull secret copies there too, and nil when it does not: a ControlPlane that cannot be
// reached does not hold up a deletion that has nothing to uninstall. It waits only while
// a connection is being made, whose outcome brings the Kro back.
func (r *KroReconciler) cleanupAccess(ctx context.Context, s *scope) (*ControlPlaneAccess, outcome, error) {
	access, err := r.ControlPlanes.Access(ctx, s.kro)
	na, notAvailable := asNotAvailable(err)
	switch {
	case err == nil:
		return access, proceed, nil
	case !notAvailable:
		return nil, proceed, err
	case na.Connecting:
		s.undecided = true
		return nil, wait, nil
	default:
		return nil, proceed, nil
	}
}

// guardDeletion lets the uninstall of an existing HelmRelease go ahead only when no
// ResourceGraphDefinitions are left on the ControlPlane. When the ControlPlane's access
// is gone for good (no kubeconfig, no or a denied AccessRequest) there is nothing left to
// protect and Flux could never uninstall: the HelmRelease is suspended, so that Flux
// deletes it without an uninstall.
func (r *KroReconciler) guardDeletion(ctx context.Context, s *scope, hr *helmv2.HelmRelease) (outcome, error) {
	access, err := r.ControlPlanes.Access(ctx, s.kro)
	na, notAvailable := asNotAvailable(err)
	switch {
	case err != nil && !notAvailable:
		return proceed, err
	case access != nil:
		list, err := access.ResourceGraphDefinitions(ctx)
		if errors.Is(err, errRGDsUnknown) {
			msg := "cannot check the ControlPlane for ResourceGraphDefinitions yet: " + err.Error()
			s.obs.set(v1alpha1.ConditionDeletionBlocked, metav1.ConditionTrue, v1alpha1.ReasonReconciling, msg)
			s.obs.waitingFor = msg
			return wait, nil
		}
		if err != nil {
			s.obs.waitingFor = "checking the ControlPlane for ResourceGraphDefinitions failed: " + summarize(err)
			return proceed, err
		}
		rgds := rgdNames(list)
		if len(rgds) > 0 {
			msg := fmt.Sprintf("%d ResourceGraphDefinitions still exist on the ControlPlane: %s; delete them to let kro be removed",
				len(rgds), listNames(rgds))
			s.obs.set(v1alpha1.ConditionDeletionBlocked, metav1.ConditionTrue, v1alpha1.ReasonUserResourcesPresent, msg)
			s.obs.waitingFor = msg
			return wait, nil
		}
		return proceed, nil
	case na.Gone:
		return proceed, r.abandonRelease(ctx, s, hr, na)
	default:
		s.undecided = na.Connecting
		msg := "cannot check the ControlPlane for ResourceGraphDefinitions: " + na.Message
		s.obs.set(v1alpha1.ConditionDeletionBlocked, metav1.ConditionTrue, v1alpha1.ReasonReconcileError, msg)
		s.obs.waitingFor = msg
		return wait, nil
	}
}

// removeLeftovers deletes the OCIRepository and every secret copy, on the ControlPlane
// too while it can be reached.
func (r *KroReconciler) removeLeftovers(ctx context.Context, s *scope, access *ControlPlaneAccess) error {
	repo := &sourcev1.OCIRepository{ObjectMeta: metav1.ObjectMeta{Namespace: s.tenantNamespace, Name: fluxObjectName(r.ProviderName)}}
	if err := r.Platform.Delete(ctx, repo); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting OCIRepository %s/%s: %w", repo.Namespace, repo.Name, err)
	}
	if access != nil {
		if err := r.removeImageSecretCopies(ctx, access.Client, s.kro, nil); err != nil {
			return err
		}
	}
	return r.removeChartSecretCopies(ctx, r.PlatformReader, s.kro, s.tenantNamespace, "")
}

// rgdNames returns the names of RGDs, in their order.
func rgdNames(list []krov1alpha1.ResourceGraphDefinition) []string {
	names := make([]string, 0, len(list))
	for i := range list {
		names = append(names, list[i].Name)
	}
	return names
}

// removeTenantNamespace deletes the tenant namespace when the provider created it for
// this Kro (it carries the provider's labels of the Kro; a namespace openmcp or anyone
// else made never does) and nothing is left in it but what Kubernetes puts into every
// namespace and the provider's own objects already being deleted. A namespace that still
// holds something is kept, and an event names what.
func (r *KroReconciler) removeTenantNamespace(ctx context.Context, s *scope) error {
	ns := &corev1.Namespace{}
	if err := r.PlatformReader.Get(ctx, client.ObjectKey{Name: s.tenantNamespace}, ns); err != nil {
		return client.IgnoreNotFound(err)
	}
	if !ns.DeletionTimestamp.IsZero() || !ownedAs(ns, newTenantNamespace(s.kro, r.ProviderName, s.tenantNamespace)) {
		return nil
	}
	left, err := r.namespaceContents(ctx, s.tenantNamespace)
	if err != nil {
		return err
	}
	if len(left) > 0 {
		r.Recorder.Eventf(s.kro, nil, corev1.EventTypeNormal, v1alpha1.ReasonTerminating, "Delete",
			"the tenant namespace %s on the platform cluster, created by the provider, is kept because it is not empty: %s; delete it once nobody needs it",
			s.tenantNamespace, listNames(left))
		return nil
	}
	// The preconditions make sure it is still the namespace just checked, labels included;
	// a conflict fails this round and the next one decides again.
	err = r.Platform.Delete(ctx, ns, client.Preconditions{UID: &ns.UID, ResourceVersion: &ns.ResourceVersion})
	if client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting tenant namespace %s: %w", s.tenantNamespace, err)
	}
	return nil
}

// namespaceContents lists what a tenant namespace holds, as "Kind/name", besides what
// Kubernetes puts into every namespace (the ConfigMap kube-root-ca.crt, the
// ServiceAccount default) and the provider's objects that are being deleted. It reads
// the kinds that end up in a tenant namespace: secrets (the kubeconfig in standalone
// mode), ConfigMaps, ServiceAccounts and Flux's OCIRepositories and HelmReleases.
func (r *KroReconciler) namespaceContents(ctx context.Context, namespace string) ([]string, error) {
	kinds := []struct {
		gvk  schema.GroupVersionKind
		skip string
	}{
		{corev1.SchemeGroupVersion.WithKind("Secret"), ""},
		{corev1.SchemeGroupVersion.WithKind("ConfigMap"), "kube-root-ca.crt"},
		{corev1.SchemeGroupVersion.WithKind("ServiceAccount"), "default"},
		{sourcev1.GroupVersion.WithKind(sourcev1.OCIRepositoryKind), ""},
		{helmv2.GroupVersion.WithKind(helmv2.HelmReleaseKind), ""},
	}
	var left []string
	for _, k := range kinds {
		list := &metav1.PartialObjectMetadataList{}
		list.SetGroupVersionKind(k.gvk.GroupVersion().WithKind(k.gvk.Kind + "List"))
		if err := r.PlatformReader.List(ctx, list, client.InNamespace(namespace)); err != nil {
			return nil, fmt.Errorf("listing %ss in tenant namespace %s: %w", k.gvk.Kind, namespace, err)
		}
		for _, o := range list.Items {
			ours := o.Labels[v1alpha1.LabelManagedBy] == v1alpha1.ManagedByValue && o.Labels[v1alpha1.LabelProvider] == labelValue(r.ProviderName)
			if o.Name == k.skip || ours && !o.DeletionTimestamp.IsZero() {
				continue
			}
			left = append(left, k.gvk.Kind+"/"+o.Name)
		}
	}
	return left, nil
}

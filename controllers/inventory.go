package controllers

import (
	"context"
	"fmt"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/clusters"
)

// maxManaged is the most entries status.managedResources holds (its MaxItems).
const maxManaged = 64

// inventory completes status.managedResources with what exists of the provider's objects
// for the Kro that the reconcile's steps did not report, because a step waited before
// reaching them or the Kro is being deleted: the chart pull secret copies, the
// OCIRepository, the image pull secret copies on the ControlPlane (while it can be
// reached) and the HelmRelease. It reads the caches, which hold exactly these objects, so
// it costs no request.
func (r *KroReconciler) inventory(ctx context.Context, s *scope) error {
	reported := map[string]bool{}
	key := func(m v1alpha1.ManagedResource) string {
		return m.Cluster + "/" + m.Kind + "/" + m.Namespace + "/" + m.Name
	}
	for _, m := range s.obs.managed {
		reported[key(m)] = true
	}
	var found []v1alpha1.ManagedResource
	add := func(m v1alpha1.ManagedResource) {
		if !reported[key(m)] {
			found = append(found, m)
		}
	}

	chartCopies := &corev1.SecretList{}
	if err := r.Platform.List(ctx, chartCopies, client.InNamespace(s.tenantNamespace), r.copyLabels(s.kro, v1alpha1.RoleChartPullSecret)); err != nil {
		return fmt.Errorf("listing chart pull secret copies in %s: %w", s.tenantNamespace, err)
	}
	for i := range chartCopies.Items {
		add(managedSecret(clusters.Platform, &chartCopies.Items[i]))
	}
	key0 := client.ObjectKey{Namespace: s.tenantNamespace, Name: fluxObjectName(r.ProviderName)}
	repo := &sourcev1.OCIRepository{}
	if err := r.Platform.Get(ctx, key0, repo); err == nil {
		status, message := fluxReadiness(repo.Generation, repo.Status.ObservedGeneration, repo.Status.Conditions)
		add(managedFlux(repo, status, beingDeleted(repo, message)))
	} else if !apierrors.IsNotFound(err) {
		return fmt.Errorf("reading OCIRepository %s: %w", key0, err)
	}
	if s.access != nil {
		imageCopies := &corev1.SecretList{}
		if err := s.access.Client.List(ctx, imageCopies, client.InNamespace(KroNamespace), r.copyLabels(s.kro, v1alpha1.RoleImagePullSecret)); err != nil {
			return fmt.Errorf("listing image pull secret copies on the ControlPlane: %w", err)
		}
		for i := range imageCopies.Items {
			add(managedSecret(controlPlaneCluster, &imageCopies.Items[i]))
		}
	}
	hr := &helmv2.HelmRelease{}
	if err := r.Platform.Get(ctx, key0, hr); err == nil {
		status, message := fluxReadiness(hr.Generation, hr.Status.ObservedGeneration, hr.Status.Conditions)
		add(managedFlux(hr, status, beingDeleted(hr, message)))
	} else if !apierrors.IsNotFound(err) {
		return fmt.Errorf("reading HelmRelease %s: %w", key0, err)
	}
	s.obs.managed = append(s.obs.managed, found...)
	if len(s.obs.managed) > maxManaged {
		s.obs.managed = s.obs.managed[:maxManaged]
	}
	return nil
}

// controlPlaneCluster is the value of ManagedResource.Cluster for objects on the ControlPlane.
const controlPlaneCluster = "controlplane"

// beingDeleted prefixes the message of an object that is being deleted.
func beingDeleted(o metav1.Object, message string) string {
	if o.GetDeletionTimestamp().IsZero() {
		return message
	}
	return shortenMessage("being deleted; " + message)
}

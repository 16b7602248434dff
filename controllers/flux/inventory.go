package flux

import (
	"context"
	"fmt"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/clusters"
	"github.com/openmcp-project/service-provider-kro/controllers/owned"
	"github.com/openmcp-project/service-provider-kro/controllers/reach"
	"github.com/openmcp-project/service-provider-kro/controllers/step"
)

// maxManaged is the most entries status.managedResources holds (its MaxItems).
const maxManaged = 64

// Inventory completes status.managedResources with what exists of the provider's objects
// for the Kro that the reconcile's steps did not report, because a step waited before
// reaching them or the Kro is being deleted: the chart pull secret copies, the
// OCIRepository, the image pull secret copies where kro runs (while that can be
// reached) and the HelmRelease. It reads the caches, which hold exactly these objects, so
// it costs no request.
func (r *Applier) Inventory(ctx context.Context, s *step.Scope) error {
	reported := map[string]bool{}
	key := func(m v1alpha1.ManagedResource) string {
		return m.Cluster + "/" + m.Kind + "/" + m.Namespace + "/" + m.Name
	}
	for _, m := range s.Obs.Managed {
		reported[key(m)] = true
	}
	var found []v1alpha1.ManagedResource
	add := func(m v1alpha1.ManagedResource) {
		if !reported[key(m)] {
			found = append(found, m)
		}
	}

	chartCopies := &corev1.SecretList{}
	if err := r.Platform.List(ctx, chartCopies, client.InNamespace(s.TenantNamespace), owned.CopyLabels(s.Kro, r.ProviderName, v1alpha1.RoleChartPullSecret)); err != nil {
		return fmt.Errorf("listing chart pull secret copies in %s: %w", s.TenantNamespace, err)
	}
	for i := range chartCopies.Items {
		add(ManagedSecret(clusters.Platform, &chartCopies.Items[i]))
	}
	flux := client.ObjectKey{Namespace: s.TenantNamespace, Name: owned.FluxObjectName(r.ProviderName)}
	if err := r.inventoryFlux(ctx, flux, &sourcev1.OCIRepository{}, s.Before, reported, add); err != nil {
		return err
	}
	site := s.Site
	if site.Cluster == nil && s.Access != nil {
		site = reach.ControlPlaneSite(s.Access) // a deletion, or a reconcile that stopped early
	}
	if site.Cluster != nil {
		imageCopies := &corev1.SecretList{}
		if err := site.Cluster.GetClient().List(ctx, imageCopies, client.InNamespace(site.Namespace), owned.CopyLabels(s.Kro, r.ProviderName, v1alpha1.RoleImagePullSecret)); err != nil {
			return fmt.Errorf("listing image pull secret copies on %s: %w", site.Where, err)
		}
		for i := range imageCopies.Items {
			add(ManagedSecret(site.Label, &imageCopies.Items[i]))
		}
	}
	if err := r.inventoryFlux(ctx, flux, &helmv2.HelmRelease{}, s.Before, reported, add); err != nil {
		return err
	}
	s.Obs.Managed = append(s.Obs.Managed, found...)
	if len(s.Obs.Managed) > maxManaged {
		s.Obs.Managed = s.Obs.Managed[:maxManaged]
	}
	return nil
}

// inventoryFlux adds the Flux object of that key (an OCIRepository or a HelmRelease) with
// its readiness (readFlux), unless a step has reported it already: then it is not read again.
func (r *Applier) inventoryFlux(ctx context.Context, key client.ObjectKey, obj client.Object, before *v1alpha1.KroStatus, reported map[string]bool, add func(v1alpha1.ManagedResource)) error {
	gvk, err := apiutil.GVKForObject(obj, clusters.Scheme)
	if err != nil {
		return err
	}
	if reported[clusters.Platform+"/"+gvk.Kind+"/"+key.Namespace+"/"+key.Name] {
		return nil
	}
	switch err := r.Platform.Get(ctx, key, obj); {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("reading %s %s: %w", gvk.Kind, key, err)
	}
	status, message := readFlux(obj, before)
	add(managedFlux(obj, status, beingDeleted(obj, message)))
	return nil
}

// beingDeleted prefixes the message of an object that is being deleted.
func beingDeleted(o metav1.Object, message string) string {
	if o.GetDeletionTimestamp().IsZero() {
		return message
	}
	return step.ShortenMessage("being deleted; " + message)
}

// ManagedSecret is a secret copy as status.managedResources lists it.
func ManagedSecret(cluster string, s *corev1.Secret) v1alpha1.ManagedResource {
	return v1alpha1.ManagedResource{Cluster: cluster, APIVersion: "v1", Kind: "Secret", Namespace: s.Namespace, Name: s.Name, Ready: metav1.ConditionTrue}
}

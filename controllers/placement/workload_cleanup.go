package placement

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/flux"
	"github.com/openmcp-project/service-provider-kro/controllers/owned"
	"github.com/openmcp-project/service-provider-kro/controllers/reach"
	"github.com/openmcp-project/service-provider-kro/controllers/step"
)

// What a deletion removes of the WorkloadCluster placement once Flux has uninstalled kro:
// on the workload cluster the tenant's namespace (with the credential and the image pull
// secret copies in it), on the ControlPlane kro's service account (its tokens stop
// working with it) and kro's RBAC. kro's CRDs stay on the ControlPlane, as Helm leaves
// the CRDs of a chart it uninstalls: they hold the tenants' ResourceGraphDefinitions'
// kinds, and removing them is the tenant's decision.

// RemoveWorkloadLeftovers removes what the provider made for kro on the workload cluster
// and on the ControlPlane (access, when it works). It returns waiting while the workload
// cluster is there but cannot be reached, so that nothing is left on it.
func (r *Cleanup) RemoveWorkloadLeftovers(ctx context.Context, s *step.Scope, access *reach.ControlPlaneAccess) (step.Result, error) {
	if s.Kro.Status.Placement != v1alpha1.PlacementWorkloadCluster {
		return step.Proceed, nil
	}
	return r.leaveWorkloadCluster(ctx, s, access)
}

// leaveWorkloadCluster removes kro's service account and RBAC from the ControlPlane
// (access, when it works) and the tenant's namespace from the workload cluster: a
// deletion, or a move to the ControlPlane.
func (r *Cleanup) leaveWorkloadCluster(ctx context.Context, s *step.Scope, access *reach.ControlPlaneAccess) (step.Result, error) {
	if err := r.withdrawKroAccess(ctx, s); err != nil {
		return step.Proceed, err
	}
	if access != nil {
		if err := r.removeKroOnControlPlane(ctx, s, access); err != nil {
			return step.Proceed, err
		}
	}
	return r.removeWorkloadNamespaceIfReachable(ctx, s)
}

// removeWorkloadNamespaceIfReachable removes the tenant's namespace on the workload
// cluster. It waits (undecided) while the connection is made, and (waiting, with the
// reason in DeletionBlocked) while the workload cluster does not answer; without a
// kubeconfig for it there is nothing to reach.
func (r *Cleanup) removeWorkloadNamespaceIfReachable(ctx context.Context, s *step.Scope) (step.Result, error) {
	w, err := r.ControlPlanes.WorkloadCluster(ctx, s.Kro, false)
	na, notAvailable := reach.AsNotAvailable(err)
	switch {
	case notAvailable && na.Connecting:
		return step.Undecided, nil
	case notAvailable && (na.Missing || na.Gone):
		return step.Proceed, nil // nothing left to reach
	case notAvailable:
		msg := fmt.Sprintf("kro is uninstalled from the workload cluster, but its namespace there cannot be removed yet: %s; this goes on when the workload cluster answers, or when its kubeconfig secret is removed", na.Message)
		if s.Obs.Deleting {
			s.Obs.Blocked(v1alpha1.ReasonUninstallStuck, msg)
		} else {
			s.Obs.Set(v1alpha1.ConditionPlacementMoved, metav1.ConditionFalse, v1alpha1.ReasonMovingPlacement, "moving kro to the ControlPlane: "+msg)
		}
		return step.Waiting, nil
	case err != nil:
		return step.Proceed, err
	}
	return step.Proceed, r.removeWorkloadNamespace(ctx, s, w)
}

// removeWorkloadNamespace deletes kro's credential and then the tenant's namespace on the
// workload cluster when the provider made it for this Kro. The credential goes first and
// by itself, so that its token is not left readable in a namespace whose deletion waits
// (for a finalizer, or with openmcp's grant of it).
func (r *Cleanup) removeWorkloadNamespace(ctx context.Context, s *step.Scope, w *reach.WorkloadClusterAccess) error {
	if err := deleteKroCredential(ctx, w.Cluster.GetAPIReader(), w.Cluster.GetClient(), s.Kro, r.ProviderName, w.Namespace); err != nil {
		return err
	}
	return removeNamespaceOn(ctx, w.Cluster.GetAPIReader(), w.Cluster.GetClient(), s.Kro, r.ProviderName, w.Namespace)
}

// removeNamespaceOn deletes the tenant's namespace on a workload cluster when the
// provider made it for this Kro.
func removeNamespaceOn(ctx context.Context, reader client.Reader, c client.Client, kro *v1alpha1.Kro, provider, name string) error {
	ns := &corev1.Namespace{}
	if err := reader.Get(ctx, client.ObjectKey{Name: name}, ns); err != nil {
		return client.IgnoreNotFound(err)
	}
	if !ns.DeletionTimestamp.IsZero() || !owned.As(ns, &corev1.Namespace{ObjectMeta: flux.NewTenantNamespace(kro, provider, name).ObjectMeta}) {
		return nil
	}
	err := c.Delete(ctx, ns, client.Preconditions{UID: &ns.UID})
	if client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting namespace %s on the workload cluster: %w", name, err)
	}
	return nil
}

// removeKroOnControlPlane deletes kro's service account (its tokens stop working first)
// and the RBAC that the provider put on the ControlPlane for this Kro.
func (r *Cleanup) removeKroOnControlPlane(ctx context.Context, s *step.Scope, access *reach.ControlPlaneAccess) error {
	if err := owned.DeleteProviders(ctx, access.Reader, access.Client, owned.KroServiceAccount, &corev1.ServiceAccount{}); err != nil {
		return fmt.Errorf("deleting ServiceAccount %s on the ControlPlane: %w", owned.KroServiceAccount, err)
	}
	rbac, err := r.kroRBAC(ctx, s, access)
	if err != nil {
		return err
	}
	for _, obj := range rbac {
		if err := access.Client.Delete(ctx, obj); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting %s on the ControlPlane: %w", obj.GetName(), err)
		}
	}
	r.parts.applied.forget(client.ObjectKeyFromObject(s.Kro))
	return nil
}

// KroOnControlPlane lists what removeKroOnControlPlane would remove, as
// status.managedResources lists it: kro's ServiceAccount (when the provider made it) and
// the RBAC the provider put on the ControlPlane for this Kro. A deletion keeps this
// record while the ControlPlane cannot be reached, to name what is left there.
func (r *Cleanup) KroOnControlPlane(ctx context.Context, s *step.Scope, access *reach.ControlPlaneAccess) ([]v1alpha1.ManagedResource, error) {
	var out []v1alpha1.ManagedResource
	sa := &corev1.ServiceAccount{}
	switch err := access.Reader.Get(ctx, owned.KroServiceAccount, sa); {
	case apierrors.IsNotFound(err):
	case err != nil:
		return nil, fmt.Errorf("reading ServiceAccount %s on the ControlPlane: %w", owned.KroServiceAccount, err)
	case sa.Labels[v1alpha1.LabelManagedBy] == v1alpha1.ManagedByValue:
		out = append(out, onControlPlane("v1", "ServiceAccount", sa))
	}
	rbac, err := r.kroRBAC(ctx, s, access)
	if err != nil {
		return nil, err
	}
	for _, obj := range rbac {
		out = append(out, onControlPlane(rbacv1.SchemeGroupVersion.String(), obj.GetObjectKind().GroupVersionKind().Kind, obj))
	}
	return out, nil
}

// rbacPageSize bounds a page of the ControlPlane's RBAC that kroRBAC lists.
const rbacPageSize = 100

// kroRBAC lists the ClusterRoleBindings and ClusterRoles the provider put on the
// ControlPlane for this Kro, bindings first, uncached (the ControlPlane's cache holds
// none of them). It reads their metadata only, a page at a time: the tenant can label
// objects as the provider's, as many and as large as it likes.
func (r *Cleanup) kroRBAC(ctx context.Context, s *step.Scope, access *reach.ControlPlaneAccess) ([]client.Object, error) {
	labels := owned.CopyLabels(s.Kro, r.ProviderName, v1alpha1.RoleKroParts)
	var out []client.Object
	for _, kind := range []string{"ClusterRoleBinding", "ClusterRole"} {
		list := &metav1.PartialObjectMetadataList{}
		list.SetGroupVersionKind(rbacv1.SchemeGroupVersion.WithKind(kind + "List"))
		opts := []client.ListOption{labels, client.Limit(rbacPageSize)}
		for {
			if err := access.Reader.List(ctx, list, opts...); err != nil {
				return nil, fmt.Errorf("listing kro's %ss on the ControlPlane: %w", kind, err)
			}
			for i := range list.Items {
				obj := list.Items[i].DeepCopy()
				obj.SetGroupVersionKind(rbacv1.SchemeGroupVersion.WithKind(kind))
				out = append(out, obj)
			}
			if list.Continue == "" {
				break
			}
			opts = []client.ListOption{labels, client.Limit(rbacPageSize), client.Continue(list.Continue)}
		}
	}
	return out, nil
}

// onControlPlane is an object on the ControlPlane as status.managedResources lists it.
func onControlPlane(apiVersion, kind string, o client.Object) v1alpha1.ManagedResource {
	return v1alpha1.ManagedResource{Cluster: owned.ControlPlaneCluster, APIVersion: apiVersion, Kind: kind,
		Namespace: o.GetNamespace(), Name: o.GetName(), Ready: metav1.ConditionTrue}
}

// deleteKroCredential deletes kro's credential secret in namespace on the workload
// cluster, when the provider made it for this Kro.
func deleteKroCredential(ctx context.Context, reader client.Reader, c client.Client, kro *v1alpha1.Kro, provider, namespace string) error {
	secret := &corev1.Secret{}
	if err := reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: owned.KroCredentialSecretName}, secret); err != nil {
		return client.IgnoreNotFound(err)
	}
	if !secret.DeletionTimestamp.IsZero() || !owned.As(secret, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Labels: owned.Labels(kro, provider, v1alpha1.RoleKroCredential)}}) {
		return nil
	}
	if err := c.Delete(ctx, secret, client.Preconditions{UID: &secret.UID}); client.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err) {
		return fmt.Errorf("deleting secret %s/%s on the workload cluster: %w", namespace, owned.KroCredentialSecretName, err)
	}
	return nil
}

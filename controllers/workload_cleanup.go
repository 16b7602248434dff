package controllers

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
)

// What a deletion removes of the WorkloadCluster placement once Flux has uninstalled kro:
// on the workload cluster the tenant's namespace (with the credential and the image pull
// secret copies in it), on the ControlPlane kro's service account (its tokens stop
// working with it) and kro's RBAC. kro's CRDs stay on the ControlPlane, as Helm leaves
// the CRDs of a chart it uninstalls: they hold the tenants' ResourceGraphDefinitions'
// kinds, and removing them is the tenant's decision.

// removeWorkloadLeftovers removes what the provider made for kro on the workload cluster
// and on the ControlPlane (access, when it works). It returns waiting while the workload
// cluster is there but cannot be reached, so that nothing is left on it.
func (r *KroReconciler) removeWorkloadLeftovers(ctx context.Context, s *scope, access *ControlPlaneAccess) (result, error) {
	if s.kro.Status.Placement != v1alpha1.PlacementWorkloadCluster {
		return proceed, nil
	}
	return r.leaveWorkloadCluster(ctx, s, access)
}

// leaveWorkloadCluster removes kro's service account and RBAC from the ControlPlane
// (access, when it works) and the tenant's namespace from the workload cluster: a
// deletion, or a move to the ControlPlane.
func (r *KroReconciler) leaveWorkloadCluster(ctx context.Context, s *scope, access *ControlPlaneAccess) (result, error) {
	if err := r.withdrawKroAccess(ctx, s); err != nil {
		return proceed, err
	}
	if access != nil {
		if err := r.removeKroOnControlPlane(ctx, s, access); err != nil {
			return proceed, err
		}
	}
	return r.removeWorkloadNamespaceIfReachable(ctx, s)
}

// removeWorkloadNamespaceIfReachable removes the tenant's namespace on the workload
// cluster. It waits (undecided) while the connection is made, and (waiting, with the
// reason in DeletionBlocked) while the workload cluster does not answer; without a
// kubeconfig for it there is nothing to reach.
func (r *KroReconciler) removeWorkloadNamespaceIfReachable(ctx context.Context, s *scope) (result, error) {
	w, err := r.ControlPlanes.WorkloadCluster(ctx, s.kro, false)
	na, notAvailable := asNotAvailable(err)
	switch {
	case notAvailable && na.Connecting:
		return undecided, nil
	case notAvailable && (na.Missing || na.Gone):
		return proceed, nil // nothing left to reach
	case notAvailable:
		msg := fmt.Sprintf("kro is uninstalled from the workload cluster, but its namespace there cannot be removed yet: %s; this goes on when the workload cluster answers, or when its kubeconfig secret is removed", na.Message)
		if s.obs.deleting {
			s.obs.blocked(v1alpha1.ReasonUninstallStuck, msg)
		} else {
			s.obs.set(v1alpha1.ConditionHelmReleaseReady, metav1.ConditionFalse, v1alpha1.ReasonMovingPlacement, "moving kro to the ControlPlane: "+msg)
		}
		return waiting, nil
	case err != nil:
		return proceed, err
	}
	return proceed, r.removeWorkloadNamespace(ctx, s, w)
}

// removeWorkloadNamespace deletes the tenant's namespace on the workload cluster when
// the provider made it for this Kro.
func (r *KroReconciler) removeWorkloadNamespace(ctx context.Context, s *scope, w *WorkloadClusterAccess) error {
	ns := &corev1.Namespace{}
	if err := w.Cluster.GetAPIReader().Get(ctx, client.ObjectKey{Name: w.Namespace}, ns); err != nil {
		return client.IgnoreNotFound(err)
	}
	if !ns.DeletionTimestamp.IsZero() || !ownedAs(ns, &corev1.Namespace{ObjectMeta: newTenantNamespace(s.kro, r.ProviderName, w.Namespace).ObjectMeta}) {
		return nil
	}
	err := w.Cluster.GetClient().Delete(ctx, ns, client.Preconditions{UID: &ns.UID})
	if client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting namespace %s on the workload cluster: %w", w.Namespace, err)
	}
	return nil
}

// removeKroOnControlPlane deletes kro's service account (its tokens stop working first)
// and the RBAC that the provider put on the ControlPlane for this Kro.
func (r *KroReconciler) removeKroOnControlPlane(ctx context.Context, s *scope, access *ControlPlaneAccess) error {
	if err := deleteProviders(ctx, access.Reader, access.Client, kroServiceAccount, &corev1.ServiceAccount{}); err != nil {
		return fmt.Errorf("deleting ServiceAccount %s on the ControlPlane: %w", kroServiceAccount, err)
	}
	for _, list := range []client.ObjectList{&rbacv1.ClusterRoleBindingList{}, &rbacv1.ClusterRoleList{}} {
		if err := access.Reader.List(ctx, list, r.copyLabels(s.kro, v1alpha1.RoleKroParts)); err != nil {
			return fmt.Errorf("listing kro's RBAC on the ControlPlane: %w", err)
		}
		objs, err := apimeta.ExtractList(list)
		if err != nil {
			return err
		}
		for _, o := range objs {
			obj := o.(client.Object)
			if err := access.Client.Delete(ctx, obj); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("deleting %s on the ControlPlane: %w", obj.GetName(), err)
			}
		}
	}
	r.applied.forget(client.ObjectKeyFromObject(s.kro))
	return nil
}

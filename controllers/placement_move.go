package controllers

import (
	"context"
	"fmt"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/owned"
	"github.com/openmcp-project/service-provider-kro/controllers/reach"
)

// Moving kro between placements. A version's placement is part of its artifacts, so a
// change of it reaches each Kro when the rollout admits it (or at once without
// spec.rollout), like any other change. Re-targeting the HelmRelease would have Flux
// install kro on the new side without uninstalling it from the old one, and two kros
// would reconcile one ControlPlane. So the move has two halves:
//
//  1. kro stops on the old side: the provider deletes the HelmRelease and Flux uninstalls
//     kro there. Helm leaves the chart's CRDs, so the tenants' ResourceGraphDefinitions,
//     their CRDs and instances stay untouched (with their UIDs).
//  2. once the HelmRelease is gone, the provider removes what it made for the old side
//     (from the workload cluster: the tenant's namespace there and kro's ServiceAccount
//     and RBAC on the ControlPlane, whose names the chart's own would collide with; from
//     the ControlPlane: the image pull secret copies in kro-system), and the usual steps
//     install kro on the new side.
//
// status.placement records where kro is (placement_record.go): the old side until the
// second half is done, whatever a reconcile that stops before the move reads of the
// version. A revert during the first half installs kro where it was, once the uninstall
// is done.

// releasePlacement is where a HelmRelease of the provider installs kro: kro-system on
// the ControlPlane as release "kro", or a tenant's namespace on a workload cluster.
func releasePlacement(hr *helmv2.HelmRelease) v1alpha1.Placement {
	if hr.Spec.ReleaseName == owned.ReleaseName && hr.Spec.TargetNamespace == owned.KroNamespace {
		return v1alpha1.PlacementControlPlane
	}
	return v1alpha1.PlacementWorkloadCluster
}

// movePlacement runs the move when the version places kro elsewhere than where it is.
func (r *placement) movePlacement(ctx context.Context, s *scope) (result, error) {
	hr := &helmv2.HelmRelease{}
	switch err := r.Platform.Get(ctx, client.ObjectKey{Namespace: s.tenantNamespace, Name: owned.FluxObjectName(r.ProviderName)}, hr); {
	case apierrors.IsNotFound(err):
		return r.leaveOldPlacement(ctx, s)
	case err != nil:
		return proceed, fmt.Errorf("reading HelmRelease %s/%s: %w", s.tenantNamespace, owned.FluxObjectName(r.ProviderName), err)
	case !r.deletion.madeFor(s.kro, hr):
		return proceed, nil // reported as a conflict by the HelmRelease step
	}
	s.placedRelease = hr
	from, to := releasePlacement(hr), v1alpha1.PlacementOf(s.version)
	if err := r.recordReleasePlacement(ctx, s, hr); err != nil {
		return proceed, err
	}
	if from == to {
		return proceed, nil
	}
	s.obs.placement = from
	if hr.DeletionTimestamp.IsZero() {
		if err := r.Platform.Delete(ctx, hr, client.Preconditions{UID: &hr.UID}); client.IgnoreNotFound(err) != nil {
			return proceed, fmt.Errorf("deleting HelmRelease %s/%s to move kro: %w", hr.Namespace, hr.Name, err)
		}
		r.Recorder.Eventf(s.kro, nil, corev1.EventTypeNormal, v1alpha1.ReasonMovingPlacement, "Move",
			"moving kro from %s to %s: Flux uninstalls it from %s first", placementWhere(from), placementWhere(to), placementWhere(from))
		hr.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	}
	s.obs.set(v1alpha1.ConditionHelmReleaseReady, metav1.ConditionFalse, v1alpha1.ReasonMovingPlacement, fmt.Sprintf(
		"moving kro from %s to %s: Flux is uninstalling kro from %s (HelmRelease %s/%s deleted at %s), so that two kros never reconcile the ControlPlane at once; ResourceGraphDefinitions, their CRDs and instances stay. %s",
		placementWhere(from), placementWhere(to), placementWhere(from), hr.Namespace, hr.Name, hr.DeletionTimestamp.UTC().Format(time.RFC3339), fluxUninstallNote(hr)))
	return waiting, nil
}

// fluxUninstallNote is what Flux reports about the uninstall, if anything.
func fluxUninstallNote(hr *helmv2.HelmRelease) string {
	if _, text := fluxUninstallError(hr); text != "" {
		return text
	}
	return "kro is installed on the new side once the uninstall is done"
}

// leaveOldPlacement removes what the provider made for kro on the side it left, once no
// HelmRelease is left; status.placement, the record of that side (placement_record.go),
// names it until then, and the version's placement from then on.
func (r *placement) leaveOldPlacement(ctx context.Context, s *scope) (result, error) {
	from, to := s.kro.Status.Placement, v1alpha1.PlacementOf(s.version)
	res, err := r.leavePlacement(ctx, s, from, to)
	if res != proceed || err != nil {
		return res, err
	}
	return proceed, r.recordPlacement(ctx, s, to)
}

// leavePlacement removes what the provider made for kro on the side from, when kro is
// to be placed on another side.
func (r *placement) leavePlacement(ctx context.Context, s *scope, from, to v1alpha1.Placement) (result, error) {
	if from == "" || from == to {
		return proceed, nil
	}
	switch from {
	case v1alpha1.PlacementControlPlane:
		if err := r.secrets.removeImageSecretCopies(ctx, s.access.Client, s.kro, owned.KroNamespace, nil); err != nil {
			return proceed, err
		}
		return proceed, nil
	default:
		res, err := r.leaveWorkloadCluster(ctx, s, s.access)
		if res != proceed || err != nil {
			s.obs.placement = from
			return res, err
		}
		if released, err := r.ControlPlanes.ReleaseWorkloadCluster(ctx, client.ObjectKeyFromObject(s.kro)); err != nil || !released {
			s.obs.placement = from
			s.obs.set(v1alpha1.ConditionHelmReleaseReady, metav1.ConditionFalse, v1alpha1.ReasonMovingPlacement, fmt.Sprintf(
				"moving kro from %s to %s: kro is uninstalled from %s; %s",
				placementWhere(from), placementWhere(to), placementWhere(from), reach.WithdrawalPending(s.tenantNamespace)))
			return waiting, err
		}
		return proceed, nil
	}
}

// placementWhere names a placement's cluster for messages.
func placementWhere(p v1alpha1.Placement) string {
	if p == v1alpha1.PlacementWorkloadCluster {
		return "the workload cluster"
	}
	return "the ControlPlane"
}

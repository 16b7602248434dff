package placement

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
	"github.com/openmcp-project/service-provider-kro/controllers/flux"
	"github.com/openmcp-project/service-provider-kro/controllers/owned"
	"github.com/openmcp-project/service-provider-kro/controllers/reach"
	"github.com/openmcp-project/service-provider-kro/controllers/step"
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

// MovePlacement runs the move when the version places kro elsewhere than where it is.
func (r *Mover) MovePlacement(ctx context.Context, s *step.Scope) (step.Result, error) {
	hr := &helmv2.HelmRelease{}
	switch err := r.Platform.Get(ctx, client.ObjectKey{Namespace: s.TenantNamespace, Name: owned.FluxObjectName(r.ProviderName)}, hr); {
	case apierrors.IsNotFound(err):
		return r.leaveOldPlacement(ctx, s)
	case err != nil:
		return step.Proceed, fmt.Errorf("reading HelmRelease %s/%s: %w", s.TenantNamespace, owned.FluxObjectName(r.ProviderName), err)
	case !owned.MadeFor(s.Kro, r.ProviderName, hr):
		return step.Proceed, nil // reported as a conflict by the HelmRelease step
	}
	s.PlacedRelease = hr
	from, to := flux.ReleasePlacement(hr), v1alpha1.PlacementOf(s.Version)
	if err := r.RecordReleasePlacement(ctx, s, hr); err != nil {
		return step.Proceed, err
	}
	if from == to {
		return step.Proceed, nil
	}
	s.Obs.Placement = from
	if hr.DeletionTimestamp.IsZero() {
		if err := r.Platform.Delete(ctx, hr, client.Preconditions{UID: &hr.UID}); client.IgnoreNotFound(err) != nil {
			return step.Proceed, fmt.Errorf("deleting HelmRelease %s/%s to move kro: %w", hr.Namespace, hr.Name, err)
		}
		r.Recorder.Eventf(s.Kro, nil, corev1.EventTypeNormal, v1alpha1.ReasonMovingPlacement, "Move",
			"moving kro from %s to %s: Flux uninstalls it from %s first", placementWhere(from), placementWhere(to), placementWhere(from))
		hr.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	}
	s.Obs.Set(v1alpha1.ConditionPlacementMoved, metav1.ConditionFalse, v1alpha1.ReasonMovingPlacement, fmt.Sprintf(
		"moving kro from %s to %s: Flux is uninstalling kro from %s (HelmRelease %s/%s deleted at %s), so that two kros never reconcile the ControlPlane at once; ResourceGraphDefinitions, their CRDs and instances stay. %s",
		placementWhere(from), placementWhere(to), placementWhere(from), hr.Namespace, hr.Name, hr.DeletionTimestamp.UTC().Format(time.RFC3339), flux.UninstallNote(hr)))
	return step.Waiting, nil
}

// leaveOldPlacement removes what the provider made for kro on the side it left, once no
// HelmRelease is left; status.placement, the record of that side (placement_record.go),
// names it until then, and the version's placement from then on.
func (r *Mover) leaveOldPlacement(ctx context.Context, s *step.Scope) (step.Result, error) {
	from, to := s.Kro.Status.Placement, v1alpha1.PlacementOf(s.Version)
	res, err := r.leavePlacement(ctx, s, from, to)
	if res != step.Proceed || err != nil {
		return res, err
	}
	return step.Proceed, r.recordPlacement(ctx, s, to)
}

// leavePlacement removes what the provider made for kro on the side from, when kro is
// to be placed on another side.
func (r *Mover) leavePlacement(ctx context.Context, s *step.Scope, from, to v1alpha1.Placement) (step.Result, error) {
	if from == "" || from == to {
		return step.Proceed, nil
	}
	switch from {
	case v1alpha1.PlacementControlPlane:
		if err := r.secrets.RemoveImageSecretCopies(ctx, s.Access.Client, s.Kro, owned.KroNamespace, nil); err != nil {
			return step.Proceed, err
		}
		return step.Proceed, nil
	default:
		res, err := r.cleanup.leaveWorkloadCluster(ctx, s, s.Access)
		if res != step.Proceed || err != nil {
			s.Obs.Placement = from
			return res, err
		}
		if released, err := r.ControlPlanes.ReleaseWorkloadCluster(ctx, client.ObjectKeyFromObject(s.Kro)); err != nil || !released {
			s.Obs.Placement = from
			s.Obs.Set(v1alpha1.ConditionPlacementMoved, metav1.ConditionFalse, v1alpha1.ReasonMovingPlacement, fmt.Sprintf(
				"moving kro from %s to %s: kro is uninstalled from %s; %s",
				placementWhere(from), placementWhere(to), placementWhere(from), reach.WithdrawalPending(s.TenantNamespace)))
			return step.Waiting, err
		}
		return step.Proceed, nil
	}
}

// placementWhere names a placement's cluster for messages.
func placementWhere(p v1alpha1.Placement) string {
	if p == v1alpha1.PlacementWorkloadCluster {
		return "the workload cluster"
	}
	return "the ControlPlane"
}

package placement

import (
	"context"
	"fmt"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/flux"
	"github.com/openmcp-project/service-provider-kro/controllers/step"
)

// status.placement is the record of where the provider put kro for a Kro: the side whose
// objects (the HelmRelease's release, and for a workload cluster the namespace there, the
// credential, kro's ServiceAccount and RBAC on the ControlPlane) a move or a deletion has
// to clean up. It is never the version's target as such:
//
//   - while the Kro's HelmRelease exists, the HelmRelease says where kro is installed
//     (releasePlacement), being deleted or not, and the record follows it;
//   - without a HelmRelease, the record keeps the side last recorded until the provider
//     has removed what it made there (leaveOldPlacement), and only then names the
//     version's placement, before any step makes anything on that side.
//
// The record is written ahead of what it guards, in a status patch of its own (at most
// once per move): the reconcile's status patch comes at its end, and a reconcile that
// stops early (a missing pull secret, a hibernated ControlPlane) or a provider that
// stops in between would otherwise leave objects on a side no record names.

// recordPlacement makes status.placement say p, at once, unless it already does.
func (r *Mover) recordPlacement(ctx context.Context, s *step.Scope, p v1alpha1.Placement) error {
	if p == "" || s.Kro.Status.Placement == p {
		return nil
	}
	patched := s.Kro.DeepCopy()
	base := patched.DeepCopy()
	patched.Status.Placement = p
	s.Writes.Before(patched)
	if err := r.Onboarding.Status().Patch(ctx, patched, client.MergeFrom(base)); err != nil {
		return fmt.Errorf("recording placement %s in the Kro's status before kro is placed there: %w", p, err)
	}
	s.Kro.ResourceVersion = patched.ResourceVersion
	s.Kro.Status.Placement, s.Before.Placement = p, p
	return nil
}

// RecordReleasePlacement records where the Kro's own HelmRelease installs kro.
func (r *Mover) RecordReleasePlacement(ctx context.Context, s *step.Scope, hr *helmv2.HelmRelease) error {
	if hr == nil {
		return nil
	}
	return r.recordPlacement(ctx, s, flux.ReleasePlacement(hr))
}

package controllers

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/rollout"
	"github.com/openmcp-project/service-provider-kro/controllers/versions"
)

// resolveVersion looks the Kro's version up in the ProviderConfig. A missing
// ProviderConfig or a version not on offer is invalid input: the step waits for the
// ProviderConfig or the Kro to change.
func (r *versionResolver) resolveVersion(ctx context.Context, s *scope) (result, error) {
	pc := &v1alpha1.ProviderConfig{}
	if err := r.Platform.Get(ctx, client.ObjectKey{Name: r.ProviderName}, pc); err != nil {
		if !apierrors.IsNotFound(err) {
			return proceed, fmt.Errorf("reading ProviderConfig %q: %w", r.ProviderName, err)
		}
		s.obs.providerConfigMissing(r.ProviderName, false)
		return waiting, nil
	}
	if !pc.DeletionTimestamp.IsZero() {
		s.obs.providerConfigMissing(r.ProviderName, true)
		return waiting, nil
	}
	s.pollInterval = versions.PollInterval(pc)
	s.fluxShard = FluxShardOf(s.kro, pc.Spec.FluxShards)
	v := versions.FindVersion(pc, s.kro.Spec.Version)
	if v == nil {
		s.obs.versionNotOffered(s.kro.Spec.Version, r.ProviderName, versions.OfferedVersions(pc))
		return waiting, nil
	}
	return r.chooseRevision(ctx, s, pc, v)
}

// chooseRevision settles which artifacts of the version the Kro is installed with: the
// ones spec.versions has now, unless the ProviderConfig rolls changes out and has not
// yet admitted this Kro, which then keeps those of the revision it runs. A Kro that runs
// none yet, or that a tenant moved to another version, gets the current ones. The
// revision a Kro runs is the one its HelmRelease records (rollout/admission.go), so that a Kro
// whose status was lost is not waved through a rollout; status.revision serves for a
// HelmRelease from before the record.
func (r *versionResolver) chooseRevision(ctx context.Context, s *scope, pc *v1alpha1.ProviderConfig, v *v1alpha1.KroVersion) (result, error) {
	update, err := rollout.RevisionName(r.ProviderName, v)
	if err != nil {
		s.obs.invalidVersion(v.Version, err)
		return waiting, nil
	}
	prev, err := r.releaseRecordOf(ctx, s)
	if err != nil {
		return proceed, err
	}
	key := client.ObjectKeyFromObject(s.kro).String()
	s.version, s.obs.revision = v, update
	s.record = rollout.NextRecord(pc, v.Version, update, key, prev)
	running := rollout.RunningRevision(s.kro, prev)
	// A Kro that was Ready with the update revision before goes back to it at once: a
	// revert of a version's artifacts returns the Kros that failed with the change.
	if pc.Spec.Rollout == nil || running == "" || running == update || s.kro.Status.Revision == update || rollout.Admitted(pc, v.Version, update, key) {
		s.gate = pc.Spec.Rollout != nil && rollout.Gated(pc, v.Version, update, key)
		s.obs.versionResolved(v)
		return proceed, nil
	}
	old, err := keptArtifacts(ctx, r.Platform, r.PodNamespace, running)
	if err != nil {
		return proceed, err
	}
	if old == nil || old.Version != v.Version {
		// No longer kept, unreadable, or another version's: the tenant changed
		// spec.version, which is never held back.
		s.obs.versionResolved(v)
		return proceed, nil
	}
	s.version, s.obs.revision = old, running
	s.record = rollout.NextRecord(pc, v.Version, running, key, prev)
	s.obs.versionHeldBack(old, running, update)
	return proceed, nil
}

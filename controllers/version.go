package controllers

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/flux"
	"github.com/openmcp-project/service-provider-kro/controllers/rollout"
	"github.com/openmcp-project/service-provider-kro/controllers/step"
	"github.com/openmcp-project/service-provider-kro/controllers/versions"
)

// versionResolver resolves a Kro's version and the revision it installs.
type versionResolver struct{ step.Clients }

// resolveVersion looks the Kro's version up in the ProviderConfig. A missing
// ProviderConfig or a version not on offer is invalid input: the step waits for the
// ProviderConfig or the Kro to change.
func (r *versionResolver) resolveVersion(ctx context.Context, s *step.Scope) (step.Result, error) {
	pc := &v1alpha1.ProviderConfig{}
	if err := r.Platform.Get(ctx, client.ObjectKey{Name: r.ProviderName}, pc); err != nil {
		if !apierrors.IsNotFound(err) {
			return step.Proceed, fmt.Errorf("reading ProviderConfig %q: %w", r.ProviderName, err)
		}
		s.Obs.ProviderConfigMissing(r.ProviderName, false)
		return step.Waiting, nil
	}
	if !pc.DeletionTimestamp.IsZero() {
		s.Obs.ProviderConfigMissing(r.ProviderName, true)
		return step.Waiting, nil
	}
	s.PollInterval = versions.PollInterval(pc)
	s.FluxShard = flux.ShardOf(s.Kro, pc.Spec.FluxShards)
	v := versions.FindVersion(pc, s.Kro.Spec.Version)
	if v == nil {
		s.Obs.VersionNotOffered(s.Kro.Spec.Version, r.ProviderName, versions.OfferedVersions(pc))
		return step.Waiting, nil
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
func (r *versionResolver) chooseRevision(ctx context.Context, s *step.Scope, pc *v1alpha1.ProviderConfig, v *v1alpha1.KroVersion) (step.Result, error) {
	update, err := rollout.RevisionName(r.ProviderName, v)
	if err != nil {
		s.Obs.InvalidVersion(v.Version, err)
		return step.Waiting, nil
	}
	prev, err := r.releaseRecordOf(ctx, s)
	if err != nil {
		return step.Proceed, err
	}
	key := client.ObjectKeyFromObject(s.Kro).String()
	s.Version, s.Obs.Revision = v, update
	s.Record = rollout.NextRecord(pc, v.Version, update, key, prev)
	running := rollout.RunningRevision(s.Kro, prev)
	// A Kro that was Ready with the update revision before goes back to it at once: a
	// revert of a version's artifacts returns the Kros that failed with the change.
	if pc.Spec.Rollout == nil || running == "" || running == update || s.Kro.Status.Revision == update || rollout.Admitted(pc, v.Version, update, key) {
		s.Gate = pc.Spec.Rollout != nil && rollout.Gated(pc, v.Version, update, key)
		s.Obs.VersionResolved(v)
		return step.Proceed, nil
	}
	old, err := keptArtifacts(ctx, r.Platform, r.PodNamespace, running)
	if err != nil {
		return step.Proceed, err
	}
	if old == nil || old.Version != v.Version {
		// No longer kept, unreadable, or another version's: the tenant changed
		// spec.version, which is never held back.
		s.Obs.VersionResolved(v)
		return step.Proceed, nil
	}
	s.Version, s.Obs.Revision = old, running
	s.Record = rollout.NextRecord(pc, v.Version, running, key, prev)
	s.Obs.VersionHeldBack(old, running, update)
	return step.Proceed, nil
}

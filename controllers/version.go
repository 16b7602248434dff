package controllers

import (
	"context"
	"fmt"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
)

// resolveVersion looks the Kro's version up in the ProviderConfig. A missing
// ProviderConfig or a version not on offer is invalid input: the step waits for the
// ProviderConfig or the Kro to change.
func (r *KroReconciler) resolveVersion(ctx context.Context, s *scope) (result, error) {
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
	s.pollInterval = pollInterval(pc)
	s.fluxShard = FluxShardOf(s.kro, pc.Spec.FluxShards)
	v := findVersion(pc, s.kro.Spec.Version)
	if v == nil {
		s.obs.versionNotOffered(s.kro.Spec.Version, r.ProviderName, offeredVersions(pc))
		return waiting, nil
	}
	return r.chooseRevision(ctx, s, pc, v)
}

// chooseRevision settles which artifacts of the version the Kro is installed with: the
// ones spec.versions has now, unless the ProviderConfig rolls changes out and has not
// yet admitted this Kro, which then keeps those of the revision it runs. A Kro that runs
// none yet, or that a tenant moved to another version, gets the current ones. The
// revision a Kro runs is the one its HelmRelease records (admission.go), so that a Kro
// whose status was lost is not waved through a rollout; status.revision serves for a
// HelmRelease from before the record.
func (r *KroReconciler) chooseRevision(ctx context.Context, s *scope, pc *v1alpha1.ProviderConfig, v *v1alpha1.KroVersion) (result, error) {
	update, err := revisionName(r.ProviderName, v)
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
	s.record = nextRecord(pc, v.Version, update, key, prev)
	running := runningRevision(s.kro, prev)
	// A Kro that was Ready with the update revision before goes back to it at once: a
	// revert of a version's artifacts returns the Kros that failed with the change.
	if pc.Spec.Rollout == nil || running == "" || running == update || s.kro.Status.Revision == update || admitted(pc, v.Version, update, key) {
		s.gate = pc.Spec.Rollout != nil && gated(pc, v.Version, update, key)
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
	s.record = nextRecord(pc, v.Version, running, key, prev)
	s.obs.versionHeldBack(old, running, update)
	return proceed, nil
}

// admitted tells whether the ProviderConfig's rollout of a version's revision has
// admitted a Kro: it is updating, or it failed and keeps the revision.
func admitted(pc *v1alpha1.ProviderConfig, version, revision, kro string) bool {
	for _, vs := range pc.Status.Versions {
		if vs.Version != version || vs.Revision != revision {
			continue
		}
		is := func(m v1alpha1.RolloutMember) bool { return m.Kro == kro }
		if slices.ContainsFunc(vs.Updating, is) || slices.ContainsFunc(vs.Failed, is) {
			return true
		}
	}
	return false
}

func findVersion(pc *v1alpha1.ProviderConfig, version string) *v1alpha1.KroVersion {
	for i := range pc.Spec.Versions {
		if pc.Spec.Versions[i].Version == version {
			return &pc.Spec.Versions[i]
		}
	}
	return nil
}

func offeredVersions(pc *v1alpha1.ProviderConfig) []string {
	out := make([]string, 0, len(pc.Spec.Versions))
	for _, v := range pc.Spec.Versions {
		out = append(out, v.Version)
	}
	return out
}

// pollInterval is the ProviderConfig's poll interval, or the default.
func pollInterval(pc *v1alpha1.ProviderConfig) time.Duration {
	if pc.Spec.PollInterval != nil && pc.Spec.PollInterval.Duration > 0 {
		return pc.Spec.PollInterval.Duration
	}
	return defaultPollInterval()
}

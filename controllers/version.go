package controllers

import (
	"context"
	"fmt"
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
	v := findVersion(pc, s.kro.Spec.Version)
	if v == nil {
		s.obs.versionNotOffered(s.kro.Spec.Version, r.ProviderName, offeredVersions(pc))
		return waiting, nil
	}
	s.version = v
	s.obs.versionResolved(v)
	return proceed, nil
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

package controllers

import (
	"context"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
)

// resolveVersion looks the Kro's version up in the ProviderConfig. A missing
// ProviderConfig or a version not on offer is invalid input: the step waits for the
// ProviderConfig or the Kro to change.
func (r *KroReconciler) resolveVersion(ctx context.Context, s *scope) (outcome, error) {
	pc := &v1alpha1.ProviderConfig{}
	if err := r.Platform.Get(ctx, client.ObjectKey{Name: r.ProviderName}, pc); err != nil {
		if !apierrors.IsNotFound(err) {
			return proceed, fmt.Errorf("reading ProviderConfig %q: %w", r.ProviderName, err)
		}
		s.obs.set(v1alpha1.ConditionVersionResolved, metav1.ConditionFalse, v1alpha1.ReasonProviderConfigMissing, fmt.Sprintf(
			"ProviderConfig %q not found on the platform cluster: the platform team must create it with the versions on offer", r.ProviderName))
		return wait, nil
	}
	if !pc.DeletionTimestamp.IsZero() {
		s.obs.set(v1alpha1.ConditionVersionResolved, metav1.ConditionFalse, v1alpha1.ReasonProviderConfigMissing, fmt.Sprintf(
			"ProviderConfig %q is being deleted: the platform team must recreate it with the versions on offer", r.ProviderName))
		return wait, nil
	}
	s.pollInterval = pollInterval(pc)
	v := findVersion(pc, s.kro.Spec.Version)
	if v == nil {
		s.obs.set(v1alpha1.ConditionVersionResolved, metav1.ConditionFalse, v1alpha1.ReasonVersionNotOffered, fmt.Sprintf(
			"version %q is not offered by ProviderConfig %q; versions on offer: %s",
			s.kro.Spec.Version, r.ProviderName, strings.Join(offeredVersions(pc), ", ")))
		return wait, nil
	}
	s.version = v
	s.obs.set(v1alpha1.ConditionVersionResolved, metav1.ConditionTrue, v1alpha1.ReasonReconcileSuccess, fmt.Sprintf(
		"version %s resolves to chart %s:%s", v.Version, chartURL(v), v.ChartVersion))
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

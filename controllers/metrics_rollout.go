package controllers

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
)

// The rollouts of the ProviderConfig's versions, read from its status at scrape time: a
// label per phase (four values), none per version, so the series stay few.
var (
	rolloutsDesc = prometheus.NewDesc("service_provider_kro_version_rollouts",
		"The ProviderConfig's versions by the phase of their rollout (Complete, Progressing, Paused, Planned).",
		[]string{"phase"}, nil)
	rolloutFailedDesc = prometheus.NewDesc("service_provider_kro_rollout_failed_kros",
		"Kros that did not become healthy with their version's new revision, over all versions of the ProviderConfig.",
		nil, nil)
	// versionKrosDesc has a label per version on offer: the platform team's list, not the
	// tenants' (a Kro asking for a version not on offer is counted by no version).
	versionKrosDesc = prometheus.NewDesc("service_provider_kro_version_kros",
		"Kros by the version they ask for (one of the ProviderConfig's versions on offer) and by whether they are Ready.",
		[]string{"version", "ready"}, nil)
)

// rolloutCollector counts the rollouts of the ProviderConfig named name on the platform
// cluster, from the cache of the ProviderConfig controller.
type rolloutCollector struct {
	platform client.Reader
	name     string
}

func (c rolloutCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- rolloutsDesc
	ch <- rolloutFailedDesc
	ch <- versionKrosDesc
}

func (c rolloutCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	pc := &v1alpha1.ProviderConfig{}
	phases := map[v1alpha1.RolloutPhase]int{v1alpha1.RolloutComplete: 0, v1alpha1.RolloutProgressing: 0, v1alpha1.RolloutPaused: 0, v1alpha1.RolloutPlanned: 0}
	failed := 0
	if err := c.platform.Get(ctx, client.ObjectKey{Name: c.name}, pc); err != nil && !apierrors.IsNotFound(err) {
		ch <- prometheus.NewInvalidMetric(rolloutsDesc, err)
		return
	}
	for _, v := range pc.Status.Versions {
		if _, known := phases[v.Rollout]; known {
			phases[v.Rollout]++
		}
		failed += len(v.Failed) + int(v.FailedMore)
		ch <- prometheus.MustNewConstMetric(versionKrosDesc, prometheus.GaugeValue, float64(v.Ready), v.Version, "true")
		ch <- prometheus.MustNewConstMetric(versionKrosDesc, prometheus.GaugeValue, float64(v.Kros-v.Ready), v.Version, "false")
	}
	for phase, n := range phases {
		ch <- prometheus.MustNewConstMetric(rolloutsDesc, prometheus.GaugeValue, float64(n), string(phase))
	}
	ch <- prometheus.MustNewConstMetric(rolloutFailedDesc, prometheus.GaugeValue, float64(failed))
}

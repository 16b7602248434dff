package controllers

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/providers/sharding"
)

// The provider's own metrics. Every label has a small, fixed set of values, so the number
// of series does not grow with the number of Kros or ControlPlanes.
var (
	krosDesc = prometheus.NewDesc("service_provider_kro_kros",
		"Kro objects by phase (Ready, Progressing, Terminating, or empty before the first reconcile).",
		[]string{"phase"}, nil)
	blockedDesc = prometheus.NewDesc("service_provider_kro_deletions_blocked",
		"Kro objects whose deletion waits for ResourceGraphDefinitions or for an unreachable ControlPlane.",
		nil, nil)
	membersDesc = prometheus.NewDesc("service_provider_kro_shard_members",
		"Replicas this replica sees sharing the ControlPlanes (--sharding), itself included; 0 while it owns nothing (joining, its Lease lost, stopping).",
		nil, nil)
	ownedDesc = prometheus.NewDesc("service_provider_kro_shard_owned_controlplanes",
		"ControlPlanes (Kros) this replica owns: all of them without --sharding.",
		nil, nil)
	rgdsDesc = prometheus.NewDesc("service_provider_kro_resourcegraphdefinitions",
		"ResourceGraphDefinitions on all ControlPlanes, by readiness, as last reported in the Kros' status.",
		[]string{"ready"}, nil)

	reconcileOutcomes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "service_provider_kro_reconcile_outcomes_total",
		Help: "Kro reconciles by outcome (ready, waiting, error) and by the reason of the Ready condition.",
	}, []string{"outcome", "reason"})
	timeToReady = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "service_provider_kro_time_to_ready_seconds",
		Help:    "Time from a Kro's creation, or from the change that made it not Ready, until it is Ready again.",
		Buckets: []float64{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600},
	})
)

// registerMetrics adds the provider's metrics to a registry; the Kros are counted from
// the onboarding cluster's cache when scraped, the rollouts from the ProviderConfig's status. Under --sharding each replica counts only
// the Kros it owns, so that the replicas' figures add up to the fleet's.
func registerMetrics(reg prometheus.Registerer, kros client.Reader, shard *sharding.Membership, rollouts rolloutCollector) error {
	for _, c := range []prometheus.Collector{reconcileOutcomes, timeToReady, kroCollector{kros, shard}, rollouts} {
		if err := reg.Register(c); err != nil {
			if _, already := err.(prometheus.AlreadyRegisteredError); !already { //nolint:errorlint // Register returns the value type, unwrapped
				return err
			}
		}
	}
	return nil
}

type kroCollector struct {
	kros  client.Reader
	shard *sharding.Membership
}

func (c kroCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- krosDesc
	ch <- blockedDesc
	ch <- rgdsDesc
	ch <- ownedDesc
	ch <- membersDesc // collected only under --sharding, described always: one set per collector
}

func (c kroCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	list := &v1alpha1.KroList{}
	if err := c.kros.List(ctx, list); err != nil {
		ch <- prometheus.NewInvalidMetric(krosDesc, err)
		return
	}
	phases := map[v1alpha1.Phase]int{"": 0, v1alpha1.PhaseReady: 0, v1alpha1.PhaseProgressing: 0, v1alpha1.PhaseTerminating: 0}
	blocked, ready, notReady, owned := 0, int32(0), int32(0), 0
	for i := range list.Items {
		if !owns(c.shard, client.ObjectKeyFromObject(&list.Items[i])) {
			continue
		}
		owned++
		st := &list.Items[i].Status
		phases[st.Phase]++
		if meta.IsStatusConditionTrue(st.Conditions, v1alpha1.ConditionDeletionBlocked) {
			blocked++
		}
		if r := st.ResourceGraphDefinitions; r != nil {
			ready += r.Ready
			notReady += r.Total - r.Ready
		}
	}
	for phase, n := range phases {
		ch <- prometheus.MustNewConstMetric(krosDesc, prometheus.GaugeValue, float64(n), string(phase))
	}
	ch <- prometheus.MustNewConstMetric(blockedDesc, prometheus.GaugeValue, float64(blocked))
	ch <- prometheus.MustNewConstMetric(ownedDesc, prometheus.GaugeValue, float64(owned))
	if c.shard != nil {
		ch <- prometheus.MustNewConstMetric(membersDesc, prometheus.GaugeValue, float64(len(c.shard.Members())))
	}
	ch <- prometheus.MustNewConstMetric(rgdsDesc, prometheus.GaugeValue, float64(ready), "true")
	ch <- prometheus.MustNewConstMetric(rgdsDesc, prometheus.GaugeValue, float64(notReady), "false")
}

// observeReconcile records one reconcile's outcome, and the time to Ready when the Kro
// just became Ready.
func observeReconcile(kro *v1alpha1.Kro, before, after *v1alpha1.KroStatus, err error, now time.Time) {
	ready := meta.FindStatusCondition(after.Conditions, v1alpha1.ConditionReady)
	outcome, reason := "waiting", v1alpha1.ReasonReconciling
	if ready != nil {
		reason = ready.Reason
		if ready.Status == metav1.ConditionTrue {
			outcome = "ready"
		}
	}
	if err != nil {
		outcome, reason = "error", v1alpha1.ReasonReconcileError
	}
	reconcileOutcomes.WithLabelValues(outcome, reason).Inc()

	if d, ok := becameReady(kro, before, after, now); ok {
		timeToReady.Observe(d.Seconds())
	}
}

// becameReady tells how long a Kro took to become Ready, when this reconcile made it so:
// from the moment Ready last turned False (a change of spec or circumstances), or from
// the Kro's creation when it was never Ready before.
func becameReady(kro *v1alpha1.Kro, before, after *v1alpha1.KroStatus, now time.Time) (time.Duration, bool) {
	if !meta.IsStatusConditionTrue(after.Conditions, v1alpha1.ConditionReady) ||
		meta.IsStatusConditionTrue(before.Conditions, v1alpha1.ConditionReady) {
		return 0, false
	}
	start := kro.CreationTimestamp.Time
	if prev := meta.FindStatusCondition(before.Conditions, v1alpha1.ConditionReady); prev != nil && !prev.LastTransitionTime.IsZero() {
		start = prev.LastTransitionTime.Time
	}
	if start.IsZero() || now.Before(start) {
		return 0, false
	}
	return now.Sub(start), true
}

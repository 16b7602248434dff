package controllers

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
)

// metricValue gathers the registry the provider serves on /metrics and returns the value
// of the series with the given labels (gauge or counter), or the sample count of a
// histogram; -1 when absent.
func metricValue(g Gomega, name string, labels map[string]string) float64 {
	families, err := metrics.Registry.Gather()
	g.Expect(err).NotTo(HaveOccurred())
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if !hasLabels(m, labels) {
				continue
			}
			switch {
			case m.Gauge != nil:
				return m.GetGauge().GetValue()
			case m.Counter != nil:
				return m.GetCounter().GetValue()
			case m.Histogram != nil:
				return float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return -1
}

func hasLabels(m *dto.Metric, want map[string]string) bool {
	for k, v := range want {
		found := false
		for _, l := range m.GetLabel() {
			found = found || (l.GetName() == k && l.GetValue() == v)
		}
		if !found {
			return false
		}
	}
	return true
}

func TestMetrics(t *testing.T) {
	g := withClusters(t)
	ns := newNamespace(t, g)
	readyBefore := metricValue(g, "service_provider_kro_time_to_ready_seconds", nil)
	k := readyKro(t, g, ns, "measured", baseVersion)
	rgd := newRGD(g, controlPlane.Client, uniq("counted"))
	t.Cleanup(func() {
		g.Expect(controlPlane.Client.Delete(context.Background(), rgd)).To(Succeed())
		deleteKro(g, k)
	})

	g.Eventually(func(g Gomega) {
		g.Expect(metricValue(g, "service_provider_kro_kros", map[string]string{"phase": "Ready"})).To(BeNumerically(">=", 1))
		g.Expect(metricValue(g, "service_provider_kro_reconcile_outcomes_total", map[string]string{"outcome": "ready", "reason": v1alpha1.ReasonReconcileSuccess})).To(BeNumerically(">=", 1))
		g.Expect(metricValue(g, "service_provider_kro_time_to_ready_seconds", nil)).To(BeNumerically(">", readyBefore))
		g.Expect(metricValue(g, "service_provider_kro_controlplanes", map[string]string{"phase": "Engaged"})).To(BeNumerically(">=", 1))
		g.Expect(metricValue(g, "service_provider_kro_resourcegraphdefinitions", map[string]string{"ready": "false"})).To(BeNumerically(">=", 1))
		g.Expect(metricValue(g, "service_provider_kro_deletions_blocked", nil)).To(BeNumerically(">=", 0))
		g.Expect(metricValue(g, "service_provider_kro_version_rollouts", map[string]string{"phase": string(v1alpha1.RolloutComplete)})).To(BeNumerically(">=", 1))
		g.Expect(metricValue(g, "service_provider_kro_rollout_failed_kros", nil)).To(BeNumerically(">=", 0))
		g.Expect(metricValue(g, "service_provider_kro_version_kros", map[string]string{"version": baseVersion, "ready": "true"})).To(BeNumerically(">=", 1))
	}, timeout, interval).Should(Succeed())
}

func TestBecameReady(t *testing.T) {
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	kro := &v1alpha1.Kro{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.Time{Time: created}}}
	cond := func(status metav1.ConditionStatus, at time.Time) v1alpha1.KroStatus {
		return v1alpha1.KroStatus{CommonStatus: v1alpha1.CommonStatus{Conditions: []metav1.Condition{
			{Type: v1alpha1.ConditionReady, Status: status, LastTransitionTime: metav1.Time{Time: at}},
		}}}
	}
	now := created.Add(90 * time.Second)
	cases := []struct {
		name          string
		before, after v1alpha1.KroStatus
		want          time.Duration
		ok            bool
	}{
		{"first Ready counts from creation", v1alpha1.KroStatus{}, cond(metav1.ConditionTrue, now), 90 * time.Second, true},
		{"Ready again counts from the loss", cond(metav1.ConditionFalse, created.Add(80*time.Second)), cond(metav1.ConditionTrue, now), 10 * time.Second, true},
		{"staying Ready is not counted", cond(metav1.ConditionTrue, created), cond(metav1.ConditionTrue, created), 0, false},
		{"not Ready is not counted", v1alpha1.KroStatus{}, cond(metav1.ConditionFalse, now), 0, false},
	}
	for _, tc := range cases {
		got, ok := becameReady(kro, &tc.before, &tc.after, now)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: got %s, %v; want %s, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

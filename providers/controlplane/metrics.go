package controlplane

import (
	"github.com/prometheus/client_golang/prometheus"
)

// controlPlanesDesc reports how many ControlPlanes are in each phase; the phase is the
// only label, so the series stay few however many ControlPlanes there are.
var controlPlanesDesc = prometheus.NewDesc(
	"service_provider_kro_controlplanes",
	"ControlPlanes known to the provider, by engagement phase (Connecting, Engaged, Unreachable).",
	[]string{"phase"}, nil,
)

// probesDesc counts the probes of engaged ControlPlanes by what called for them: a
// ControlPlane quiet for the quiet period, a failed request of its own, or one that
// was unreachable at the last probe.
var probesDesc = prometheus.NewDesc(
	"service_provider_kro_controlplane_probes_total",
	"Probes of engaged ControlPlanes, by cause (quiet, failure, unreachable).",
	[]string{"cause"}, nil,
)

// probeCause is what called for a probe.
type probeCause int

const (
	causeQuiet probeCause = iota
	causeFailure
	causeUnreachable
	causes
)

var causeNames = [causes]string{"quiet", "failure", "unreachable"}

// Collector exposes the provider's ControlPlanes as metrics, computed at scrape time.
func (p *Provider) Collector() prometheus.Collector { return collector{p} }

type collector struct{ p *Provider }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- controlPlanesDesc
	ch <- probesDesc
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	counts := map[Phase]int{Connecting: 0, Engaged: 0, Unreachable: 0}
	c.p.mu.Lock()
	for _, e := range c.p.clusters {
		counts[e.state.Phase]++
	}
	c.p.mu.Unlock()
	for phase, n := range counts {
		ch <- prometheus.MustNewConstMetric(controlPlanesDesc, prometheus.GaugeValue, float64(n), string(phase))
	}
	for cause, name := range causeNames {
		ch <- prometheus.MustNewConstMetric(probesDesc, prometheus.CounterValue, float64(c.p.probes[cause].Load()), name)
	}
}

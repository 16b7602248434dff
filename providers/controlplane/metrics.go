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

// Collector exposes the provider's ControlPlanes as metrics, computed at scrape time.
func (p *Provider) Collector() prometheus.Collector { return collector{p} }

type collector struct{ p *Provider }

func (c collector) Describe(ch chan<- *prometheus.Desc) { ch <- controlPlanesDesc }

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
}

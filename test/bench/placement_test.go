package bench

import (
	"maps"
	"strings"
	"testing"
)

func TestRatio(t *testing.T) {
	for _, c := range []struct {
		wl, cp float64
		want   string
	}{
		{50, 25, "2.00×"},
		{1, 3, "0.33×"},
		{0, 5, "0.00×"},
		{10, 0, "—"},   // nothing to compare with: the ControlPlane placement has none
		{1, -0.2, "—"}, // a memory difference lost in the noise
		{-1, 2, "—"},
	} {
		if got := Ratio(c.wl, c.cp); got != c.want {
			t.Errorf("Ratio(%v, %v) = %q, want %q", c.wl, c.cp, got, c.want)
		}
	}
}

func TestObjectsAdded(t *testing.T) {
	before := map[string]int{"namespaces": 5, "secrets": 3, "leases.coordination.k8s.io": 2, "events": 4}
	after := map[string]int{"namespaces": 15, "secrets": 13, "leases.coordination.k8s.io": 2, "serviceaccounts": 1}
	want := map[string]int{"namespaces": 10, "secrets": 10, "serviceaccounts": 1, "events": -4}
	if got := ObjectsAdded(before, after); !maps.Equal(got, want) {
		t.Fatalf("ObjectsAdded = %v, want %v", got, want)
	}
	if got := ObjectsAdded(nil, nil); len(got) != 0 {
		t.Fatalf("nothing listed: %v", got)
	}
}

func placementSample() *PlacementResults {
	return &PlacementResults{
		Kros: 100, SharedAPIServers: 2, ChartVersion: "0.9.4", Duration: "2m0s",
		ControlPlane: &PlacementRun{
			Placement: "ControlPlane", Kros: 100, CPUMsPerKro: 20, ProviderCores: 0.4, RSSMiBPerTenant: 0.5, HeapMiBPerTenant: 0.25,
			CreatedToReady: Dist{Count: 100, Median: 2000, P99: 4000}, CreatedToApplied: Dist{Count: 100, P99: 3000},
			SecondsToAllReady: 4.1, KroReconciles: 300, RequestsTotal: 2000, Engaged: 100, MachineBusy: 0.9,
			ProviderRequests: map[string]float64{"platform GET": 1500, "onboarding PATCH": 500},
			Workload:         WorkloadCost{RequestsTotal: 0, RSSMiBBefore: 200, RSSMiBAfter: 200},
		},
		WorkloadCluster: &PlacementRun{
			Placement: "WorkloadCluster", Kros: 100, CPUMsPerKro: 50, ProviderCores: 0.3, RSSMiBPerTenant: 1.25, HeapMiBPerTenant: -0.1,
			CreatedToReady: Dist{Count: 100, Median: 3000, P99: 8000}, CreatedToApplied: Dist{Count: 100, P99: 6000},
			SecondsToAllReady: 8.2, KroReconciles: 700, RequestsTotal: 4500, Engaged: 200, MachineBusy: 0.99,
			Workload: WorkloadCost{
				Namespaces: 100, Secrets: 100, ObjectsAdded: map[string]int{"namespaces": 100, "secrets": 100}, ObjectsAddedTotal: 200,
				Requests: map[string]float64{"APPLY": 100, "POST": 100}, RequestsTotal: 200, Watches: 100, RSSMiBBefore: 200, RSSMiBAfter: 230,
			},
		},
	}
}

func TestPlacementMarkdown(t *testing.T) {
	md := Markdown(&Results{Mode: "provider", Placement: placementSample()}, "l.svg", "m.svg")
	for _, want := range []string{
		"## Placement: kro on the ControlPlane or on a shared workload cluster",
		"| measure | ControlPlane | WorkloadCluster | WorkloadCluster / ControlPlane |",
		"| provider CPU per new Kro, ms | 20.0 | 50.0 | 2.50× |",
		"| provider RSS per tenant, MiB | 0.500 | 1.250 | 2.50× |",
		"| provider Go heap in use per tenant, MiB | 0.250 | -0.100 | — |",
		"| Kro created → Ready, p50 | 2.00 s | 3.00 s | 1.50× |",
		"| Kro created → Ready, p99 | 4.00 s | 8.00 s | 2.00× |",
		"| Kro reconciles per Kro | 3.0 | 7.0 | 2.33× |",
		"| clusters engaged per tenant | 1 | 2 | 2.00× |",
		"| machine CPU busy over the window | 90 % | 99 % | — |",
		"| workload cluster: the provider's namespaces per tenant (listed) | 0.00 | 1.00 | — |",
		"| workload cluster: objects added per tenant (every kind listed) | 0.00 | 2.00 | — |",
		"| workload cluster: watches opened per tenant | 0.00 | 1.00 | — |",
		"| workload cluster: its kube-apiserver's RSS per tenant, MiB | 0.00 | 0.30 | — |",
		"- WorkloadCluster: provider requests none;",
		"workload cluster: objects added namespaces 100, secrets 100, requests APPLY 100, POST 100",
		"- ControlPlane: provider requests onboarding PATCH 500, platform GET 1500;",
		"Reproduce: `go tool task bench -- -modes placement -placement-kros 100`",
	} {
		expectIn(t, "placement markdown", md, want)
	}

	// A run that failed in the second placement keeps the first's figures.
	r := placementSample()
	r.WorkloadCluster, r.SharedAPIServers = nil, 1
	md = Markdown(&Results{Mode: "provider", Placement: r}, "l.svg", "m.svg")
	for _, want := range []string{
		"| provider CPU per new Kro, ms | 20.0 | — | — |",
		"-modes placement -placement-kros 100 -shared-apiservers 1`",
	} {
		expectIn(t, "placement markdown without the WorkloadCluster run", md, want)
	}
	if strings.Contains(md, "- WorkloadCluster:") {
		t.Error("a missing run is described")
	}
	if strings.Contains(Markdown(&Results{Mode: "provider"}, "l.svg", "m.svg"), "## Placement") {
		t.Error("a run without the placement mode renders its section")
	}
}

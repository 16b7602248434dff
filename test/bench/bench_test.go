package bench

import (
	"encoding/xml"
	"math"
	"strings"
	"testing"
	"time"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
)

func TestSummarizeNearestRank(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 100; i++ {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	d := Summarize(ds)
	want := Dist{Count: 100, Median: 50, P95: 95, P99: 99, Max: 100}
	if d != want {
		t.Fatalf("Summarize(1..100 ms) = %+v, want %+v", d, want)
	}
	if got := SummarizeMs([]float64{7}); got != (Dist{Count: 1, Median: 7, P95: 7, P99: 7, Max: 7}) {
		t.Fatalf("one value: %+v", got)
	}
	if got := SummarizeMs(nil); got != (Dist{}) {
		t.Fatalf("no values: %+v", got)
	}
	// Unsorted input, not modified.
	in := []float64{3, 1, 2}
	if got := SummarizeMs(in); got.Median != 2 || got.Max != 3 || in[0] != 3 {
		t.Fatalf("unsorted: %+v, input %v", got, in)
	}
}

func TestSlope(t *testing.T) {
	b, a := Slope([]float64{0, 10, 50, 100}, []float64{40, 45, 65, 90})
	if math.Abs(b-0.5) > 1e-9 || math.Abs(a-40) > 1e-9 {
		t.Fatalf("slope %v intercept %v, want 0.5 and 40", b, a)
	}
	if b, _ := Slope([]float64{1}, []float64{2}); b != 0 {
		t.Fatalf("one point: slope %v", b)
	}
}

func TestParseProm(t *testing.T) {
	text := `# HELP apiserver_request_total Counter
# TYPE apiserver_request_total counter
apiserver_request_total{code="201",component="apiserver",resource="secrets",verb="POST"} 3
apiserver_request_total{code="200",component="apiserver",resource="leases",verb="PUT"} 9
apiserver_request_total{code="200",resource="kroes",subresource="status",verb="PATCH"} 2
process_resident_memory_bytes 4.194304e+07
weird{label="with \"quote\", comma"} 1
`
	s := ParseProm(text)
	if got := Sum(s, "process_resident_memory_bytes", nil); got != 41943040 {
		t.Fatalf("rss %v", got)
	}
	writes := SumBy(s, "apiserver_request_total", func(l map[string]string) (string, bool) {
		return l["verb"] + " " + l["resource"] + "/" + l["subresource"], l["resource"] != "leases"
	})
	if writes["POST secrets/"] != 3 || writes["PATCH kroes/status"] != 2 || len(writes) != 2 {
		t.Fatalf("writes %v", writes)
	}
	if got := Sum(s, "weird", func(l map[string]string) bool { return l["label"] == `with "quote", comma` }); got != 1 {
		t.Fatalf("escaped label not read: %v", s[len(s)-1].Labels)
	}
	if d := Delta(map[string]float64{"a": 1, "b": 2}, map[string]float64{"a": 1, "b": 5, "c": 1}); len(d) != 2 || d["b"] != 3 || d["c"] != 1 {
		t.Fatalf("delta %v", d)
	}
}

func sample() *Results {
	r := &Results{Mode: "provider", Duration: "3m0s", Machine: Machine{CPUs: 2}}
	r.Steps = []Step{
		{N: 10, Burst: 10, Applied: Dist{Count: 10, Median: 100, P95: 150, P99: 180, Max: 190}, Ready: Dist{Count: 10, P99: 300}, HelmReadyToKroReady: Dist{Count: 10, P99: 80}, AppliedPerSecond: 20, RSSMiB: 50, HeapMiB: 20},
		{N: 50, Burst: 40, Applied: Dist{Count: 40, Median: 300, P99: 2500}, Ready: Dist{Count: 40, P99: 3000}, HelmReadyToKroReady: Dist{Count: 40, P99: 120}, AppliedPerSecond: 12, RSSMiB: 70, HeapMiB: 30,
			ProviderCores: 0.42, ProviderCPUMsPerKro: 14, MachineBusy: 0.98},
	}
	r.Memory = Memory{BaselineRSSMiB: 40, BaselineHeapMiB: 15, RSSSlope: 0.6, HeapSlope: 0.3, MaxN: 50, RSSAtMaxMiB: 70, HeapAtMaxMiB: 30}
	r.RGDDeletion = Dist{Count: 4, P99: 140}
	r.HelmReadyToKroReady = Dist{Count: 10, P99: 90}
	r.Reconciler = Reconciler{Workers: 1, Reconciles: 150, PerKro: 3, MeanMs: 200}
	r.Params = Params{Steps: []int{10, 50}, SharedAPIServers: 2, Dedicated: 2, Concurrency: 20, Repeats: 3, IdleWindow: "1m0s"}
	r.SecretRestored = Dist{Count: 4, P99: 60}
	r.ChartSecretRotation = Rotation{Copies: 52, ToLast: Dist{Count: 3, Max: 900}}
	r.Idle = Idle{Kros: 52, WindowSeconds: 60}
	r.Restart = Restart{Kros: 52, WriteRequests: 150, WriteRequestsByVerb: map[string]float64{"PATCH": 150}, ObjectChanges: 104}
	r.Targets = Evaluate(r)
	return r
}

func TestEvaluate(t *testing.T) {
	met := map[string]bool{}
	for _, tg := range sample().Targets {
		met[tg.Name] = tg.Met
	}
	for name, want := range map[string]bool{
		"last RGD deleted → blocked deletion done":                    true,
		"replicated secret deleted on a ControlPlane → restored":      true,
		"source chart pull secret rotated → last tenant copy updated": true,
		"HelmRelease Ready → Kro Ready":                               true,
		"Kro created → OCIRepository and HelmRelease applied":         false, // p99 2.5 s in the largest burst
		"provider memory per engaged ControlPlane":                    true,
		"API writes at steady state":                                  true,
		"API writes after a restart":                                  false,
	} {
		if got, ok := met[name]; !ok || got != want {
			t.Errorf("target %q: met=%v (present %v), want %v", name, got, ok, want)
		}
	}
}

func TestMarkdown(t *testing.T) {
	md := Markdown(sample(), "benchmarks-latency.svg", "benchmarks-memory.svg")
	for _, want := range []string{
		"# Benchmarks",
		"**Provider mode:**",
		"| Kro created → OCIRepository and HelmRelease applied | burst of 500: p99 < 2 s | burst of 40: p99 2.50 s",
		"largest burst measured is 40, not 500",
		"the machine's 2 cores were 98 % busy",
		"14 ms of CPU per Kro",
		"the provider alone would need about 3.5 cores",
		"| 0.42 | 98 % |",
		"| 50 | 40 | 300 ms / 0 ms / 2.50 s / 0 ms |",
		"![memory against N](benchmarks-memory.svg)",
		"## Method",
		"## Machine and parameters",
		"Reproduce: `go tool task bench -- -steps 10,50 -shared-apiservers 2 -repeats 3`",
	} {
		expectIn(t, "markdown", md, want)
	}
	if strings.Contains(md, "## Real Flux") {
		t.Error("a run without real Flux renders its section")
	}

	r := sample()
	r.Flux = &FluxResults{
		ControlPlanes: 2, Repeats: 3, Flux: "source-controller v1.9.4, helm-controller v1.6.4", Chart: "0.9.4",
		Ready:                  Dist{Count: 6, Median: 7500, P99: 7700},
		RGDDeletion:            Dist{Count: 6, P99: 600},
		RGDDeletionToUninstall: Dist{Count: 6, P99: 34},
		Setup:                  map[string]float64{"clusters": 4, "flux": 0.2},
	}
	r.Targets = Evaluate(r)
	md = Markdown(r, "l.svg", "m.svg")
	for _, want := range []string{
		"## Real Flux",
		"| measure | target | measured | met | why not, and what would reach it | real Flux, N=2 |",
		"p99 34 ms to the HelmRelease deleted, 600 ms to the Kro gone",
		"| Kro created → Ready (chart pulled, kro installed and Available) | 6 | 7.50 s |",
		"clusters 4.0 s, flux 0.2 s",
	} {
		expectIn(t, "markdown with real Flux", md, want)
	}

	sharded := *r.Flux
	sharded.Shards = &FluxShardResults{
		Keys: []string{"shard-1", "shard-2"}, Spread: []v1alpha1.FluxShardStatus{{Key: "shard-1", Kros: 3}, {Key: "shard-2", Kros: 1}},
		Reconciled:       map[string]int{"": 0, "shard-1": 3, "shard-2": 1, "shard-3": 2},
		ControllerRSSMiB: map[string]float64{"shard-1/helm-controller": 40.5},
		Move:             FluxShardMove{AddedKey: "shard-3", Moved: 2, Stayed: 2, ToRelabelledMs: 1500, ToReconciledMs: 2100, ReleasesBefore: 4, ReleasesAfter: 4},
	}
	r.FluxSharded = &sharded
	md = Markdown(r, "l.svg", "m.svg")
	for _, want := range []string{
		"## Real Flux, sharded",
		"| Kros per key (ProviderConfig `status.fluxShards`) | shard-1 3, shard-2 1 |",
		"reconciled (`gotk_reconcile_duration_seconds`) | unsharded 0, shard-1 3, shard-2 1, shard-3 2 |",
		"| key `shard-3` added: Kros moved, stayed | 2, 2 |",
		"every moved HelmRelease carries the new key | 1.50 s |",
		"before → after the move | 4 → 4 |",
		"-modes fluxshards -flux-controlplanes 2 -flux-shards 2 -repeats 3",
	} {
		expectIn(t, "markdown with sharded Flux", md, want)
	}
}

func expectIn(t *testing.T, what, text, want string) {
	t.Helper()
	if !strings.Contains(text, want) {
		t.Errorf("%s lacks %q", what, want)
	}
}

func TestCharts(t *testing.T) {
	r := sample()
	for name, svg := range map[string]string{"latency": LatencyChart(r), "memory": MemoryChart(r)} {
		if err := xml.Unmarshal([]byte(svg), new(struct{})); err != nil {
			t.Fatalf("%s chart is not well-formed XML: %v", name, err)
		}
		if strings.Count(svg, "<polyline") < 2 || !strings.Contains(svg, "<svg") {
			t.Fatalf("%s chart lacks its lines:\n%s", name, svg)
		}
	}
	if !strings.Contains(MemoryChart(r), ">RSS<") {
		t.Fatal("memory chart has no RSS legend")
	}
	for v, want := range map[float64]float64{0.3: 1, 7: 10, 12: 20, 180: 200, 2500: 5000, 100: 100} {
		if got := niceCeil(v); got != want {
			t.Errorf("niceCeil(%v) = %v, want %v", v, got, want)
		}
	}
}

func TestRotationTargetUsesTheStepAtOneHundred(t *testing.T) {
	r := sample()
	r.ChartSecretRotation = Rotation{Copies: 602, ToLast: Dist{Count: 5, Max: 12000}}
	r.ChartSecretRotationAtTarget = Rotation{Copies: 100, ToLast: Dist{Count: 5, Max: 800}}
	for _, tg := range Evaluate(r) {
		if tg.Name != "source chart pull secret rotated → last tenant copy updated" {
			continue
		}
		if !tg.Met || tg.Note != "" || !strings.Contains(tg.Measured, "800 ms for 100 copies; with all 602: 12.00 s") {
			t.Fatalf("rotation target: %+v", tg)
		}
		return
	}
	t.Fatal("no rotation target")
}

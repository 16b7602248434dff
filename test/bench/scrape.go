package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"sort"
	"strings"
	"time"

	"k8s.io/client-go/discovery"

	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

func (h *harness) scrapeProvider() ([]Sample, error) { return scrape(h.metrics) }

// scrape reads the Prometheus metrics at url.
func scrape(url string) ([]Sample, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	return ParseProm(string(b)), nil
}

func kroController(l map[string]string) bool { return l["controller"] == "kro" }

type providerState struct {
	engaged, depth, reconciles, rss, heap, cpu float64
	reconcileSeconds, workers                  float64
	requests                                   map[string]float64
}

func (h *harness) providerState() (providerState, error) {
	s, err := h.scrapeProvider()
	if err != nil {
		return providerState{}, err
	}
	return providerState{
		engaged:          Sum(s, "service_provider_kro_controlplanes", func(l map[string]string) bool { return l["phase"] == "Engaged" }),
		depth:            Sum(s, "workqueue_depth", func(l map[string]string) bool { return l["name"] == "kro" }),
		reconciles:       Sum(s, "controller_runtime_reconcile_total", kroController),
		rss:              Sum(s, "process_resident_memory_bytes", nil),
		heap:             Sum(s, "go_memstats_heap_inuse_bytes", nil),
		cpu:              Sum(s, "process_cpu_seconds_total", nil),
		reconcileSeconds: Sum(s, "controller_runtime_reconcile_time_seconds_sum", kroController),
		workers:          Sum(s, "controller_runtime_max_concurrent_reconciles", kroController),
		requests: SumBy(s, "rest_client_requests_total", func(l map[string]string) (string, bool) {
			return l["method"], true
		}),
	}, nil
}

// waitSettled waits until the provider has engaged n ControlPlanes and its queue is empty.
// It returns the time of the first of three polls in a row that found it so.
func (h *harness) waitSettled(ctx context.Context, n int, minReconciles float64) (time.Time, error) {
	deadline := time.Now().Add(waitTimeout)
	quiet := 0
	var since time.Time
	for {
		now := time.Now()
		st, err := h.providerState()
		if err == nil && int(st.engaged) == n && st.depth == 0 && st.reconciles >= minReconciles {
			if quiet == 0 {
				since = now
			}
			quiet++
			if quiet >= 3 {
				return since, nil
			}
		} else {
			quiet = 0
		}
		if time.Now().After(deadline) {
			return since, fmt.Errorf("provider not settled: engaged %v of %d, queue %v, reconciles %v (err %w)", st.engaged, n, st.depth, st.reconciles, err)
		}
		select {
		case <-ctx.Done():
			return since, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// memory samples RSS (median) and heap in use (minimum, the closest to the live heap
// without forcing a GC) over five seconds.
func (h *harness) memory(ctx context.Context) (rssMiB, heapMiB float64, err error) {
	var rss, heap []float64
	for i := range 5 {
		if i > 0 {
			select {
			case <-ctx.Done():
				return 0, 0, ctx.Err()
			case <-time.After(time.Second):
			}
		}
		st, err := h.providerState()
		if err != nil {
			return 0, 0, err
		}
		rss = append(rss, st.rss/(1<<20))
		heap = append(heap, st.heap/(1<<20))
	}
	sort.Float64s(rss)
	return round(rss[len(rss)/2]), round(slices.Min(heap)), nil
}

// apiserverWrites sums write requests on every API server by cluster kind and resource,
// leaving out leases (the API servers' own heartbeats).
func (h *harness) apiserverWrites(ctx context.Context) (map[string]float64, error) {
	all := map[string]float64{}
	for _, c := range append(append([]*testenv.Cluster{h.onboarding, h.platform}, h.shared...), h.dedicated...) {
		dc, err := discovery.NewDiscoveryClientForConfig(c.Config)
		if err != nil {
			return nil, err
		}
		b, err := dc.RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
		if err != nil {
			return nil, fmt.Errorf("scraping %s: %w", c.Name, err)
		}
		role := c.Name
		if strings.HasPrefix(role, "shared-") || strings.HasPrefix(role, "dedicated-") {
			role = "controlplane"
		}
		for k, v := range SumBy(ParseProm(string(b)), "apiserver_request_total", func(l map[string]string) (string, bool) {
			if !slices.Contains(writeVerbs, l["verb"]) || l["resource"] == "leases" {
				return "", false
			}
			r := l["resource"]
			if l["subresource"] != "" {
				r += "/" + l["subresource"]
			}
			return role + " " + l["verb"] + " " + r, true
		}) {
			all[k] += v
		}
	}
	return all, nil
}

func total(m map[string]float64) float64 {
	var t float64
	for _, v := range m {
		t += v
	}
	return t
}

func writesOf(requests map[string]float64) float64 {
	var t float64
	for _, v := range writeVerbs {
		t += requests[v]
	}
	return t
}

func machine() Machine {
	m := Machine{CPUs: runtime.NumCPU(), OS: runtime.GOOS + "/" + runtime.GOARCH}
	if out, err := exec.Command("go", "version").Output(); err == nil {
		m.GoVersion = strings.TrimSpace(strings.TrimPrefix(string(out), "go version "))
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb float64
		if _, err := fmt.Sscanf(strings.SplitN(string(b), "\n", 2)[0], "MemTotal: %f kB", &kb); err == nil {
			m.MemoryGiB = round(kb / (1 << 20))
		}
	}
	return m
}

package bench

import (
	"context"
	"fmt"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
)

// workloadState is what the harness reads from the workload cluster's API server: the
// objects of every kind it lists, its requests by verb (leases excluded), its open
// watches and its RSS.
type workloadState struct {
	objects  map[string]int
	requests map[string]float64
	watches  float64
	rss      float64
}

// workloadState reads the workload cluster's API server. The harness's own requests (the listing, discovery) stay out of the difference of two
// states when the first is taken objectsFirst and the second not: then no listing lies
// between the two scrapes of the metrics.
func (h *harness) workloadState(ctx context.Context, objectsFirst bool) (workloadState, error) {
	var st workloadState
	cfg := rest.CopyConfig(h.workload.Config)
	cfg.WarningHandler = rest.NoWarnings{} // deprecated kinds are listed too
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return st, err
	}
	if objectsFirst {
		if st.objects, err = countObjects(ctx, dc, cfg); err != nil {
			return st, err
		}
	}
	b, err := dc.RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return st, fmt.Errorf("scraping the workload cluster's API server: %w", err)
	}
	s := ParseProm(string(b))
	st.requests = SumBy(s, "apiserver_request_total", func(l map[string]string) (string, bool) {
		return l["verb"], l["resource"] != "leases"
	})
	st.watches = Sum(s, "apiserver_longrunning_requests", func(l map[string]string) bool { return l["verb"] == "WATCH" })
	st.rss = Sum(s, "process_resident_memory_bytes", nil)
	if !objectsFirst {
		st.objects, err = countObjects(ctx, dc, cfg)
	}
	return st, err
}

// countObjects lists every kind the API server serves (metadata only) and counts the
// objects by resource ("secrets", "leases.coordination.k8s.io").
func countObjects(ctx context.Context, dc discovery.DiscoveryInterface, cfg *rest.Config) (map[string]int, error) {
	lists, err := discovery.ServerPreferredResources(dc)
	if err != nil && len(lists) == 0 {
		return nil, fmt.Errorf("discovering the workload cluster's resources: %w", err)
	}
	md, err := metadata.NewForConfig(fast(cfg))
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			return nil, err
		}
		for _, r := range l.APIResources {
			if strings.Contains(r.Name, "/") || !slices.Contains(r.Verbs, "list") {
				continue
			}
			items, err := md.Resource(gv.WithResource(r.Name)).List(ctx, metav1.ListOptions{})
			if apierrors.IsNotFound(err) || apierrors.IsMethodNotSupported(err) {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("listing %s on the workload cluster: %w", r.Name, err)
			}
			name := r.Name
			if gv.Group != "" {
				name += "." + gv.Group
			}
			out[name] = len(items.Items)
		}
	}
	return out, nil
}

// ObjectsAdded is after minus before by resource, for the resources whose count changed.
func ObjectsAdded(before, after map[string]int) map[string]int {
	out := map[string]int{}
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	for k, v := range before {
		if _, ok := after[k]; !ok && v != 0 {
			out[k] = -v
		}
	}
	return out
}

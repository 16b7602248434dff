package config

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestServiceMonitorSelectsTheService: config/monitoring's ServiceMonitor selects the
// provider's Service of the platform overlay, in its namespace, by a port it has, over
// HTTPS as the provider serves its metrics; and its binding names the shipped reader role.
func TestServiceMonitorSelectsTheService(t *testing.T) {
	objs := render(t, "monitoring")
	platform := render(t, PlatformOverlay)
	svcs := kindOf[corev1.Service](t, platform, "Service")
	if len(svcs) != 1 {
		t.Fatalf("the platform overlay has %d Services, want 1", len(svcs))
	}
	svc := svcs[0]
	var monitors, bindings int
	for _, o := range objs {
		switch o.GetKind() {
		case "ServiceMonitor":
			monitors++
			if o.GetNamespace() != svc.Namespace {
				t.Errorf("the ServiceMonitor is in %q, the Service in %q", o.GetNamespace(), svc.Namespace)
			}
			labels, _, _ := unstructured.NestedStringMap(o.Object, "spec", "selector", "matchLabels")
			for k, v := range labels {
				if svc.Labels[k] != v {
					t.Errorf("the ServiceMonitor selects %s=%s, the Service has %q", k, v, svc.Labels[k])
				}
			}
			endpoints, _, _ := unstructured.NestedSlice(o.Object, "spec", "endpoints")
			if len(endpoints) != 1 {
				t.Fatalf("the ServiceMonitor has %d endpoints, want 1", len(endpoints))
			}
			ep := endpoints[0].(map[string]any)
			found := false
			for _, p := range svc.Spec.Ports {
				found = found || p.Name == ep["port"]
			}
			if !found || ep["scheme"] != "https" {
				t.Errorf("the ServiceMonitor scrapes port %v over %v; the Service has %+v and the metrics are HTTPS", ep["port"], ep["scheme"], svc.Spec.Ports)
			}
		case "ClusterRoleBinding":
			bindings++
			if name, _, _ := unstructured.NestedString(o.Object, "roleRef", "name"); name != MetricsReaderRole {
				t.Errorf("the binding names %q, want %s", name, MetricsReaderRole)
			}
		}
	}
	if monitors != 1 || bindings != 1 {
		t.Errorf("config/monitoring has %d ServiceMonitors and %d bindings, want 1 of each", monitors, bindings)
	}
}

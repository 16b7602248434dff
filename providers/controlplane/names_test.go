package controlplane

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
)

func TestClusterNameRoundTrip(t *testing.T) {
	for _, id := range []types.NamespacedName{
		{Namespace: "project-a--ws-b", Name: "cp-1"},
		{Namespace: "a", Name: "b.c"},
	} {
		got, ok := ControlPlane(ClusterName(id))
		if !ok || got != id {
			t.Errorf("ControlPlane(ClusterName(%v)) = %v, %v", id, got, ok)
		}
		got, workload, ok := Tenant(ClusterName(id))
		if !ok || workload || got != id {
			t.Errorf("Tenant(ClusterName(%v)) = %v, %t, %t", id, got, workload, ok)
		}
		got, workload, ok = Tenant(WorkloadClusterName(id))
		if !ok || !workload || got != id {
			t.Errorf("Tenant(WorkloadClusterName(%v)) = %v, %t, %t", id, got, workload, ok)
		}
		if got, ok := ControlPlane(WorkloadClusterName(id)); ok {
			t.Errorf("ControlPlane(WorkloadClusterName(%v)) = %v, want false: a workload cluster is no ControlPlane", id, got)
		}
	}
	for _, bad := range []multicluster.ClusterName{"", "a", "/b", "a/", "a/b/c", "workload:", "workload:a", "workload:a/b/c"} {
		if id, ok := ControlPlane(bad); ok {
			t.Errorf("ControlPlane(%q) = %v, want false", bad, id)
		}
		if id, _, ok := Tenant(bad); ok {
			t.Errorf("Tenant(%q) = %v, want false", bad, id)
		}
	}
}

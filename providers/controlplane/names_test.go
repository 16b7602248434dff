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
	}
	for _, bad := range []multicluster.ClusterName{"", "a", "/b", "a/", "a/b/c"} {
		if id, ok := ControlPlane(bad); ok {
			t.Errorf("ControlPlane(%q) = %v, want false", bad, id)
		}
	}
}

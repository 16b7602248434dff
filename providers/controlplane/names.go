package controlplane

import (
	"strings"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
)

// ClusterName is the multicluster-runtime name of a ControlPlane, derived from its
// identity on the onboarding cluster (the namespace and name of the object that stands
// for it). It is the one place where the two are mapped, in both directions.
func ClusterName(controlPlane types.NamespacedName) multicluster.ClusterName {
	return multicluster.ClusterName(controlPlane.Namespace + "/" + controlPlane.Name)
}

// ControlPlane returns the onboarding identity of a ControlPlane cluster name, and false
// when the name is not one that ClusterName produced.
func ControlPlane(name multicluster.ClusterName) (types.NamespacedName, bool) {
	ns, n, ok := strings.Cut(string(name), "/")
	if !ok || ns == "" || n == "" || strings.Contains(n, "/") {
		return types.NamespacedName{}, false
	}
	return types.NamespacedName{Namespace: ns, Name: n}, true
}

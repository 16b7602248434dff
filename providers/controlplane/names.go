package controlplane

import (
	"strings"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
)

// workloadPrefix starts the cluster name of a tenant's workload cluster. A ControlPlane's
// name never holds a colon (namespaces and names are DNS labels and subdomains).
const workloadPrefix = "workload:"

// ClusterName is the multicluster-runtime name of a ControlPlane, derived from its
// identity on the onboarding cluster (the namespace and name of the object that stands
// for it). It is the one place where the two are mapped, in both directions.
func ClusterName(controlPlane types.NamespacedName) multicluster.ClusterName {
	return multicluster.ClusterName(controlPlane.Namespace + "/" + controlPlane.Name)
}

// WorkloadClusterName is the multicluster-runtime name of the workload cluster a
// ControlPlane's kro runs on, as that tenant reaches it. Tenants that share a workload
// cluster each engage it under their own name, with a cache of their own namespace there.
func WorkloadClusterName(controlPlane types.NamespacedName) multicluster.ClusterName {
	return workloadPrefix + ClusterName(controlPlane)
}

// ControlPlane returns the onboarding identity of a ControlPlane cluster name, and false
// when the name is not one that ClusterName produced.
func ControlPlane(name multicluster.ClusterName) (types.NamespacedName, bool) {
	ns, n, ok := strings.Cut(string(name), "/")
	if !ok || ns == "" || n == "" || strings.Contains(n, "/") || strings.Contains(ns, ":") {
		return types.NamespacedName{}, false
	}
	return types.NamespacedName{Namespace: ns, Name: n}, true
}

// Tenant returns the ControlPlane a cluster name belongs to, whether it names the
// ControlPlane itself or its workload cluster (workload true), and false for a name
// that neither ClusterName nor WorkloadClusterName produced.
func Tenant(name multicluster.ClusterName) (controlPlane types.NamespacedName, workload bool, ok bool) {
	if rest, found := strings.CutPrefix(string(name), workloadPrefix); found {
		key, ok := ControlPlane(multicluster.ClusterName(rest))
		return key, true, ok
	}
	key, ok := ControlPlane(name)
	return key, false, ok
}

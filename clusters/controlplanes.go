package clusters

// KroNamespace is where kro is installed on every ControlPlane, and where the provider
// copies image pull secrets. A ControlPlane's cluster name is controlplane.ClusterName.
const KroNamespace = "kro-system"

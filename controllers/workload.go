package controllers

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/clusters"
	"github.com/openmcp-project/service-provider-kro/controllers/foreign"
	"github.com/openmcp-project/service-provider-kro/providers/controlplane"
)

// The WorkloadCluster placement: kro's controller runs in a namespace of its own per
// tenant on a workload cluster, which tenants may share, and reconciles the tenant's
// ControlPlane through a credential of its own. The provider reaches the workload
// cluster like a ControlPlane: the generic cluster provider engages it, under the
// tenant's own cluster name (controlplane.WorkloadClusterName), with a live cache of the
// provider's secrets in the tenant's namespace there.

// kroSite is where kro's controller runs for a Kro: kro-system on its ControlPlane, or
// the tenant's namespace on a workload cluster. Image pull secrets go there, and a
// rollout's gate reads kro's Deployment there.
type kroSite struct {
	// cluster is the engaged cluster (its cache holds the provider's secrets there).
	cluster cluster.Cluster
	// namespace is where kro runs, and release the Helm release's name.
	namespace, release string
	// where names the cluster for messages, and label for ManagedResource.Cluster.
	where, label string
}

// controlPlaneSite is kro inside the ControlPlane.
func controlPlaneSite(cp *ControlPlaneAccess) kroSite {
	return kroSite{cluster: cp.Cluster, namespace: KroNamespace, release: ReleaseName, where: "the ControlPlane", label: controlPlaneCluster}
}

// workloadSite is kro on the tenant's workload cluster.
func workloadSite(w *WorkloadClusterAccess) kroSite {
	return kroSite{cluster: w.Cluster, namespace: w.Namespace, release: w.Namespace, where: "the workload cluster", label: workloadClusterLabel}
}

// workloadClusterLabel is the value of ManagedResource.Cluster for objects on the
// workload cluster.
const workloadClusterLabel = "workload"

// WorkloadClusterAccess is how the provider and Flux reach the workload cluster a Kro's
// kro runs on.
type WorkloadClusterAccess struct {
	// Cluster is the engaged workload cluster; its cache holds the provider's secrets in
	// Namespace.
	Cluster cluster.Cluster
	// Kubeconfig is the secret in the tenant namespace on the platform cluster that Flux
	// uses to reach the workload cluster.
	Kubeconfig SecretKey
	// Namespace is the tenant's namespace on the workload cluster.
	Namespace string
	// NamespaceGranted: openmcp's cluster provider made Namespace with the provider's
	// access there (openmcp), so the provider labels it as its own rather than creating it.
	NamespaceGranted bool
}

// WorkloadNamespace is the tenant's namespace on a workload cluster: derived from the
// tenant namespace on the platform cluster, which openmcp derives from the ControlPlane,
// so it is stable and no two tenants sharing a workload cluster get the same one. The
// Helm release there has the same name, so that the chart's names cannot collide either.
func WorkloadNamespace(kro types.NamespacedName) (string, error) {
	tenant, err := clusters.TenantNamespace(kro)
	if err != nil {
		return "", fmt.Errorf("deriving the tenant namespace: %w", err)
	}
	return foreign.DNSLabel("kro-"+tenant, foreign.DNSLabelMax), nil
}

// WorkloadClusterOptions shapes the cluster of a tenant's workload cluster: its cache
// holds the provider's secrets in the tenant's namespace there, nothing else. It returns
// nil for a ControlPlane's cluster name.
func WorkloadClusterOptions(name multicluster.ClusterName) []cluster.Option {
	key, workload, ok := controlplane.Tenant(name)
	if !ok || !workload {
		return nil
	}
	ns, err := WorkloadNamespace(key)
	if err != nil {
		return nil
	}
	return []cluster.Option{controlplane.ClusterOptions(clusters.Scheme, ns,
		labels.SelectorFromSet(labels.Set{v1alpha1.LabelManagedBy: v1alpha1.ManagedByValue}), nil)}
}

// workloadKubeconfigCache watches the labelled workload cluster kubeconfig secrets on the
// platform cluster (standalone).
func workloadKubeconfigCache(platform cluster.Cluster) (cache.Cache, error) {
	return cache.New(platform.GetConfig(), cache.Options{Scheme: platform.GetScheme(), ByObject: map[client.Object]cache.ByObject{
		&corev1.Secret{}: {Label: labels.SelectorFromSet(labels.Set{v1alpha1.LabelWorkloadClusterKubeconfig: "true"})},
	}})
}

// WorkloadCluster returns the access to the workload cluster of a Kro, engaging it, or a
// *NotAvailableError while there is none.
func (c *engagedControlPlanes) WorkloadCluster(ctx context.Context, kro *v1alpha1.Kro, ask bool) (*WorkloadClusterAccess, error) {
	key := client.ObjectKeyFromObject(kro)
	tenantNamespace, err := TenantNamespace(kro)
	if err != nil {
		return nil, err
	}
	ns, err := WorkloadNamespace(key)
	if err != nil {
		return nil, err
	}
	name := controlplane.WorkloadClusterName(key)
	secret, kubeconfig, err := c.workloadKubeconfig(ctx, kro, tenantNamespace, ask)
	if na, ok := asNotAvailable(err); ok && na.Missing {
		c.provider.Remove(ctx, name)
	}
	if err != nil {
		return nil, err
	}
	cl, err := c.engaged(ctx, name, kubeconfig, "workload cluster", fmt.Sprintf("secret %s/%s", tenantNamespace, secret), v1alpha1.ReasonWorkloadClusterUnreachable)
	if err != nil {
		return nil, err
	}
	return &WorkloadClusterAccess{Cluster: cl, Kubeconfig: SecretKey{Name: secret, Key: KubeconfigKey}, Namespace: ns,
		NamespaceGranted: c.mode == AccessOpenMCP}, nil
}

func (c *engagedControlPlanes) DisengageWorkloadCluster(ctx context.Context, kro types.NamespacedName) {
	c.provider.Remove(ctx, controlplane.WorkloadClusterName(kro))
}

// ReleaseWorkloadCluster disengages a Kro's workload cluster and, under openmcp,
// withdraws its requests for it: the Kro is gone, or kro has left the workload cluster.
// It tells whether all is withdrawn.
func (c *engagedControlPlanes) ReleaseWorkloadCluster(ctx context.Context, kro types.NamespacedName) (bool, error) {
	c.DisengageWorkloadCluster(ctx, kro)
	if c.mode != AccessOpenMCP {
		return true, nil
	}
	return c.withdrawWorkloadCluster(ctx, kro)
}

// workloadKubeconfig finds the workload cluster's kubeconfig: under openmcp the secret
// of the granted AccessRequest (asked for with ask), standalone the labelled secret in
// the tenant namespace.
func (c *engagedControlPlanes) workloadKubeconfig(ctx context.Context, kro *v1alpha1.Kro, tenantNamespace string, ask bool) (string, []byte, error) {
	if c.mode == AccessOpenMCP {
		return c.openmcpWorkloadKubeconfig(ctx, kro, ask)
	}
	secret, err := firstSecret(ctx, c.workloadKubeconfigs, tenantNamespace)
	if err != nil || secret != nil {
		return secretKubeconfig(secret, err, "the workload cluster's")
	}
	return "", nil, &NotAvailableError{Missing: true, Reason: v1alpha1.ReasonWorkloadClusterMissing, Message: fmt.Sprintf(
		"the version is placed on a workload cluster, but there is none for this ControlPlane: create a Secret in namespace %s on the platform cluster labelled %s=true with the workload cluster's kubeconfig under the key %q",
		tenantNamespace, v1alpha1.LabelWorkloadClusterKubeconfig, KubeconfigKey)}
}

// engaged engages a cluster with a kubeconfig and returns it once its cache is live, or
// a *NotAvailableError that says where the engagement stands. what names the cluster
// ("ControlPlane"), from where the kubeconfig came ("secret ns/name"), unreachable the
// reason for a cluster that does not answer.
func (c *engagedControlPlanes) engaged(ctx context.Context, name multicluster.ClusterName, kubeconfig []byte, what, from, unreachable string) (cluster.Cluster, error) {
	state, err := c.provider.Ensure(name, kubeconfig)
	if err != nil {
		return nil, &NotAvailableError{Reason: v1alpha1.ReasonKubeconfigInvalid, Message: fmt.Sprintf("the %s's kubeconfig in %s is unusable: %s", what, from, err.Error())}
	}
	switch state.Phase {
	case controlplane.Engaged:
	case controlplane.Unreachable:
		return nil, &NotAvailableError{Reason: unreachable, Message: fmt.Sprintf("the %s does not answer (since %s): %s; retrying with backoff",
			what, state.Since.UTC().Format(time.RFC3339), state.Message)}
	default:
		return nil, &NotAvailableError{Connecting: true, Message: "connecting to the " + what}
	}
	cl, err := c.provider.Get(ctx, name)
	if err != nil {
		return nil, &NotAvailableError{Connecting: true, Message: "connecting to the " + what}
	}
	return cl, nil
}

// observeWorkloadCluster reaches the workload cluster of a version placed on one and
// sets where kro runs. For a version placed on the ControlPlane, kro runs there, and a
// workload cluster engaged for the Kro before is let go.
func (r *KroReconciler) observeWorkloadCluster(ctx context.Context, s *scope) (result, error) {
	if v1alpha1.PlacementOf(s.version) != v1alpha1.PlacementWorkloadCluster {
		r.ControlPlanes.DisengageWorkloadCluster(ctx, client.ObjectKeyFromObject(s.kro))
		s.site = controlPlaneSite(s.access)
		return proceed, nil
	}
	w, err := r.ControlPlanes.WorkloadCluster(ctx, s.kro, true)
	if na, ok := asNotAvailable(err); ok {
		if na.Connecting {
			return undecided, nil
		}
		s.obs.set(v1alpha1.ConditionWorkloadClusterReady, metav1.ConditionFalse, na.reason(), na.Message)
		return waiting, nil
	}
	if err != nil {
		return proceed, err
	}
	if res, err := r.switchWorkloadCluster(ctx, s, w); res != proceed || err != nil {
		return res, err
	}
	s.workload, s.site = w, workloadSite(w)
	s.obs.set(v1alpha1.ConditionWorkloadClusterReady, metav1.ConditionTrue, v1alpha1.ReasonReconcileSuccess, fmt.Sprintf(
		"kro runs in namespace %s on the workload cluster of secret %s/%s%s", w.Namespace, s.tenantNamespace, w.Kubeconfig.Name, grantedBy(w)))
	return proceed, nil
}

// DefaultKroTokenLifetime is how long the token of kro's credential for a ControlPlane
// lives; it is rotated after two thirds of that (kro_credential.go).
const DefaultKroTokenLifetime = 12 * time.Hour

// reconcileKroCredential keeps kro's own credential for the ControlPlane in the tenant's
// namespace on the workload cluster, and brings the Kro back when it is due for rotation.
func (r *KroReconciler) reconcileKroCredential(ctx context.Context, s *scope) (result, error) {
	if s.workload == nil {
		return proceed, nil
	}
	if access := r.ControlPlanes.KroAccess(); access != nil {
		return r.copyKroGrant(ctx, s, access)
	}
	lifetime := r.KroTokenLifetime
	if lifetime <= 0 {
		lifetime = DefaultKroTokenLifetime
	}
	workload := liveOnMiss{Client: s.workload.Cluster.GetClient(), live: s.workload.Cluster.GetAPIReader()}
	wait, rotated, err := ensureKroCredential(ctx, s.access.Client, s.access.Cluster.GetConfig(), workload,
		s.kro, r.ProviderName, s.workload.Namespace, lifetime, time.Now())
	if reportCredentialConflict(s, err) {
		return waiting, nil
	}
	if err != nil {
		return proceed, fmt.Errorf("preparing kro's credential for the ControlPlane: %w", err)
	}
	if rotated {
		r.Recorder.Eventf(s.kro, nil, corev1.EventTypeNormal, v1alpha1.ReasonCredentialRotated, "Rotate",
			"kro's credential for the ControlPlane (service account %s) was issued in secret %s/%s on the workload cluster",
			kroServiceAccount, s.workload.Namespace, KroCredentialSecretName)
	}
	s.requeue(wait)
	return proceed, nil
}

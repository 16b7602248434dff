package reach

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/clusters"
	"github.com/openmcp-project/service-provider-kro/controllers/foreign"
	"github.com/openmcp-project/service-provider-kro/controllers/guard"
	"github.com/openmcp-project/service-provider-kro/controllers/owned"
	"github.com/openmcp-project/service-provider-kro/providers/controlplane"
)

// The WorkloadCluster placement: kro's controller runs in a namespace of its own per
// tenant on a workload cluster, which tenants may share, and reconciles the tenant's
// ControlPlane through a credential of its own. The provider reaches the workload
// cluster like a ControlPlane: the generic cluster provider engages it, under the
// tenant's own cluster name (controlplane.WorkloadClusterName), with a live cache of the
// provider's secrets in the tenant's namespace there.

// Site is where kro's controller runs for a Kro: kro-system on its ControlPlane, or
// the tenant's namespace on a workload cluster. Image pull secrets go there, and a
// rollout's gate reads kro's Deployment there.
type Site struct {
	// Cluster is the engaged cluster (its cache holds the provider's secrets there).
	Cluster cluster.Cluster
	// Namespace is where kro runs, and release the Helm release's name.
	Namespace, Release string
	// Where names the cluster for messages, and label for ManagedResource.Cluster.
	Where, Label string
}

// Deployment is where kro's Deployment runs, for the rollout's health read.
func (s Site) Deployment() guard.KroDeployment {
	return guard.KroDeployment{Cluster: s.Cluster, Namespace: s.Namespace, Release: s.Release, Where: s.Where}
}

// ControlPlaneSite is kro inside the ControlPlane.
func ControlPlaneSite(cp *ControlPlaneAccess) Site {
	return Site{Cluster: cp.Cluster, Namespace: owned.KroNamespace, Release: owned.ReleaseName, Where: "the ControlPlane", Label: owned.ControlPlaneCluster}
}

// WorkloadSite is kro on the tenant's workload cluster.
func WorkloadSite(w *WorkloadClusterAccess) Site {
	return Site{Cluster: w.Cluster, Namespace: w.Namespace, Release: w.Namespace, Where: "the workload cluster", Label: WorkloadClusterLabel}
}

// WorkloadClusterLabel is the value of ManagedResource.Cluster for objects on the
// workload cluster.
const WorkloadClusterLabel = "workload"

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
// holds the provider's secrets in the tenant's namespace there, whole (kro's credential
// is compared by its data, placement.NeedsRotation, and the platform team, not the
// tenant, administers the workload cluster), and kro's Deployment (WorkloadSite: the
// release has the namespace's name), nothing else. It returns nil for a ControlPlane's
// cluster name.
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
		labels.SelectorFromSet(labels.Set{v1alpha1.LabelManagedBy: v1alpha1.ManagedByValue}), nil, nil),
		controlplane.WatchDeployments(ns, ns)}
}

// WorkloadKubeconfigCache watches the labelled workload cluster kubeconfig secrets on the
// platform cluster (standalone).
func WorkloadKubeconfigCache(platform cluster.Cluster) (cache.Cache, error) {
	return cache.New(platform.GetConfig(), cache.Options{Scheme: platform.GetScheme(), ByObject: map[client.Object]cache.ByObject{
		&corev1.Secret{}: {Label: labels.SelectorFromSet(labels.Set{v1alpha1.LabelWorkloadClusterKubeconfig: "true"})},
	}})
}

// WorkloadCluster returns the access to the workload cluster of a Kro, engaging it, or a
// *NotAvailableError while there is none.
func (c *Engaged) WorkloadCluster(ctx context.Context, kro *v1alpha1.Kro, ask bool) (*WorkloadClusterAccess, error) {
	key := client.ObjectKeyFromObject(kro)
	tenantNamespace, err := owned.TenantNamespace(kro)
	if err != nil {
		return nil, err
	}
	ns, err := WorkloadNamespace(key)
	if err != nil {
		return nil, err
	}
	name := controlplane.WorkloadClusterName(key)
	secret, kubeconfig, err := c.workloadKubeconfig(ctx, kro, tenantNamespace, ask)
	if na, ok := AsNotAvailable(err); ok && na.Missing {
		c.Provider.Remove(ctx, name)
	}
	if err != nil {
		return nil, err
	}
	cl, err := c.engaged(ctx, name, kubeconfig, "workload cluster", fmt.Sprintf("secret %s/%s", tenantNamespace, secret), v1alpha1.ReasonWorkloadClusterUnreachable)
	if err != nil {
		return nil, err
	}
	return &WorkloadClusterAccess{Cluster: cl, Kubeconfig: SecretKey{Name: secret, Key: owned.KubeconfigKey}, Namespace: ns,
		NamespaceGranted: c.Mode == AccessOpenMCP}, nil
}

// DisengageWorkloadCluster stops the engagement of the Kro's workload cluster.
func (c *Engaged) DisengageWorkloadCluster(ctx context.Context, kro types.NamespacedName) {
	c.Provider.Remove(ctx, controlplane.WorkloadClusterName(kro))
}

// ReleaseWorkloadCluster disengages a Kro's workload cluster and, under openmcp,
// withdraws its requests for it: the Kro is gone, or kro has left the workload cluster.
// It tells whether all is withdrawn.
func (c *Engaged) ReleaseWorkloadCluster(ctx context.Context, kro types.NamespacedName) (bool, error) {
	c.DisengageWorkloadCluster(ctx, kro)
	if c.Mode != AccessOpenMCP {
		return true, nil
	}
	return c.WithdrawWorkloadCluster(ctx, kro)
}

// workloadKubeconfig finds the workload cluster's kubeconfig: under openmcp the secret
// of the granted AccessRequest (asked for with ask), standalone the labelled secret in
// the tenant namespace.
func (c *Engaged) workloadKubeconfig(ctx context.Context, kro *v1alpha1.Kro, tenantNamespace string, ask bool) (string, []byte, error) {
	if c.Mode == AccessOpenMCP {
		return c.openmcpWorkloadKubeconfig(ctx, kro, ask)
	}
	secret, err := firstSecret(ctx, c.WorkloadKubeconfigs, tenantNamespace)
	if err != nil || secret != nil {
		return secretKubeconfig(secret, err, "the workload cluster's")
	}
	return "", nil, &NotAvailableError{Missing: true, Reason: v1alpha1.ReasonWorkloadClusterMissing, Message: fmt.Sprintf(
		"the version is placed on a workload cluster, but there is none for this ControlPlane: create a Secret in namespace %s on the platform cluster labelled %s=true with the workload cluster's kubeconfig under the key %q",
		tenantNamespace, v1alpha1.LabelWorkloadClusterKubeconfig, owned.KubeconfigKey)}
}

// engaged engages a cluster with a kubeconfig and returns it once its cache is live, or
// a *NotAvailableError that says where the engagement stands. what names the cluster
// ("ControlPlane"), from where the kubeconfig came ("secret ns/name"), unreachable the
// reason for a cluster that does not answer.
func (c *Engaged) engaged(ctx context.Context, name multicluster.ClusterName, kubeconfig []byte, what, from, unreachable string) (cluster.Cluster, error) {
	state, err := c.Provider.Ensure(name, kubeconfig)
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
	cl, err := c.Provider.Get(ctx, name)
	if err != nil {
		return nil, &NotAvailableError{Connecting: true, Message: "connecting to the " + what}
	}
	return cl, nil
}

// DefaultKroTokenLifetime is how long the token of kro's credential for a ControlPlane
// lives; it is rotated after two thirds of that (kro_credential.go).
const DefaultKroTokenLifetime = 12 * time.Hour

// EnsureWorkloadNamespace makes sure the tenant's namespace on the workload cluster
// exists and is labelled the provider's for the Kro, so that it goes with the Kro
// (workload_cleanup.go). Under openmcp, openmcp's cluster provider made it with the
// provider's access, and the provider labels it (its rights there are get, patch and
// delete of that one namespace).
func EnsureWorkloadNamespace(ctx context.Context, w *WorkloadClusterAccess, kro *v1alpha1.Kro, provider string) error {
	labels := owned.Labels(kro, provider, "")
	if !w.NamespaceGranted {
		return owned.EnsureNamespace(ctx, w.Cluster.GetClient(), w.Namespace, labels)
	}
	ns := &corev1.Namespace{}
	err := w.Cluster.GetClient().Get(ctx, client.ObjectKey{Name: w.Namespace}, ns)
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("reading namespace %s on the workload cluster: %w", w.Namespace, err)
	}
	if err == nil && labelsInclude(ns.Labels, labels) {
		return nil
	}
	desired := &corev1.Namespace{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
		ObjectMeta: metav1.ObjectMeta{Name: w.Namespace, Labels: labels}}
	if err := owned.Apply(ctx, w.Cluster.GetClient(), desired); err != nil {
		return fmt.Errorf("labelling namespace %s on the workload cluster: %w", w.Namespace, err)
	}
	return nil
}

// labelsInclude tells whether have holds every label of want.
func labelsInclude(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

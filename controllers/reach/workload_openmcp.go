package reach

import (
	"context"
	"fmt"

	clustersv1alpha1 "github.com/openmcp-project/openmcp-operator/api/clusters/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/clusters"
	"github.com/openmcp-project/service-provider-kro/controllers/owned"
)

// The WorkloadCluster placement under openmcp. The provider asks openmcp for the
// workload cluster (a ClusterRequest of purpose workload, which openmcp's scheduler may
// answer with a Cluster that tenants share) and for access to it (an AccessRequest with
// rights in the tenant's namespace there only); kro's own access to the ControlPlane is
// another AccessRequest, bound to the ClusterRoles kro's chart binds to kro (clusters/
// workload.go). The requests come with the Kro's need for them and go when kro has left
// the workload cluster or the Kro is gone.

// openmcpWorkloadKubeconfig keeps the workload ClusterRequest and AccessRequest of a Kro
// in place (only with ask: a Kro leaving its workload cluster asks for nothing) and reads
// the secret openmcp wrote for the AccessRequest once granted.
func (c *Engaged) openmcpWorkloadKubeconfig(ctx context.Context, kro *v1alpha1.Kro, ask bool) (string, []byte, error) {
	key := client.ObjectKeyFromObject(kro)
	ns, err := WorkloadNamespace(key)
	if err != nil {
		return "", nil, err
	}
	desiredCR, err := clusters.NewWorkloadClusterRequest(c.ProviderName, key)
	if err != nil {
		return "", nil, err
	}
	desiredAR, err := clusters.NewWorkloadAccessRequest(c.ProviderName, key, ns)
	if err != nil {
		return "", nil, err
	}
	if !ask {
		// Leaving: what there is may be reached, nothing is asked for anew.
		if present, err := c.inAccessCache(ctx, desiredAR); err != nil || !present {
			return "", nil, firstErr(err, &NotAvailableError{Missing: true, Reason: v1alpha1.ReasonWorkloadClusterMissing,
				Message: "there is no access to a workload cluster for this ControlPlane"})
		}
	}
	cr := &clustersv1alpha1.ClusterRequest{}
	switch err := c.Kubeconfigs.Get(ctx, client.ObjectKeyFromObject(desiredCR), cr); {
	case apierrors.IsNotFound(err) && ask:
		if err := owned.Apply(ctx, c.Platform, desiredCR); err != nil {
			return "", nil, fmt.Errorf("requesting a workload cluster with ClusterRequest %s/%s: %w", desiredCR.Namespace, desiredCR.Name, err)
		}
		return "", nil, &NotAvailableError{Message: fmt.Sprintf("waiting for openmcp to schedule ClusterRequest %s/%s of purpose %s",
			desiredCR.Namespace, desiredCR.Name, clustersv1alpha1.PURPOSE_WORKLOAD)}
	case apierrors.IsNotFound(err), err == nil && !cr.DeletionTimestamp.IsZero():
		return "", nil, &NotAvailableError{Missing: true, Reason: v1alpha1.ReasonWorkloadClusterMissing, Message: fmt.Sprintf(
			"the workload ClusterRequest %s/%s is gone or going", desiredCR.Namespace, desiredCR.Name)}
	case err != nil:
		return "", nil, fmt.Errorf("reading ClusterRequest %s/%s: %w", desiredCR.Namespace, desiredCR.Name, err)
	case cr.Status.IsDenied():
		return "", nil, &NotAvailableError{Missing: true, Reason: v1alpha1.ReasonWorkloadClusterMissing, Message: fmt.Sprintf(
			"openmcp denied ClusterRequest %s/%s of purpose %s: does openmcp-operator's scheduler map purpose %s to a ClusterProfile, and does a cluster provider serve it? Its conditions say why (kubectl -n %s get clusterrequest %s -o yaml); the provider asks again once it is deleted",
			cr.Namespace, cr.Name, clustersv1alpha1.PURPOSE_WORKLOAD, clustersv1alpha1.PURPOSE_WORKLOAD, cr.Namespace, cr.Name)}
	case !cr.Status.IsGranted():
		return "", nil, &NotAvailableError{Message: fmt.Sprintf("waiting for openmcp to schedule ClusterRequest %s/%s of purpose %s (phase %q)",
			cr.Namespace, cr.Name, clustersv1alpha1.PURPOSE_WORKLOAD, cr.Status.Phase)}
	}
	return c.grantedKubeconfig(ctx, desiredAR, ask, "the workload cluster's", func(ar *clustersv1alpha1.AccessRequest) *NotAvailableError {
		return &NotAvailableError{Reason: v1alpha1.ReasonWorkloadClusterUnreachable, Message: fmt.Sprintf(
			"openmcp denied AccessRequest %s/%s for the workload cluster; its conditions say why (kubectl -n %s get accessrequest %s -o yaml); the provider asks again once it is deleted",
			ar.Namespace, ar.Name, ar.Namespace, ar.Name)}
	})
}

// WithdrawWorkloadCluster deletes the workload AccessRequest of a Kro and, once openmcp
// has finalized it (revoked the grant) and it is gone from the cache, the ClusterRequest:
// kro has left the workload cluster. The order matters: the scheduler deletes a Cluster
// that no request holds any more, and a grant whose Cluster is gone may never be revoked.
// It tells whether both are withdrawn; when not, the AccessRequest's deletion brings the
// Kro back.
func (c *Engaged) WithdrawWorkloadCluster(ctx context.Context, kro types.NamespacedName) (bool, error) {
	key, err := clusters.WorkloadRequestKey(c.ProviderName, kro)
	if err != nil {
		return false, err
	}
	if present, err := c.withdraw(ctx, openmcpObject(key, "AccessRequest")); err != nil || present {
		return false, err
	}
	_, err = c.withdraw(ctx, openmcpObject(key, "ClusterRequest"))
	return err == nil, err
}

// WithdrawalPending says what a Kro waits for while withdrawWorkloadCluster is not done;
// the requests are in the tenant namespace.
func WithdrawalPending(tenantNamespace string) string {
	return fmt.Sprintf("openmcp is revoking the provider's access to the workload cluster (AccessRequests in %s), and then the provider withdraws its ClusterRequest for it",
		tenantNamespace)
}

// openmcpObject is an empty object of an openmcp clusters kind at key, to read or delete.
func openmcpObject(key types.NamespacedName, kind string) client.Object {
	var o client.Object = &clustersv1alpha1.AccessRequest{}
	if kind == "ClusterRequest" {
		o = &clustersv1alpha1.ClusterRequest{}
	}
	o.SetNamespace(key.Namespace)
	o.SetName(key.Name)
	o.GetObjectKind().SetGroupVersionKind(clustersv1alpha1.GroupVersion.WithKind(kind))
	return o
}

// withdraw deletes a request of the provider's when the access cache shows it, and
// tells whether the cache showed it: a request being deleted is still there until openmcp
// has finalized it.
func (c *Engaged) withdraw(ctx context.Context, o client.Object) (bool, error) {
	present, err := c.inAccessCache(ctx, o)
	if err != nil || !present {
		return false, err
	}
	if err := c.Platform.Delete(ctx, o); client.IgnoreNotFound(err) != nil {
		return true, fmt.Errorf("deleting %s %s/%s: %w", o.GetObjectKind().GroupVersionKind().Kind, o.GetNamespace(), o.GetName(), err)
	}
	return true, nil
}

// inAccessCache tells whether the access cache holds an object of o's kind and key.
func (c *Engaged) inAccessCache(ctx context.Context, o client.Object) (bool, error) {
	current := o.DeepCopyObject().(client.Object)
	err := c.Kubeconfigs.Get(ctx, client.ObjectKeyFromObject(o), current)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading %s %s/%s: %w", o.GetObjectKind().GroupVersionKind().Kind, o.GetNamespace(), o.GetName(), err)
	}
	return true, nil
}

// KroAccess is kro's own access to a ControlPlane where openmcp grants it.
type KroAccess interface {
	// Request asks for kro's access to a Kro's ControlPlane, bound to clusterRoles.
	Request(ctx context.Context, kro types.NamespacedName, clusterRoles []string) error
	// Granted returns the access secret openmcp wrote for it, unless its version is
	// known (then nil), and its version. It returns a *NotAvailableError while there is
	// none: Missing when nothing was requested.
	Granted(ctx context.Context, kro types.NamespacedName, known string) (*corev1.Secret, string, error)
	// Withdraw withdraws kro's access to a Kro's ControlPlane, if it was asked for.
	Withdraw(ctx context.Context, kro types.NamespacedName) error
}

// openmcpKroAccess is KroAccess through AccessRequests.
type openmcpKroAccess struct{ c *Engaged }

// KroAccess requests and reads kro's own access to ControlPlanes under openmcp.
func (c *Engaged) KroAccess() KroAccess {
	if c.Mode != AccessOpenMCP {
		return nil
	}
	return openmcpKroAccess{c}
}

func (a openmcpKroAccess) Request(ctx context.Context, kro types.NamespacedName, clusterRoles []string) error {
	desired, err := clusters.NewKroAccessRequest(a.c.ProviderName, kro, clusterRoles)
	if err != nil {
		return err
	}
	_, err = a.c.grantedAccessRequest(ctx, desired, true)
	if _, waiting := AsNotAvailable(err); waiting {
		return nil
	}
	return err
}

func (a openmcpKroAccess) Granted(ctx context.Context, kro types.NamespacedName, known string) (*corev1.Secret, string, error) {
	key, err := clusters.KroAccessRequestKey(a.c.ProviderName, kro)
	if err != nil {
		return nil, "", err
	}
	ar := &clustersv1alpha1.AccessRequest{}
	switch err := a.c.Kubeconfigs.Get(ctx, key, ar); {
	case apierrors.IsNotFound(err):
		return nil, "", &NotAvailableError{Missing: true, Message: fmt.Sprintf("requesting kro's access to the ControlPlane (AccessRequest %s)", key)}
	case err != nil:
		return nil, "", fmt.Errorf("reading AccessRequest %s: %w", key, err)
	case ar.Status.IsDenied():
		return nil, "", &NotAvailableError{Reason: v1alpha1.ReasonAccessDenied, Message: fmt.Sprintf(
			"openmcp denied kro's access to the ControlPlane, AccessRequest %s; its conditions say why (kubectl -n %s get accessrequest %s -o yaml); the provider asks again once it is deleted",
			key, key.Namespace, key.Name)}
	}
	name, err := clusters.GrantedSecret(ar)
	if err != nil {
		return nil, "", &NotAvailableError{Message: err.Error()}
	}
	meta := accessSecretMetadata()
	if err := a.c.Kubeconfigs.Get(ctx, types.NamespacedName{Namespace: ar.Namespace, Name: name}, meta); err == nil && meta.ResourceVersion == known {
		return nil, known, nil
	}
	secret := &corev1.Secret{}
	if err := a.c.Reader.Get(ctx, types.NamespacedName{Namespace: ar.Namespace, Name: name}, secret); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, "", &NotAvailableError{Message: fmt.Sprintf("AccessRequest %s names secret %s, which does not exist", key, name)}
		}
		return nil, "", fmt.Errorf("reading access secret %s/%s: %w", ar.Namespace, name, err)
	}
	return secret, secret.ResourceVersion, nil
}

func (a openmcpKroAccess) Withdraw(ctx context.Context, kro types.NamespacedName) error {
	return a.c.withdrawKroAccess(ctx, kro)
}

// withdrawKroAccess deletes kro's AccessRequest for a Kro's ControlPlane, if any.
func (c *Engaged) withdrawKroAccess(ctx context.Context, kro types.NamespacedName) error {
	key, err := clusters.KroAccessRequestKey(c.ProviderName, kro)
	if err != nil {
		return err
	}
	_, err = c.withdraw(ctx, openmcpObject(key, "AccessRequest"))
	return err
}

// firstErr is err, or else alt.
func firstErr(err error, alt error) error {
	if err != nil {
		return err
	}
	return alt
}

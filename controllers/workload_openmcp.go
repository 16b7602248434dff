package controllers

import (
	"context"
	"fmt"
	"strconv"
	"time"

	clustersv1alpha1 "github.com/openmcp-project/openmcp-operator/api/clusters/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/clusters"
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
func (c *engagedControlPlanes) openmcpWorkloadKubeconfig(ctx context.Context, kro *v1alpha1.Kro, ask bool) (string, []byte, error) {
	key := client.ObjectKeyFromObject(kro)
	ns, err := WorkloadNamespace(key)
	if err != nil {
		return "", nil, err
	}
	desiredCR, err := clusters.NewWorkloadClusterRequest(c.providerName, key)
	if err != nil {
		return "", nil, err
	}
	desiredAR, err := clusters.NewWorkloadAccessRequest(c.providerName, key, ns)
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
	switch err := c.kubeconfigs.Get(ctx, client.ObjectKeyFromObject(desiredCR), cr); {
	case apierrors.IsNotFound(err) && ask:
		if err := apply(ctx, c.platform, desiredCR); err != nil {
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
	return c.grantedKubeconfig(ctx, desiredAR, "the workload cluster's", func(ar *clustersv1alpha1.AccessRequest) *NotAvailableError {
		return &NotAvailableError{Reason: v1alpha1.ReasonWorkloadClusterUnreachable, Message: fmt.Sprintf(
			"openmcp denied AccessRequest %s/%s for the workload cluster; its conditions say why (kubectl -n %s get accessrequest %s -o yaml); the provider asks again once it is deleted",
			ar.Namespace, ar.Name, ar.Namespace, ar.Name)}
	})
}

// withdrawWorkloadCluster deletes the workload AccessRequest of a Kro and, once openmcp
// has finalized it (revoked the grant) and it is gone from the cache, the ClusterRequest:
// kro has left the workload cluster. The order matters: the scheduler deletes a Cluster
// that no request holds any more, and a grant whose Cluster is gone may never be revoked.
// It tells whether both are withdrawn; when not, the AccessRequest's deletion brings the
// Kro back.
func (c *engagedControlPlanes) withdrawWorkloadCluster(ctx context.Context, kro types.NamespacedName) (bool, error) {
	key, err := clusters.WorkloadRequestKey(c.providerName, kro)
	if err != nil {
		return false, err
	}
	if present, err := c.withdraw(ctx, openmcpObject(key, "AccessRequest")); err != nil || present {
		return false, err
	}
	_, err = c.withdraw(ctx, openmcpObject(key, "ClusterRequest"))
	return err == nil, err
}

// withdrawalPending says what a Kro waits for while withdrawWorkloadCluster is not done;
// the requests are in the tenant namespace.
func withdrawalPending(tenantNamespace string) string {
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
func (c *engagedControlPlanes) withdraw(ctx context.Context, o client.Object) (bool, error) {
	present, err := c.inAccessCache(ctx, o)
	if err != nil || !present {
		return false, err
	}
	if err := c.platform.Delete(ctx, o); client.IgnoreNotFound(err) != nil {
		return true, fmt.Errorf("deleting %s %s/%s: %w", o.GetObjectKind().GroupVersionKind().Kind, o.GetNamespace(), o.GetName(), err)
	}
	return true, nil
}

// inAccessCache tells whether the access cache holds an object of o's kind and key.
func (c *engagedControlPlanes) inAccessCache(ctx context.Context, o client.Object) (bool, error) {
	current := o.DeepCopyObject().(client.Object)
	err := c.kubeconfigs.Get(ctx, client.ObjectKeyFromObject(o), current)
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
type openmcpKroAccess struct{ c *engagedControlPlanes }

func (c *engagedControlPlanes) KroAccess() KroAccess {
	if c.mode != AccessOpenMCP {
		return nil
	}
	return openmcpKroAccess{c}
}

func (a openmcpKroAccess) Request(ctx context.Context, kro types.NamespacedName, clusterRoles []string) error {
	desired, err := clusters.NewKroAccessRequest(a.c.providerName, kro, clusterRoles)
	if err != nil {
		return err
	}
	_, err = a.c.grantedAccessRequest(ctx, desired)
	if _, waiting := asNotAvailable(err); waiting {
		return nil
	}
	return err
}

func (a openmcpKroAccess) Granted(ctx context.Context, kro types.NamespacedName, known string) (*corev1.Secret, string, error) {
	key, err := clusters.KroAccessRequestKey(a.c.providerName, kro)
	if err != nil {
		return nil, "", err
	}
	ar := &clustersv1alpha1.AccessRequest{}
	switch err := a.c.kubeconfigs.Get(ctx, key, ar); {
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
	if err := a.c.kubeconfigs.Get(ctx, types.NamespacedName{Namespace: ar.Namespace, Name: name}, meta); err == nil && meta.ResourceVersion == known {
		return nil, known, nil
	}
	secret := &corev1.Secret{}
	if err := a.c.reader.Get(ctx, types.NamespacedName{Namespace: ar.Namespace, Name: name}, secret); err != nil {
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
func (c *engagedControlPlanes) withdrawKroAccess(ctx context.Context, kro types.NamespacedName) error {
	key, err := clusters.KroAccessRequestKey(c.providerName, kro)
	if err != nil {
		return err
	}
	_, err = c.withdraw(ctx, openmcpObject(key, "AccessRequest"))
	return err
}

// withdrawKroAccess withdraws kro's own access to the ControlPlane where openmcp granted it.
func (r *KroReconciler) withdrawKroAccess(ctx context.Context, s *scope) error {
	access := r.ControlPlanes.KroAccess()
	if access == nil {
		return nil
	}
	return access.Withdraw(ctx, client.ObjectKeyFromObject(s.kro))
}

// copyKroGrant writes kro's credential on the workload cluster from the access openmcp
// granted kro: the same secret layout as a credential the provider issues (a kubeconfig
// that names the token and CA files beside it), so that a token openmcp rotates reaches
// kro without a restart. It is copied again when openmcp's secret changes, which the
// access cache's watch of secrets' metadata reports.
func (r *KroReconciler) copyKroGrant(ctx context.Context, s *scope, access KroAccess) (result, error) {
	key := client.ObjectKeyFromObject(s.kro)
	workload := liveOnMiss{Client: s.workload.Cluster.GetClient(), live: s.workload.Cluster.GetAPIReader()}
	current, err := currentKroCredential(ctx, workload, s.kro, r.ProviderName, s.workload.Namespace)
	if reportCredentialConflict(s, err) {
		return waiting, nil
	}
	if err != nil {
		return proceed, err
	}
	known := ""
	if current != nil {
		known = current.Annotations[v1alpha1.AnnotationGrantVersion]
	}
	grant, version, err := access.Granted(ctx, key, known)
	if na, ok := asNotAvailable(err); ok {
		if na.Missing {
			r.applied.forget(key) // the next reconcile renders the chart and asks again
			s.requeue(time.Second)
		}
		s.obs.set(v1alpha1.ConditionWorkloadClusterReady, metav1.ConditionFalse, na.reason(), "kro's own access to the ControlPlane: "+na.Message)
		return waiting, nil
	}
	if err != nil || grant == nil {
		return proceed, err
	}
	secret, err := kroCredentialFromGrant(s.kro, r.ProviderName, s.workload.Namespace, grant, version)
	if err != nil {
		return proceed, err
	}
	if err := r.ensureWorkloadNamespace(ctx, s); err != nil {
		return proceed, err
	}
	if err := apply(ctx, s.workload.Cluster.GetClient(), secret); err != nil {
		return proceed, redactToken(fmt.Errorf("writing secret %s/%s on the workload cluster: %w", s.workload.Namespace, KroCredentialSecretName, err),
			secret.Data[KroCredentialTokenKey])
	}
	if current != nil {
		r.Recorder.Eventf(s.kro, nil, corev1.EventTypeNormal, v1alpha1.ReasonCredentialRotated, "Rotate",
			"kro's credential for the ControlPlane was copied anew from openmcp's secret %s/%s to secret %s/%s on the workload cluster",
			grant.Namespace, grant.Name, s.workload.Namespace, KroCredentialSecretName)
	}
	return proceed, nil
}

// kroCredentialFromGrant is kro's credential secret made from openmcp's access secret:
// server and CA from its kubeconfig, the token from it, the times from its keys.
func kroCredentialFromGrant(kro *v1alpha1.Kro, provider, namespace string, grant *corev1.Secret, version string) (*corev1.Secret, error) {
	cfg, err := clientcmd.RESTConfigFromKubeConfig(grant.Data[clustersv1alpha1.SecretKeyKubeconfig])
	if err != nil {
		return nil, fmt.Errorf("openmcp's access secret %s/%s for kro: %w", grant.Namespace, grant.Name, err)
	}
	if cfg.BearerToken == "" {
		return nil, fmt.Errorf("openmcp's access secret %s/%s for kro holds no bearer token, which kro's credential on a workload cluster needs", grant.Namespace, grant.Name)
	}
	ep, err := controlPlaneEndpoint(cfg)
	if err != nil {
		return nil, err
	}
	issued, expires := unixTime(grant.Data[clustersv1alpha1.SecretKeyCreationTimestamp]), unixTime(grant.Data[clustersv1alpha1.SecretKeyExpirationTimestamp])
	if issued.IsZero() {
		issued = grant.CreationTimestamp.Time
	}
	secret := newKroCredentialSecret(kro, provider, namespace, kroKubeconfig(ep.server, ep.tlsServerName, ep.insecure), ep.caData, []byte(cfg.BearerToken), issued, expires)
	if expires.IsZero() {
		delete(secret.Annotations, v1alpha1.AnnotationTokenExpires)
	}
	secret.Annotations[v1alpha1.AnnotationGrantVersion] = version
	return secret, nil
}

// unixTime reads seconds since the epoch; zero when unreadable.
func unixTime(data []byte) time.Time {
	sec, err := strconv.ParseInt(string(data), 10, 64)
	if err != nil || sec <= 0 {
		return time.Time{}
	}
	return time.Unix(sec, 0).UTC()
}

// ensureWorkloadNamespace makes sure the tenant's namespace on the workload cluster
// exists and is labelled the provider's for the Kro, so that it goes with the Kro
// (workload_cleanup.go). Under openmcp, openmcp's cluster provider made it with the
// provider's access, and the provider labels it (its rights there are get, patch and
// delete of that one namespace).
func (r *KroReconciler) ensureWorkloadNamespace(ctx context.Context, s *scope) error {
	w := s.workload
	labels := ownerLabels(s.kro, r.ProviderName, "")
	if !w.NamespaceGranted {
		return ensureNamespace(ctx, w.Cluster.GetClient(), w.Namespace, labels)
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
	if err := apply(ctx, w.Cluster.GetClient(), desired); err != nil {
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

// grantedBy says, for a condition, who granted the workload cluster's access.
func grantedBy(w *WorkloadClusterAccess) string {
	if w.NamespaceGranted {
		return ", which openmcp granted"
	}
	return ""
}

// firstErr is err, or else alt.
func firstErr(err error, alt error) error {
	if err != nil {
		return err
	}
	return alt
}

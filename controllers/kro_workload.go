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
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/owned"
	"github.com/openmcp-project/service-provider-kro/controllers/reach"
)

// withdrawKroAccess withdraws kro's own access to the ControlPlane where openmcp granted it.
func (r *placement) withdrawKroAccess(ctx context.Context, s *scope) error {
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
func (r *placement) copyKroGrant(ctx context.Context, s *scope, access reach.KroAccess) (result, error) {
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
	if na, ok := reach.AsNotAvailable(err); ok {
		if na.Missing {
			r.applied.forget(key) // the next reconcile renders the chart and asks again
			s.requeue(time.Second)
		}
		s.obs.set(v1alpha1.ConditionWorkloadClusterReady, metav1.ConditionFalse, na.ConditionReason(), "kro's own access to the ControlPlane: "+na.Message)
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
	if err := owned.Apply(ctx, s.workload.Cluster.GetClient(), secret); err != nil {
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
func (r *placement) ensureWorkloadNamespace(ctx context.Context, s *scope) error {
	w := s.workload
	labels := owned.Labels(s.kro, r.ProviderName, "")
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

// grantedBy says, for a condition, who granted the workload cluster's access.
func grantedBy(w *reach.WorkloadClusterAccess) string {
	if w.NamespaceGranted {
		return ", which openmcp granted"
	}
	return ""
}

// observeWorkloadCluster reaches the workload cluster of a version placed on one and
// sets where kro runs. For a version placed on the ControlPlane, kro runs there, and a
// workload cluster engaged for the Kro before is let go.
func (r *placement) observeWorkloadCluster(ctx context.Context, s *scope) (result, error) {
	if v1alpha1.PlacementOf(s.version) != v1alpha1.PlacementWorkloadCluster {
		r.ControlPlanes.DisengageWorkloadCluster(ctx, client.ObjectKeyFromObject(s.kro))
		s.site = reach.ControlPlaneSite(s.access)
		return proceed, nil
	}
	w, err := r.ControlPlanes.WorkloadCluster(ctx, s.kro, true)
	if na, ok := reach.AsNotAvailable(err); ok {
		if na.Connecting {
			return undecided, nil
		}
		s.obs.set(v1alpha1.ConditionWorkloadClusterReady, metav1.ConditionFalse, na.ConditionReason(), na.Message)
		return waiting, nil
	}
	if err != nil {
		return proceed, err
	}
	if res, err := r.switchWorkloadCluster(ctx, s, w); res != proceed || err != nil {
		return res, err
	}
	s.workload, s.site = w, reach.WorkloadSite(w)
	s.obs.set(v1alpha1.ConditionWorkloadClusterReady, metav1.ConditionTrue, v1alpha1.ReasonReconcileSuccess, fmt.Sprintf(
		"kro runs in namespace %s on the workload cluster of secret %s/%s%s", w.Namespace, s.tenantNamespace, w.Kubeconfig.Name, grantedBy(w)))
	return proceed, nil
}

// reconcileKroCredential keeps kro's own credential for the ControlPlane in the tenant's
// namespace on the workload cluster, and brings the Kro back when it is due for rotation.
func (r *placement) reconcileKroCredential(ctx context.Context, s *scope) (result, error) {
	if s.workload == nil {
		return proceed, nil
	}
	if access := r.ControlPlanes.KroAccess(); access != nil {
		return r.copyKroGrant(ctx, s, access)
	}
	lifetime := r.KroTokenLifetime
	if lifetime <= 0 {
		lifetime = reach.DefaultKroTokenLifetime
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

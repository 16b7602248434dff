package placement

import (
	"context"
	"fmt"
	"strconv"
	"time"

	clustersv1alpha1 "github.com/openmcp-project/openmcp-operator/api/clusters/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/owned"
	"github.com/openmcp-project/service-provider-kro/controllers/reach"
	"github.com/openmcp-project/service-provider-kro/controllers/step"
)

// withdrawKroAccess withdraws kro's own access to the ControlPlane where openmcp granted it.
func (r *Cleanup) withdrawKroAccess(ctx context.Context, s *step.Scope) error {
	access := r.ControlPlanes.KroAccess()
	if access == nil {
		return nil
	}
	return access.Withdraw(ctx, client.ObjectKeyFromObject(s.Kro))
}

// copyKroGrant writes kro's credential on the workload cluster from the access openmcp
// granted kro: the same secret layout as a credential the provider issues (a kubeconfig
// that names the token and CA files beside it), so that a token openmcp rotates reaches
// kro without a restart. It is copied again when openmcp's secret changes, which the
// access cache's watch of secrets' metadata reports.
func (r *Credential) copyKroGrant(ctx context.Context, s *step.Scope, access reach.KroAccess) (step.Result, error) {
	key := client.ObjectKeyFromObject(s.Kro)
	workload := liveOnMiss{Client: s.Workload.Cluster.GetClient(), live: s.Workload.Cluster.GetAPIReader()}
	current, err := currentKroCredential(ctx, workload, s.Kro, r.ProviderName, s.Workload.Namespace)
	if reportCredentialConflict(s, err) {
		return step.Waiting, nil
	}
	if err != nil {
		return step.Proceed, err
	}
	known := ""
	if current != nil {
		known = current.Annotations[v1alpha1.AnnotationGrantVersion]
	}
	grant, version, err := access.Granted(ctx, key, known)
	if na, ok := reach.AsNotAvailable(err); ok {
		if na.Missing {
			r.parts.applied.forget(key) // the next reconcile renders the chart and asks again
			s.Requeue(time.Second)
		}
		s.Obs.Set(v1alpha1.ConditionKroCredentialReady, metav1.ConditionFalse, na.ConditionReason(), "kro's own access to the ControlPlane: "+na.Message)
		return step.Waiting, nil
	}
	if err != nil || grant == nil {
		return step.Proceed, err
	}
	secret, err := KroCredentialFromGrant(s.Kro, r.ProviderName, s.Workload.Namespace, grant, version)
	if err != nil {
		return step.Proceed, err
	}
	if err := reach.EnsureWorkloadNamespace(ctx, s.Workload, s.Kro, r.ProviderName); err != nil {
		return step.Proceed, err
	}
	if err := owned.Apply(ctx, s.Workload.Cluster.GetClient(), secret); err != nil {
		return step.Proceed, RedactToken(fmt.Errorf("writing secret %s/%s on the workload cluster: %w", s.Workload.Namespace, owned.KroCredentialSecretName, err),
			secret.Data[owned.KroCredentialTokenKey])
	}
	if current != nil {
		r.Recorder.Eventf(s.Kro, nil, corev1.EventTypeNormal, v1alpha1.ReasonCredentialRotated, "Rotate",
			"kro's credential for the ControlPlane was copied anew from openmcp's secret %s/%s to secret %s/%s on the workload cluster",
			grant.Namespace, grant.Name, s.Workload.Namespace, owned.KroCredentialSecretName)
	}
	return step.Proceed, nil
}

// KroCredentialFromGrant is kro's credential secret made from openmcp's access secret:
// server and CA from its kubeconfig, the token from it, the times from its keys.
func KroCredentialFromGrant(kro *v1alpha1.Kro, provider, namespace string, grant *corev1.Secret, version string) (*corev1.Secret, error) {
	cfg, err := clientcmd.RESTConfigFromKubeConfig(grant.Data[clustersv1alpha1.SecretKeyKubeconfig])
	if err != nil {
		return nil, fmt.Errorf("openmcp's access secret %s/%s for kro: %w", grant.Namespace, grant.Name, err)
	}
	if cfg.BearerToken == "" {
		return nil, fmt.Errorf("openmcp's access secret %s/%s for kro holds no bearer token, which kro's credential on a workload cluster needs", grant.Namespace, grant.Name)
	}
	ep, err := ControlPlaneEndpoint(cfg)
	if err != nil {
		return nil, err
	}
	issued, expires := unixTime(grant.Data[clustersv1alpha1.SecretKeyCreationTimestamp]), unixTime(grant.Data[clustersv1alpha1.SecretKeyExpirationTimestamp])
	if issued.IsZero() {
		issued = grant.CreationTimestamp.Time
	}
	secret := NewKroCredentialSecret(kro, provider, namespace, KroKubeconfig(ep.Server, ep.TLSServerName, ep.Insecure), ep.CaData, []byte(cfg.BearerToken), issued, expires)
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

// grantedBy says, for a condition, who granted the workload cluster's access.
func grantedBy(w *reach.WorkloadClusterAccess) string {
	if w.NamespaceGranted {
		return ", which openmcp granted"
	}
	return ""
}

// ObserveWorkloadCluster reaches the workload cluster of a version placed on one and
// sets where kro runs. For a version placed on the ControlPlane, kro runs there, and a
// workload cluster engaged for the Kro before is let go.
func (r *Workload) ObserveWorkloadCluster(ctx context.Context, s *step.Scope) (step.Result, error) {
	if v1alpha1.PlacementOf(s.Version) != v1alpha1.PlacementWorkloadCluster {
		r.ControlPlanes.DisengageWorkloadCluster(ctx, client.ObjectKeyFromObject(s.Kro))
		s.Site = reach.ControlPlaneSite(s.Access)
		return step.Proceed, nil
	}
	w, err := r.ControlPlanes.WorkloadCluster(ctx, s.Kro, true)
	if na, ok := reach.AsNotAvailable(err); ok {
		if na.Connecting {
			return step.Undecided, nil
		}
		s.Obs.Set(v1alpha1.ConditionWorkloadClusterReady, metav1.ConditionFalse, na.ConditionReason(), na.Message)
		return step.Waiting, nil
	}
	if err != nil {
		return step.Proceed, err
	}
	if res, err := r.switchWorkloadCluster(ctx, s, w); res != step.Proceed || err != nil {
		return res, err
	}
	s.Workload, s.Site = w, reach.WorkloadSite(w)
	s.Obs.Set(v1alpha1.ConditionWorkloadClusterReady, metav1.ConditionTrue, v1alpha1.ReasonReconcileSuccess, fmt.Sprintf(
		"kro runs in namespace %s on the workload cluster of secret %s/%s%s", w.Namespace, s.TenantNamespace, w.Kubeconfig.Name, grantedBy(w)))
	return step.Proceed, nil
}

// ReconcileKroCredential keeps kro's own credential for the ControlPlane in the tenant's
// namespace on the workload cluster, and brings the Kro back when it is due for rotation.
// It reports under KroCredentialReady.
func (r *Credential) ReconcileKroCredential(ctx context.Context, s *step.Scope) (step.Result, error) {
	if s.Workload == nil {
		return step.Proceed, nil
	}
	res, err := r.reconcileKroCredential(ctx, s)
	if res == step.Proceed && err == nil {
		how := "the provider issues it for service account " + owned.KroServiceAccount.String()
		if r.ControlPlanes.KroAccess() != nil {
			how = "copied from the access openmcp grants kro"
		}
		s.Obs.Set(v1alpha1.ConditionKroCredentialReady, metav1.ConditionTrue, v1alpha1.ReasonReconcileSuccess, fmt.Sprintf(
			"kro's credential for the ControlPlane is current in secret %s/%s on the workload cluster (%s)", s.Workload.Namespace, owned.KroCredentialSecretName, how))
	}
	return res, err
}

// reconcileKroCredential copies openmcp's grant, or issues a token of its own.
func (r *Credential) reconcileKroCredential(ctx context.Context, s *step.Scope) (step.Result, error) {
	if access := r.ControlPlanes.KroAccess(); access != nil {
		return r.copyKroGrant(ctx, s, access)
	}
	lifetime := r.tokenLifetime
	if lifetime <= 0 {
		lifetime = reach.DefaultKroTokenLifetime
	}
	workload := liveOnMiss{Client: s.Workload.Cluster.GetClient(), live: s.Workload.Cluster.GetAPIReader()}
	wait, rotated, err := EnsureKroCredential(ctx, s.Access.Client, s.Access.Cluster.GetConfig(), workload,
		s.Kro, r.ProviderName, s.Workload.Namespace, lifetime, time.Now())
	if reportCredentialConflict(s, err) {
		return step.Waiting, nil
	}
	if err != nil {
		return step.Proceed, fmt.Errorf("preparing kro's credential for the ControlPlane: %w", err)
	}
	if rotated {
		r.Recorder.Eventf(s.Kro, nil, corev1.EventTypeNormal, v1alpha1.ReasonCredentialRotated, "Rotate",
			"kro's credential for the ControlPlane (service account %s) was issued in secret %s/%s on the workload cluster",
			owned.KroServiceAccount, s.Workload.Namespace, owned.KroCredentialSecretName)
	}
	s.Requeue(wait)
	return step.Proceed, nil
}

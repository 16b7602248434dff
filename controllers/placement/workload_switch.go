package placement

import (
	"context"
	"fmt"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/clusters"
	"github.com/openmcp-project/service-provider-kro/controllers/flux"
	"github.com/openmcp-project/service-provider-kro/controllers/owned"
	"github.com/openmcp-project/service-provider-kro/controllers/reach"
	"github.com/openmcp-project/service-provider-kro/controllers/step"
)

// A switch of the workload cluster (standalone): the labelled kubeconfig secret chosen
// for the workload cluster (the first by name) is another than the one the Kro's
// HelmRelease installs kro with, because a secret was added, renamed or removed. Flux
// would install kro on the new cluster and leave it running on the old one, both
// reconciling the ControlPlane. The HelmRelease still names the old cluster's secret,
// so it is the record of where kro runs: through that secret the provider removes the
// tenant's namespace there (kro with it: on a workload cluster the release holds only
// objects of that namespace, and its storage) and kro's credential, deletes kro's
// ServiceAccount on the ControlPlane (which revokes the old token) and then the
// HelmRelease; the usual steps install kro on the new cluster once it is gone. An old
// cluster whose secret is gone cannot be reached: the HelmRelease is then suspended
// before it is deleted, so that Flux drops it without an uninstall it could not do, and
// the event says what is left there.

// oldClusterTimeout bounds each request to the workload cluster being left.
const oldClusterTimeout = 10 * time.Second

// switchWorkloadCluster leaves the workload cluster kro runs on when another one is
// chosen (w); proceed when there is no such switch.
func (r *Workload) switchWorkloadCluster(ctx context.Context, s *step.Scope, w *reach.WorkloadClusterAccess) (step.Result, error) {
	hr := s.PlacedRelease
	if r.AccessMode == reach.AccessOpenMCP || hr == nil || flux.ReleasePlacement(hr) != v1alpha1.PlacementWorkloadCluster ||
		hr.Spec.KubeConfig == nil || hr.Spec.KubeConfig.SecretRef == nil || hr.Spec.KubeConfig.SecretRef.Name == w.Kubeconfig.Name {
		return step.Proceed, nil
	}
	from := hr.Spec.KubeConfig.SecretRef.Name
	moving := fmt.Sprintf("moving kro from the workload cluster of secret %s/%s to the one of secret %s/%s", s.TenantNamespace, from, s.TenantNamespace, w.Kubeconfig.Name)
	left, err := r.leaveOldWorkloadCluster(ctx, s, hr, w.Namespace)
	if err != nil {
		s.Obs.Set(v1alpha1.ConditionWorkloadClusterReady, metav1.ConditionFalse, v1alpha1.ReasonWorkloadClusterUnreachable, fmt.Sprintf(
			"%s: kro cannot be removed from the workload cluster it runs on yet: %s; this goes on when that cluster answers, or when secret %s/%s is removed",
			moving, step.Summarize(err), s.TenantNamespace, from))
		return step.Waiting, nil
	}
	if err := r.cleanup.removeKroOnControlPlane(ctx, s, s.Access); err != nil {
		return step.Proceed, err
	}
	if hr.DeletionTimestamp.IsZero() {
		if left == "" {
			if err := flux.SuspendRelease(ctx, r.Platform, hr); err != nil {
				return step.Proceed, err
			}
		}
		if err := r.Platform.Delete(ctx, hr, client.Preconditions{UID: &hr.UID}); client.IgnoreNotFound(err) != nil {
			return step.Proceed, fmt.Errorf("deleting HelmRelease %s/%s to move kro: %w", hr.Namespace, hr.Name, err)
		}
		what := fmt.Sprintf("namespace %s and kro's credential there are removed, kro's token is revoked", w.Namespace)
		if left == "" {
			what = fmt.Sprintf("its kubeconfig secret is gone, so namespace %s there (with kro and its credential) cannot be removed: remove it on that cluster; kro's token is revoked", w.Namespace)
		}
		r.Recorder.Eventf(s.Kro, nil, corev1.EventTypeNormal, v1alpha1.ReasonMovingPlacement, "Move", "%s: %s", moving, what)
	}
	s.Obs.Set(v1alpha1.ConditionWorkloadClusterReady, metav1.ConditionFalse, v1alpha1.ReasonMovingPlacement, fmt.Sprintf(
		"%s: kro is removed from the first (HelmRelease %s/%s is deleted) before it is installed on the other", moving, hr.Namespace, hr.Name))
	return step.Waiting, nil
}

// leaveOldWorkloadCluster removes kro's credential and the tenant's namespace from the
// workload cluster of the HelmRelease's kubeconfig secret. It returns that secret's name,
// or "" when the secret is gone and nothing there can be reached.
func (r *Workload) leaveOldWorkloadCluster(ctx context.Context, s *step.Scope, hr *helmv2.HelmRelease, namespace string) (string, error) {
	ref := hr.Spec.KubeConfig.SecretRef
	secret := &corev1.Secret{}
	switch err := r.PlatformReader.Get(ctx, client.ObjectKey{Namespace: s.TenantNamespace, Name: ref.Name}, secret); {
	case apierrors.IsNotFound(err):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("reading secret %s/%s: %w", s.TenantNamespace, ref.Name, err)
	}
	key := ref.Key
	if key == "" {
		key = owned.KubeconfigKey
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(secret.Data[key])
	if err != nil {
		return "", fmt.Errorf("the kubeconfig in secret %s/%s is unusable: %w", s.TenantNamespace, ref.Name, err)
	}
	cfg.Timeout = oldClusterTimeout
	old, err := client.New(cfg, client.Options{Scheme: clusters.Scheme})
	if err != nil {
		return "", fmt.Errorf("the kubeconfig in secret %s/%s is unusable: %w", s.TenantNamespace, ref.Name, err)
	}
	if err := deleteKroCredential(ctx, old, old, s.Kro, r.ProviderName, namespace); err != nil {
		return "", err
	}
	return ref.Name, removeNamespaceOn(ctx, old, old, s.Kro, r.ProviderName, namespace)
}

// LeaveSwitchedWorkloadCluster removes, in a deletion, kro's credential and the tenant's
// namespace from the workload cluster the HelmRelease installs kro on when another
// cluster is chosen meanwhile (a reconcile that stopped early never switched): the
// clean-up after the uninstall reaches only the chosen one.
func (r *Workload) LeaveSwitchedWorkloadCluster(ctx context.Context, s *step.Scope, hr *helmv2.HelmRelease) (step.Result, error) {
	if r.AccessMode == reach.AccessOpenMCP || flux.ReleasePlacement(hr) != v1alpha1.PlacementWorkloadCluster ||
		hr.Spec.KubeConfig == nil || hr.Spec.KubeConfig.SecretRef == nil {
		return step.Proceed, nil
	}
	w, err := r.ControlPlanes.WorkloadCluster(ctx, s.Kro, false)
	if na, ok := reach.AsNotAvailable(err); ok {
		if na.Connecting {
			return step.Undecided, nil
		}
		return step.Proceed, nil // no other cluster to tell apart
	}
	if err != nil {
		return step.Proceed, err
	}
	if w.Kubeconfig.Name == hr.Spec.KubeConfig.SecretRef.Name {
		return step.Proceed, nil
	}
	if _, err := r.leaveOldWorkloadCluster(ctx, s, hr, w.Namespace); err != nil {
		s.Obs.Blocked(v1alpha1.ReasonUninstallStuck, fmt.Sprintf(
			"kro runs on the workload cluster of secret %s/%s, no longer the chosen one, and cannot be removed from it yet: %s; this goes on when that cluster answers, or when the secret is removed",
			s.TenantNamespace, hr.Spec.KubeConfig.SecretRef.Name, step.Summarize(err)))
		return step.Waiting, nil
	}
	return step.Proceed, nil
}

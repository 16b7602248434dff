package controllers

import (
	"context"
	"errors"
	"fmt"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/clusters"
)

// reconcileOCIRepository applies the chart source and reports its readiness.
func (r *KroReconciler) reconcileOCIRepository(ctx context.Context, s *scope) (outcome, error) {
	repo := newOCIRepository(s.kro, r.ProviderName, s.tenantNamespace, s.version, s.chartSecret, s.pollInterval)
	if err := applyUnlessCurrent(ctx, r.Platform, repo, &sourcev1.OCIRepository{}); err != nil {
		return proceed, fmt.Errorf("applying OCIRepository %s/%s: %w", repo.Namespace, repo.Name, err)
	}
	status, message := fluxReadiness(repo.Generation, repo.Status.ObservedGeneration, repo.Status.Conditions)
	s.obs.managed = append(s.obs.managed, managedFlux(sourcev1.GroupVersion.String(), sourcev1.OCIRepositoryKind, repo.Namespace, repo.Name, status, message))
	fluxCondition(&s.obs, ConditionOCIRepositoryReady, "OCIRepository "+repo.Namespace+"/"+repo.Name, status, message)
	return proceed, nil
}

// observeControlPlane finds the access to the ControlPlane; without it, the step waits.
func (r *KroReconciler) observeControlPlane(ctx context.Context, s *scope) (outcome, error) {
	access, err := r.ControlPlanes.Access(ctx, s.kro)
	if na, ok := asNotAvailable(err); ok {
		s.undecided = na.Connecting
		s.obs.set(ConditionControlPlaneAccess, metav1.ConditionFalse, v1alpha1.ReasonReconciling, na.Message)
		return wait, nil
	}
	if err != nil {
		return proceed, err
	}
	s.access = access
	s.obs.set(ConditionControlPlaneAccess, metav1.ConditionTrue, v1alpha1.ReasonReconcileSuccess,
		fmt.Sprintf("the ControlPlane is reached through the kubeconfig in secret %s/%s", s.tenantNamespace, access.Kubeconfig.Name))

	rgds, err := access.ResourceGraphDefinitions(ctx)
	switch {
	case errors.Is(err, errRGDsUnknown):
		// Right after an engagement (a restart, a rotation) the RGDs are not known yet:
		// keep what was reported before rather than flip to Unknown and back.
		if prev := meta.FindStatusCondition(s.kro.Status.Conditions, ConditionResourceGraphDefinitionsReady); prev != nil {
			s.obs.set(prev.Type, prev.Status, prev.Reason, prev.Message)
		} else {
			s.obs.set(ConditionResourceGraphDefinitionsReady, metav1.ConditionUnknown, v1alpha1.ReasonReconciling, err.Error())
		}
	case err != nil:
		return proceed, err
	default:
		s.obs.rgds = summarizeRGDs(rgds)
		rgdCondition(&s.obs, s.obs.rgds)
	}
	return proceed, nil
}

// reconcileHelmRelease applies the release of kro onto the ControlPlane and reports its
// readiness; the Kro is Ready only when the HelmRelease is.
func (r *KroReconciler) reconcileHelmRelease(ctx context.Context, s *scope) (outcome, error) {
	hr := newHelmRelease(s.kro, r.ProviderName, s.tenantNamespace, s.version, s.access.Kubeconfig, s.pollInterval)
	if err := applyUnlessCurrent(ctx, r.Platform, hr, &helmv2.HelmRelease{}); err != nil {
		return proceed, fmt.Errorf("applying HelmRelease %s/%s: %w", hr.Namespace, hr.Name, err)
	}
	status, message := fluxReadiness(hr.Generation, hr.Status.ObservedGeneration, hr.Status.Conditions)
	s.obs.managed = append(s.obs.managed, managedFlux(helmv2.GroupVersion.String(), helmv2.HelmReleaseKind, hr.Namespace, hr.Name, status, message))
	fluxCondition(&s.obs, ConditionHelmReleaseReady, "HelmRelease "+hr.Namespace+"/"+hr.Name, status, message)
	return proceed, nil
}

func managedFlux(apiVersion, kind, namespace, name string, ready metav1.ConditionStatus, message string) v1alpha1.ManagedResource {
	return v1alpha1.ManagedResource{
		Cluster: clusters.Platform, APIVersion: apiVersion, Kind: kind, Namespace: namespace, Name: name,
		Ready: ready, Message: message,
	}
}

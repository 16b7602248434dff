package controllers

import (
	"context"
	"fmt"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/guard"
	"github.com/openmcp-project/service-provider-kro/controllers/owned"
	"github.com/openmcp-project/service-provider-kro/controllers/rollout"
	"github.com/openmcp-project/service-provider-kro/controllers/step"
)

// releaseRecordOf reads the record of the Kro's HelmRelease from the cache; none when the
// HelmRelease is not there or not the provider's.
func (r *versionResolver) releaseRecordOf(ctx context.Context, s *step.Scope) (rollout.Record, error) {
	hr := &helmv2.HelmRelease{}
	err := r.Platform.Get(ctx, client.ObjectKey{Namespace: s.TenantNamespace, Name: owned.FluxObjectName(r.ProviderName)}, hr)
	if apierrors.IsNotFound(err) {
		return rollout.Record{}, nil
	}
	if err != nil {
		return rollout.Record{}, fmt.Errorf("reading HelmRelease %s/%s: %w", s.TenantNamespace, owned.FluxObjectName(r.ProviderName), err)
	}
	if !owned.As(hr, &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Labels: owned.Labels(s.Kro, r.ProviderName, "")}}) {
		return rollout.Record{}, nil
	}
	return rollout.ReadRecord(hr), nil
}

// observeRolloutHealth reads kro's health on the ControlPlane while a rollout updates
// the Kro or holds it as failed, for its status; the first read after the admission, made before the
// HelmRelease carries the revision, is the admission's instance baseline. Both count
// only the instances created no later than the admission.
func (r *versionResolver) observeRolloutHealth(ctx context.Context, s *step.Scope) (step.Result, error) {
	if !s.Gate || s.Record.Admission == nil {
		return step.Proceed, nil
	}
	h, err := guard.ReadKroHealth(ctx, s.Access.Cluster, s.Obs.Revision, s.Record.Admission.Since.Time)
	if err != nil {
		return step.Proceed, fmt.Errorf("reading kro's health for the rollout: %w", err)
	}
	// The Deployment comes from the same cache that KroAvailable reads (flux.ObserveKro):
	// only the one kro's Helm release made counts.
	d, err := guard.ReadKroDeployment(ctx, s.Site.Deployment())
	if err != nil {
		return step.Proceed, fmt.Errorf("reading kro's Deployment for the rollout: %w", err)
	}
	h.DeploymentAvailable, h.Deployment = d.Done, d.Rollout
	if s.Record.Admission.Instances == nil && s.Record.Failed == "" {
		counts := h.Instances
		s.Record.Admission.Instances = &counts
	}
	s.Obs.RolloutHealth = h
	s.Obs.Set(v1alpha1.ConditionRolloutHealthObserved, metav1.ConditionTrue, v1alpha1.ReasonReconcileSuccess,
		fmt.Sprintf("kro's health in namespace %s on %s is read for the rollout into status.rolloutHealth", s.Site.Namespace, s.Site.Where))
	return step.Proceed, nil
}

package controllers

import (
	"context"
	"fmt"
	"time"

	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cluster"

	"github.com/openmcp-project/service-provider-kro/clusters"
)

// Options configure the Kro controller.
type Options struct {
	// ProviderName is the provider's name and the name of its ProviderConfig.
	ProviderName string
	// PodNamespace is the provider's namespace on the platform cluster.
	PodNamespace string
	// DeletionRecheck overrides DefaultDeletionRecheck.
	DeletionRecheck time.Duration
}

// Setup adds the platform cluster and the standalone access to ControlPlanes to the
// onboarding cluster's manager, and registers the Kro reconciler with it.
func Setup(ctx context.Context, mgr ctrl.Manager, platformConfig *rest.Config, o Options) error {
	if o.ProviderName == "" || o.PodNamespace == "" {
		return fmt.Errorf("the Kro controller needs the provider's name and namespace")
	}
	platform, err := cluster.New(platformConfig, func(co *cluster.Options) {
		co.Scheme = clusters.Scheme
		co.Cache = PlatformCacheOptions(o.PodNamespace)
	})
	if err != nil {
		return fmt.Errorf("connecting to the platform cluster: %w", err)
	}
	if err := mgr.Add(platform); err != nil {
		return err
	}
	controlPlanes, err := NewStandaloneControlPlanes(platformConfig, clusters.Scheme)
	if err != nil {
		return err
	}
	if err := mgr.Add(controlPlanes); err != nil {
		return err
	}
	r := &KroReconciler{
		Onboarding:      mgr.GetClient(),
		Platform:        platform.GetClient(),
		PlatformReader:  platform.GetAPIReader(),
		ControlPlanes:   controlPlanes,
		Recorder:        mgr.GetEventRecorder("service-provider-" + o.ProviderName),
		ProviderName:    o.ProviderName,
		PodNamespace:    o.PodNamespace,
		DeletionRecheck: o.DeletionRecheck,
	}
	if err := r.SetupWithManager(ctx, mgr, platform); err != nil {
		return fmt.Errorf("setting up the Kro controller: %w", err)
	}
	return nil
}

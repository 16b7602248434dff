package controllers

import (
	"context"
	"errors"
	"fmt"
	"time"

	krov1alpha1 "github.com/kubernetes-sigs/kro/api/v1alpha1"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/clusters"
	"github.com/openmcp-project/service-provider-kro/controllers/foreign"
	"github.com/openmcp-project/service-provider-kro/controllers/guard"
	"github.com/openmcp-project/service-provider-kro/controllers/handover"
	"github.com/openmcp-project/service-provider-kro/controllers/owned"
	"github.com/openmcp-project/service-provider-kro/controllers/reach"
	"github.com/openmcp-project/service-provider-kro/providers/controlplane"
	"github.com/openmcp-project/service-provider-kro/providers/sharding"
)

// Options configure the Kro controller.
type Options struct {
	// ProviderName is the provider's name and the name of its ProviderConfig.
	ProviderName string
	// PodNamespace is the provider's namespace on the platform cluster.
	PodNamespace string
	// Access says where ControlPlane kubeconfigs come from; standalone by default.
	Access reach.AccessMode
	// QuietPeriod is how long an engaged ControlPlane may stay quiet before it is
	// probed for reachability (default 90s); ProbeInterval is how often an unreachable
	// one is probed again (default 15s). See controlplane.Options.
	QuietPeriod, ProbeInterval time.Duration
	// MaxBackoff bounds the wait between connection attempts to an unreachable
	// ControlPlane (default 2m).
	MaxBackoff time.Duration
	// MaxConcurrentReconciles is how many Kros are reconciled at once (default 10).
	MaxConcurrentReconciles int
	// Identity names the provider in what it writes on the onboarding cluster: the field
	// manager of its patches of Kros and the source of its events. Environments that
	// share an onboarding cluster give different ones. Default "service-provider-<name>".
	Identity string
	// AccessGracePeriod is how long a ControlPlane's access (standalone: its kubeconfig
	// secret) must be missing before a deletion counts the ControlPlane as gone and drops
	// kro without uninstalling it (default deletion.DefaultAccessGracePeriod). Under openmcp the
	// ControlPlane's ClusterRequest and Cluster decide instead.
	AccessGracePeriod time.Duration
	// Shard, under --sharding, is this replica's membership among those that share the
	// ControlPlanes; the Kro controller acts only on the Kros it owns. nil: all Kros.
	Shard *sharding.Membership
}

// Setup wires the provider into the onboarding cluster's manager: the platform cluster,
// the multicluster-runtime provider with one engaged cluster per ControlPlane, the
// ControlPlane watches and the Kro reconciler. The manager is the local cluster of a
// multicluster manager built on it.
func Setup(ctx context.Context, mgr ctrl.Manager, platformConfig *rest.Config, o Options) error {
	if o.ProviderName == "" || o.PodNamespace == "" {
		return fmt.Errorf("the Kro controller needs the provider's name and namespace")
	}
	if o.Access == "" {
		o.Access = reach.AccessStandalone
	}
	if o.Identity == "" {
		o.Identity = "service-provider-" + o.ProviderName
	}
	if o.Access != reach.AccessStandalone && o.Access != reach.AccessOpenMCP {
		return fmt.Errorf("unknown ControlPlane access mode %q: use %s or %s", o.Access, reach.AccessStandalone, reach.AccessOpenMCP)
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
	access, earlierObjects, err := addPlatformCaches(mgr, platform, o)
	if err != nil {
		return err
	}
	workloadKubeconfigs, err := addWorkloadKubeconfigCache(mgr, platform, o)
	if err != nil {
		return err
	}

	log := mgr.GetLogger()
	events := controlplane.NewEvents(controlplane.EventsOptions{
		Log: log.WithName("controlplane-events"),
		For: func(key types.NamespacedName) client.Object {
			return &v1alpha1.Kro{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
		},
		Kind:        &krov1alpha1.ResourceGraphDefinition{},
		KindCRD:     reach.RgdCRDName,
		MaxBackoff:  o.MaxBackoff,
		Deployments: true,
	})
	provider := controlplane.New(controlplane.Options{
		ClusterOptions:    []cluster.Option{controlPlaneClusterOptions(), controlplane.WatchDeployments(clusters.KroNamespace, owned.ReleaseName)},
		ClusterOptionsFor: reach.WorkloadClusterOptions,
		ProbeInterval:     o.ProbeInterval,
		QuietPeriod:       o.QuietPeriod,
		MaxBackoff:        o.MaxBackoff,
		OnChange:          events.Notify,
		Log:               log.WithName("controlplane-provider"),
	})
	mc, err := mcmanager.WithMultiCluster(mgr, provider)
	if err != nil {
		return err
	}
	if err := mc.Add(events); err != nil {
		return err
	}
	// The multicluster manager starts its provider only from its own Start; the caller
	// starts the local manager, so the provider joins it as a runnable.
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error { return provider.Start(ctx, mc) })); err != nil {
		return err
	}
	// A second provider in one process (tests) keeps the first one's metrics.
	if err := metrics.Registry.Register(provider.Collector()); err != nil && !errors.As(err, &prometheus.AlreadyRegisteredError{}) {
		return fmt.Errorf("registering ControlPlane metrics: %w", err)
	}

	if err := registerMetrics(metrics.Registry, mgr.GetClient(), o.Shard, rolloutCollector{platform.GetClient(), o.ProviderName}); err != nil {
		return fmt.Errorf("registering metrics: %w", err)
	}
	r := &KroReconciler{
		Onboarding:     client.WithFieldOwner(mgr.GetClient(), o.Identity),
		Platform:       platform.GetClient(),
		PlatformReader: platform.GetAPIReader(),
		ControlPlanes: &reach.Engaged{
			Mode:                o.Access,
			ProviderName:        o.ProviderName,
			Platform:            platform.GetClient(),
			Reader:              platform.GetAPIReader(),
			Kubeconfigs:         access,
			WorkloadKubeconfigs: workloadKubeconfigs,
			Provider:            provider,
			Events:              events,
		},
		Recorder:                foreign.Recorder(mgr.GetEventRecorder(o.Identity)),
		ProviderName:            o.ProviderName,
		PodNamespace:            o.PodNamespace,
		MaxConcurrentReconciles: o.MaxConcurrentReconciles,
		AccessGracePeriod:       o.AccessGracePeriod,
		Shard:                   o.Shard,
		Earlier:                 earlierObjects,
		AccessMode:              o.Access,
	}
	if err := r.SetupWithManager(ctx, mgr, platform); err != nil {
		return fmt.Errorf("setting up the Kro controller: %w", err)
	}
	// The ProviderConfig lives on the platform cluster, so its events come from the
	// platform cluster's recorder.
	pcr := &ProviderConfigReconciler{
		Platform:     platform.GetClient(),
		Onboarding:   mgr.GetClient(),
		Recorder:     foreign.Recorder(platform.GetEventRecorder(o.Identity)),
		ProviderName: o.ProviderName,
		PodNamespace: o.PodNamespace,
		Shard:        o.Shard,
	}
	if err := pcr.SetupWithManager(mgr, platform); err != nil {
		return fmt.Errorf("setting up the ProviderConfig controller: %w", err)
	}
	return nil
}

// addPlatformCaches adds the caches of the platform cluster beside its main one: where
// ControlPlane access comes from, and the earlier provider's Flux objects.
func addPlatformCaches(mgr ctrl.Manager, platform cluster.Cluster, o Options) (access, earlier cache.Cache, err error) {
	access, err = reach.AccessCache(platform, o.Access, o.ProviderName)
	if err != nil {
		return nil, nil, fmt.Errorf("creating the cache of ControlPlane access: %w", err)
	}
	if err := mgr.Add(access); err != nil {
		return nil, nil, err
	}
	earlier, err = handover.EarlierCache(platform)
	if err != nil {
		return nil, nil, fmt.Errorf("creating the cache of the earlier provider's objects: %w", err)
	}
	if err := mgr.Add(earlier); err != nil {
		return nil, nil, err
	}
	return access, earlier, nil
}

// addWorkloadKubeconfigCache adds the cache of the labelled workload cluster kubeconfigs
// (standalone); under openmcp there is none (nil).
func addWorkloadKubeconfigCache(mgr ctrl.Manager, platform cluster.Cluster, o Options) (cache.Cache, error) {
	if o.Access == reach.AccessOpenMCP {
		return nil, nil
	}
	c, err := reach.WorkloadKubeconfigCache(platform)
	if err != nil {
		return nil, fmt.Errorf("creating the cache of workload cluster kubeconfigs: %w", err)
	}
	return c, mgr.Add(c)
}

// controlPlaneClusterOptions shape the cache of each ControlPlane: the provider's secrets
// in kro-system and the RGDs, each trimmed to what the provider reads of it, since the
// tenant decides how many there are and how large (docs/measurements/benchmarks.md).
func controlPlaneClusterOptions() cluster.Option {
	return controlplane.ClusterOptions(clusters.Scheme, clusters.KroNamespace,
		labels.SelectorFromSet(labels.Set{v1alpha1.LabelManagedBy: v1alpha1.ManagedByValue}),
		controlplane.Kinds{krov1alpha1.GroupVersion.WithKind("ResourceGraphDefinition"): meta.RESTScopeRoot},
		controlplane.Transforms{&corev1.Secret{}: owned.TrimSecretCopy, &krov1alpha1.ResourceGraphDefinition{}: guard.TrimRGD})
}

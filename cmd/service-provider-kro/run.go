package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/openmcp-project/service-provider-kro/clusters"
	"github.com/openmcp-project/service-provider-kro/controllers"
)

type runOptions struct {
	onboardingKubeconfig string
	platformKubeconfig   string
	providerName         string
	podNamespace         string
	access               string
	probeInterval        time.Duration
	concurrency          int
	qps                  float64
	burst                int
	metricsAddr          string
	probeAddr            string
	pprofAddr            string
	leaderElect          bool
	leaderElectionNS     string
	zap                  zap.Options
}

func (o *runOptions) bind(fs *flag.FlagSet) {
	fs.StringVar(&o.onboardingKubeconfig, "onboarding-kubeconfig", "", "kubeconfig of the onboarding cluster, where Kro objects live (default: the ambient kubeconfig)")
	fs.StringVar(&o.platformKubeconfig, "platform-kubeconfig", "", "kubeconfig of the platform cluster, where the ProviderConfig, Flux and the tenant namespaces live (default: the ambient kubeconfig)")
	fs.StringVar(&o.providerName, "provider-name", "kro", "name of this provider; its ProviderConfig carries the same name")
	fs.StringVar(&o.podNamespace, "pod-namespace", os.Getenv("POD_NAMESPACE"), "the provider's namespace on the platform cluster, which holds the source pull secrets (default: $POD_NAMESPACE)")
	fs.StringVar(&o.access, "controlplane-access", string(controllers.AccessStandalone), "where ControlPlane kubeconfigs come from: standalone (a secret labelled "+controllers.LabelControlPlaneKubeconfig+"=true in the tenant namespace) or openmcp (an AccessRequest per ControlPlane)")
	fs.DurationVar(&o.probeInterval, "controlplane-probe-interval", 15*time.Second, "how often each engaged ControlPlane is checked for reachability")
	fs.IntVar(&o.concurrency, "max-concurrent-reconciles", 10, "how many Kros are reconciled at once")
	fs.Float64Var(&o.qps, "kube-api-qps", clusters.DefaultQPS, "requests per second the provider makes to the onboarding and to the platform cluster, each, in the long run")
	fs.IntVar(&o.burst, "kube-api-burst", clusters.DefaultBurst, "requests the provider may make to the onboarding and to the platform cluster, each, in a burst above --kube-api-qps")
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", ":8080", "address of the metrics endpoint; 0 disables it")
	fs.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081", "address of the health and readiness endpoints")
	fs.StringVar(&o.pprofAddr, "pprof-bind-address", "0", "address of Go's pprof endpoints (/debug/pprof/), for profiling; 0 disables them")
	fs.BoolVar(&o.leaderElect, "leader-elect", false, "elect a leader on the platform cluster so that only one replica reconciles")
	fs.StringVar(&o.leaderElectionNS, "leader-election-namespace", os.Getenv("POD_NAMESPACE"), "namespace of the leader election lease on the platform cluster (default: $POD_NAMESPACE)")
	o.zap.BindFlags(fs)
}

// runManager starts the provider and blocks until ctx ends.
func runManager(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o runOptions
	o.bind(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	log := zap.New(zap.UseFlagOptions(&o.zap), zap.WriteTo(stderr))
	ctrl.SetLogger(log)

	onboarding, err := clusters.RESTConfig(clusters.Onboarding, o.onboardingKubeconfig)
	if err != nil {
		return err
	}
	platform, err := clusters.RESTConfig(clusters.Platform, o.platformKubeconfig)
	if err != nil {
		return err
	}
	if o.qps <= 0 || o.burst <= 0 {
		return fmt.Errorf("--kube-api-qps and --kube-api-burst must be positive")
	}
	for _, cfg := range []*rest.Config{onboarding, platform} {
		cfg.QPS, cfg.Burst = float32(o.qps), o.burst
	}
	if o.podNamespace == "" {
		return fmt.Errorf("the provider's namespace on the platform cluster is unknown: set --pod-namespace or $POD_NAMESPACE")
	}
	if o.leaderElect && o.leaderElectionNS == "" {
		return fmt.Errorf("--leader-elect needs --leader-election-namespace or $POD_NAMESPACE")
	}

	mgr, err := ctrl.NewManager(onboarding, ctrl.Options{
		Scheme:                  clusters.Scheme,
		Metrics:                 metricsserver.Options{BindAddress: o.metricsAddr},
		HealthProbeBindAddress:  o.probeAddr,
		PprofBindAddress:        o.pprofAddr,
		LeaderElection:          o.leaderElect,
		LeaderElectionID:        "service-provider-" + o.providerName,
		LeaderElectionNamespace: o.leaderElectionNS,
		LeaderElectionConfig:    platform,
		Logger:                  log,
	})
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}
	if err := controllers.Setup(ctx, mgr, platform, controllers.Options{
		ProviderName:  o.providerName,
		PodNamespace:  o.podNamespace,
		Access:        controllers.AccessMode(o.access),
		ProbeInterval: o.probeInterval,

		MaxConcurrentReconciles: o.concurrency,
	}); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return err
	}
	logStart(log, o)
	return mgr.Start(ctx)
}

func logStart(log logr.Logger, o runOptions) {
	log.Info("starting service-provider-kro", "provider", o.providerName, "podNamespace", o.podNamespace, "leaderElection", o.leaderElect)
}

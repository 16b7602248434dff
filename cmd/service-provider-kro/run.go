package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/clusters"
	"github.com/openmcp-project/service-provider-kro/config/rbac"
	"github.com/openmcp-project/service-provider-kro/controllers"
	"github.com/openmcp-project/service-provider-kro/controllers/deletion"
	"github.com/openmcp-project/service-provider-kro/controllers/owned"
	"github.com/openmcp-project/service-provider-kro/controllers/reach"
	"github.com/openmcp-project/service-provider-kro/providers/sharding"
)

type runOptions struct {
	commonOptions
	access           string
	probeInterval    time.Duration
	quietPeriod      time.Duration
	accessGrace      time.Duration
	concurrency      int
	qps              float64
	burst            int
	metricsAddr      string
	metricsSecure    bool
	metricsCertDir   string
	probeAddr        string
	pprofAddr        string
	leaderElect      bool
	leaderElectionNS string
	sharding         bool
	shardID          string
	shardLease       time.Duration
}

func (o *runOptions) bind(fs *flag.FlagSet) {
	o.commonOptions.bind(fs)
	fs.StringVar(&o.access, "controlplane-access", "", "where ControlPlane kubeconfigs come from: standalone (a secret labelled "+v1alpha1.LabelControlPlaneKubeconfig+"=true in the tenant namespace) or openmcp (an AccessRequest per ControlPlane); default openmcp when the onboarding cluster is requested from openmcp, else standalone")
	fs.DurationVar(&o.quietPeriod, "controlplane-quiet-period", 90*time.Second, "how long an engaged ControlPlane may stay quiet (no answer to the provider's requests, no event or bookmark on its watches) before it is probed; a failed request has it probed at once")
	fs.DurationVar(&o.probeInterval, "controlplane-probe-interval", 15*time.Second, "how often an unreachable ControlPlane is probed again")
	fs.DurationVar(&o.accessGrace, "access-grace-period", deletion.DefaultAccessGracePeriod,
		"standalone access: how long a ControlPlane's kubeconfig secret must be missing before the deletion of its Kro counts the ControlPlane as gone and drops kro without uninstalling it")
	fs.IntVar(&o.concurrency, "max-concurrent-reconciles", 10, "how many Kros are reconciled at once")
	fs.Float64Var(&o.qps, "kube-api-qps", clusters.DefaultQPS, "requests per second the provider makes to the onboarding and to the platform cluster, each, in the long run")
	fs.IntVar(&o.burst, "kube-api-burst", clusters.DefaultBurst, "requests the provider may make to the onboarding and to the platform cluster, each, in a burst above --kube-api-qps")
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", ":8443", "address of the metrics endpoint; 0 disables it")
	fs.BoolVar(&o.metricsSecure, "metrics-secure", true, "serve metrics over HTTPS, only to clients the platform cluster authenticates and authorizes for GET /metrics (TokenReview and SubjectAccessReview, see the ClusterRole service-provider-kro-metrics-reader); false serves plain HTTP to anyone who reaches the port")
	fs.StringVar(&o.metricsCertDir, "metrics-cert-dir", "", "with --metrics-secure, the folder holding tls.crt and tls.key for the metrics endpoint (default: a self-signed certificate made at start)")
	fs.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081", "address of the health and readiness endpoints")
	fs.StringVar(&o.pprofAddr, "pprof-bind-address", "0", "address of Go's pprof endpoints (/debug/pprof/), for profiling; 0 disables them")
	fs.BoolVar(&o.leaderElect, "leader-elect", false, "elect a leader on the platform cluster so that only one replica reconciles")
	fs.StringVar(&o.leaderElectionNS, "leader-election-namespace", os.Getenv("POD_NAMESPACE"), "namespace of the leader election lease on the platform cluster (default: $POD_NAMESPACE)")
	fs.BoolVar(&o.sharding, "sharding", false, "share the ControlPlanes among all replicas, each acting on its own share, instead of one leader acting on all; --leader-elect is then ignored")
	fs.StringVar(&o.shardID, "shard-id", defaultShardID(), "with --sharding, this replica's name among the replicas, unique (default: $POD_NAME, else the host name)")
	fs.DurationVar(&o.shardLease, "shard-lease-duration", sharding.DefaultLeaseDuration, "with --sharding, how long a replica that stopped renewing its Lease (killed, cut off) keeps its share before the others take it over; a replica that stops cleanly hands over at once")
}

// defaultShardID is the pod's name, which openmcp-operator passes as $POD_NAME.
func defaultShardID() string {
	if id := os.Getenv("POD_NAME"); id != "" {
		return id
	}
	h, _ := os.Hostname()
	return h
}

// parseRun parses and checks run's flags.
func parseRun(args []string, stderr io.Writer) (*runOptions, error) {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := &runOptions{}
	o.bind(fs)
	if err := o.parse(fs, "run", args); err != nil {
		return nil, err
	}
	if o.qps <= 0 || o.burst <= 0 {
		return nil, fmt.Errorf("--kube-api-qps and --kube-api-burst must be positive")
	}
	if o.podNamespace == "" {
		return nil, fmt.Errorf("the provider's namespace on the platform cluster is unknown: set --pod-namespace or $POD_NAMESPACE")
	}
	if o.sharding {
		if errs := validation.IsDNS1123Subdomain(o.shardLeaseName()); len(errs) > 0 {
			return nil, fmt.Errorf("--shard-id=%q does not make a valid Lease name: %s", o.shardID, strings.Join(errs, "; "))
		}
		if o.shardLease < 3*time.Second {
			return nil, fmt.Errorf("--shard-lease-duration=%s: want at least 3s", o.shardLease)
		}
		// Every replica takes part; a leader would leave all but one idle.
		o.leaderElect = false
	}
	if o.leaderElect && o.leaderElectionNS == "" {
		return nil, fmt.Errorf("--leader-elect needs --leader-election-namespace or $POD_NAMESPACE")
	}
	if a := reach.AccessMode(o.access); a != "" && a != reach.AccessStandalone && a != reach.AccessOpenMCP {
		return nil, fmt.Errorf("--controlplane-access=%s: want %s or %s", a, reach.AccessStandalone, reach.AccessOpenMCP)
	}
	// openmcp-operator passes the metrics flags unless the ServiceProvider disables metrics:
	// then it passes none, and the endpoint stays off rather than open on the default port.
	if o.underOpenMCP() && !flagSet(fs, "metrics-bind-address") {
		o.metricsAddr = "0"
	}
	return o, nil
}

// runIdentity is identity, and under --sharding the replica's --shard-id after it, so that
// the writes and events of each replica can be told apart
// (service-provider-<name>[.<environment>].<shard-id>).
func (o *runOptions) runIdentity() string {
	if !o.sharding {
		return o.identity()
	}
	return o.identity() + "." + o.shardID
}

// shardLeaseName is the name of this replica's membership Lease.
func (o *runOptions) shardLeaseName() string {
	return "service-provider-" + o.providerName + "-" + o.shardID
}

// controlPlaneAccess is --controlplane-access, or its default: openmcp's AccessRequests
// when openmcp grants the onboarding cluster too, labelled secrets otherwise.
func (o *runOptions) controlPlaneAccess() reach.AccessMode {
	switch {
	case o.access != "":
		return reach.AccessMode(o.access)
	case o.underOpenMCP():
		return reach.AccessOpenMCP
	default:
		return reach.AccessStandalone
	}
}

// errRestart ends the process cleanly so that it starts again with access it must
// request anew (see clusters.OnboardingAccess.Watch).
type errRestart struct{ reason string }

func (e errRestart) Error() string { return e.reason }

// runManager starts the provider and blocks until ctx ends.
func runManager(ctx context.Context, args []string, stderr io.Writer) error {
	o, err := parseRun(args, stderr)
	if err != nil {
		return err
	}
	log, err := o.logger(stderr)
	if err != nil {
		return err
	}
	ctrl.SetLogger(log)
	access := o.controlPlaneAccess()

	platform, err := clusters.RESTConfig(clusters.Platform, o.platformKubeconfig)
	if err != nil {
		return err
	}
	rules, err := rbac.OnboardingRules()
	if err != nil {
		return err
	}
	onboarding, onboardingAccess, err := o.onboardingConfig(ctx, platform, clusters.OnboardingRunRequest, rules, log)
	if err != nil {
		return err
	}
	for _, cfg := range []*rest.Config{onboarding, platform} {
		cfg.QPS, cfg.Burst = float32(o.qps), o.burst
	}
	self, err := o.installation(ctx, platform)
	if err != nil {
		return err
	}
	if err := claimForRun(ctx, onboarding, self, log); err != nil {
		return err
	}

	mgr, err := ctrl.NewManager(onboarding, ctrl.Options{
		Scheme:                  clusters.Scheme,
		Cache:                   owned.OnboardingCacheOptions(),
		Metrics:                 o.metricsOptions(platform),
		HealthProbeBindAddress:  o.probeAddr,
		PprofBindAddress:        o.pprofAddr,
		LeaderElection:          o.leaderElect,
		LeaderElectionID:        clusters.LeaseName(o.providerName),
		LeaderElectionNamespace: o.leaderElectionNS,
		LeaderElectionConfig:    platform,
		// The process ends right after the manager, so the lease can go at once and
		// another replica takes over without waiting for it to expire.
		LeaderElectionReleaseOnCancel: true,
		Logger:                        log,
	})
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}
	shard, err := o.addShard(mgr, platform, log)
	if err != nil {
		return err
	}
	if err := controllers.Setup(ctx, mgr, platform, controllers.Options{
		ProviderName:  o.providerName,
		PodNamespace:  o.podNamespace,
		Access:        access,
		ProbeInterval: o.probeInterval,
		QuietPeriod:   o.quietPeriod,
		Identity:      o.runIdentity(),

		AccessGracePeriod: o.accessGrace,
		Shard:             shard,

		MaxConcurrentReconciles: o.concurrency,
	}); err != nil {
		return err
	}
	if err := addChecks(mgr, shard); err != nil {
		return err
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if onboardingAccess != nil {
		// Not leader-elected: every replica follows its own credentials.
		if err := mgr.Add(nonLeader(func(ctx context.Context) error {
			return onboardingAccess.Watch(ctx, platform, log.WithName("onboarding-access"), func(reason string) {
				cancel(errRestart{reason})
			})
		})); err != nil {
			return err
		}
	}
	if err := addClaimWatch(mgr, onboarding, self, log, func(lost *clusters.ClaimError) {
		cancel(lost)
	}); err != nil {
		return err
	}
	logStart(log, o, access)
	if err := mgr.Start(ctx); err != nil {
		return err
	}
	var lost *clusters.ClaimError
	if errors.As(context.Cause(ctx), &lost) {
		return fmt.Errorf("stopped: %w", lost)
	}
	var restart errRestart
	if errors.As(context.Cause(ctx), &restart) {
		log.Info("stopping so that the pod restarts and requests the onboarding cluster anew", "reason", restart.reason)
	}
	return nil
}

// addShard adds this replica's membership to the manager under --sharding; without it
// there is none (nil).
func (o *runOptions) addShard(mgr manager.Manager, platform *rest.Config, log logr.Logger) (*sharding.Membership, error) {
	if !o.sharding {
		return nil, nil
	}
	shard, err := sharding.New(platform, sharding.Options{
		Namespace:     o.podNamespace,
		Identity:      o.shardID,
		LeaseName:     o.shardLeaseName(),
		Labels:        map[string]string{v1alpha1.LabelProvider: o.providerName, v1alpha1.LabelRole: v1alpha1.RoleShardMember},
		LeaseDuration: o.shardLease,
		Log:           log.WithName("sharding"),
	})
	if err != nil {
		return nil, err
	}
	return shard, mgr.Add(shard)
}

// addChecks adds the health and readiness checks; under --sharding a replica is ready
// once it has joined.
func addChecks(mgr manager.Manager, shard *sharding.Membership) error {
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return err
	}
	if shard == nil {
		return nil
	}
	return mgr.AddReadyzCheck("shard", func(*http.Request) error {
		if !shard.Joined() {
			return fmt.Errorf("not a member yet, or the membership Lease could not be renewed")
		}
		return nil
	})
}

// metricsOptions serve metrics over plain HTTP, or over HTTPS to clients that the
// platform cluster, where the pod runs and where Prometheus' identity lives,
// authenticates and authorizes; the manager's own configuration is the onboarding
// cluster's.
func (o *runOptions) metricsOptions(platform *rest.Config) metricsserver.Options {
	opts := metricsserver.Options{BindAddress: o.metricsAddr, SecureServing: o.metricsSecure, CertDir: o.metricsCertDir}
	if o.metricsSecure {
		opts.FilterProvider = platformAuthFilter(platform)
	}
	return opts
}

// nonLeader is a runnable that runs on every replica, leader or not.
type nonLeader func(context.Context) error

func (f nonLeader) Start(ctx context.Context) error { return f(ctx) }
func (nonLeader) NeedLeaderElection() bool          { return false }

var _ manager.LeaderElectionRunnable = nonLeader(nil)

func logStart(log logr.Logger, o *runOptions, access reach.AccessMode) {
	log.Info("starting service-provider-kro", "provider", o.providerName, "environment", o.claimEnvironment(),
		"podNamespace", o.podNamespace, "controlPlaneAccess", access, "leaderElection", o.leaderElect, "sharding", o.sharding, "shardID", o.shardID,
		"metricsSecure", o.metricsSecure)
}

// flagSet says whether the command line set the flag name.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"go.uber.org/zap/zapcore"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/openmcp-project/service-provider-kro/clusters"
)

// commonOptions are the flags of both commands. openmcp-operator starts the init Job
// and the run Deployment with --environment, --verbosity and --provider-name; the rest
// serves the standalone mode and tuning.
type commonOptions struct {
	environment          string
	verbosity            string
	providerName         string
	onboardingKubeconfig string
	platformKubeconfig   string
	podNamespace         string
	accessTimeout        time.Duration
	zap                  zap.Options
	zapLevelSet          bool
}

func (o *commonOptions) bind(fs *flag.FlagSet) {
	fs.StringVar(&o.environment, "environment", "", "name of the openmcp environment (openmcp-operator passes it). With no --onboarding-kubeconfig, the provider runs as openmcp deploys it: the platform cluster is the pod's own, and the onboarding cluster is requested from openmcp. It also names the provider on the onboarding cluster (the field manager and the source of events) and, with --provider-name, --pod-namespace and the platform cluster's identity, makes the installation init and run claim the onboarding cluster for: one installation serves an onboarding cluster, and the provider refuses to act beside another (without --environment the environment is \""+standaloneEnvironment+"\")")
	fs.StringVar(&o.verbosity, "verbosity", "", "log level: DEBUG, INFO or ERROR (openmcp-operator passes it); --zap-log-level, if given, wins")
	fs.StringVar(&o.providerName, "provider-name", "kro", "name of this provider: its ProviderConfig and, under openmcp, its ServiceProvider carry the same name")
	fs.StringVar(&o.onboardingKubeconfig, "onboarding-kubeconfig", "", "kubeconfig of the onboarding cluster, where Kro objects live (default: requested from openmcp when --environment is given, else the ambient kubeconfig). run reads the file again every few seconds: a renewed token in it is used without a restart, while another server, CA or kind of credential stops the process so that it starts anew")
	fs.StringVar(&o.platformKubeconfig, "platform-kubeconfig", "", "kubeconfig of the platform cluster, where the ProviderConfig, Flux and the tenant namespaces live (default: the ambient kubeconfig: $KUBECONFIG, ~/.kube/config or the pod's service account)")
	fs.StringVar(&o.podNamespace, "pod-namespace", os.Getenv("POD_NAMESPACE"), "the provider's namespace on the platform cluster: the source pull secrets and, under openmcp, its access requests; the claim of the onboarding cluster names it, so that two installations in two namespaces are told apart (default: $POD_NAMESPACE)")
	fs.DurationVar(&o.accessTimeout, "onboarding-access-timeout", 30*time.Minute, "under openmcp, how long to wait for openmcp to grant access to the onboarding cluster before giving up (the pod then restarts)")
	o.zap.BindFlags(fs)
}

// parseFlags parses args of the command name and refuses anything it does not know,
// saying where the flags are listed.
func parseFlags(fs *flag.FlagSet, name string, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("service-provider-kro %s: %w (service-provider-kro %s -h lists the flags)", name, err, name)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("service-provider-kro %s: unexpected argument %q (service-provider-kro %s -h lists the flags)", name, fs.Arg(0), name)
	}
	return nil
}

// parse parses the flags of the command name and checks the common ones.
func (o *commonOptions) parse(fs *flag.FlagSet, name string, args []string) error {
	if err := parseFlags(fs, name, args); err != nil {
		return err
	}
	fs.Visit(func(f *flag.Flag) { o.zapLevelSet = o.zapLevelSet || f.Name == "zap-log-level" })
	if o.verbosity != "" { // openmcp passes --verbosity= when the ServiceProvider sets none
		if _, err := verbosityLevel(o.verbosity); err != nil {
			return fmt.Errorf("service-provider-kro %s: %w", name, err)
		}
	}
	return nil
}

// logger builds the logger: --verbosity sets the level unless --zap-log-level does.
func (o *commonOptions) logger(w io.Writer) (logr.Logger, error) {
	if o.verbosity != "" && !o.zapLevelSet {
		level, err := verbosityLevel(o.verbosity)
		if err != nil {
			return logr.Logger{}, err
		}
		o.zap.Level = level
	}
	return zap.New(zap.UseFlagOptions(&o.zap), zap.WriteTo(w)), nil
}

// underOpenMCP says whether the onboarding cluster is requested from openmcp: the
// provider was started by openmcp-operator (which always passes --environment) and
// was given no kubeconfig of its own for it.
func (o *commonOptions) underOpenMCP() bool {
	return o.environment != "" && o.onboardingKubeconfig == ""
}

// identity names the provider, and its environment, in its writes and events on the
// onboarding cluster, so that two environments sharing it can be told apart.
func (o *commonOptions) identity() string {
	if o.environment == "" {
		return "service-provider-" + o.providerName
	}
	return "service-provider-" + o.providerName + "." + o.environment
}

// onboardingConfig returns how to reach the onboarding cluster: the given kubeconfig
// file, the ambient one in standalone mode, or, under openmcp, access requested with
// openmcp's library. For a file and under openmcp access is non-nil, and a provider that
// runs for long watches it, so that a renewed token is used without a restart. Under
// openmcp it never falls back to the ambient configuration, which is the platform
// cluster's.
func (o *commonOptions) onboardingConfig(ctx context.Context, platform *rest.Config, localName string, rules []rbacv1.PolicyRule, log logr.Logger) (*rest.Config, *clusters.OnboardingAccess, error) {
	if o.onboardingKubeconfig != "" {
		access, err := clusters.OnboardingFromFile(o.onboardingKubeconfig)
		if err != nil {
			return nil, nil, err
		}
		return access.Config, access, nil
	}
	if !o.underOpenMCP() {
		cfg, err := clusters.RESTConfig(clusters.Onboarding, "")
		return cfg, nil, err
	}
	if o.podNamespace == "" {
		return nil, nil, fmt.Errorf("under openmcp the provider requests the onboarding cluster in its own namespace, which is unknown: $POD_NAMESPACE is not set")
	}
	c, err := client.New(platform, client.Options{Scheme: clusters.Scheme})
	if err != nil {
		return nil, nil, fmt.Errorf("connecting to the platform cluster %s: %w", platform.Host, err)
	}
	req := clusters.OnboardingRequest{
		Platform: c, ProviderName: o.providerName, Namespace: o.podNamespace, LocalName: localName,
		Rules: rules, Interval: 2 * time.Second, Timeout: o.accessTimeout,
	}
	log.Info("requesting the onboarding cluster from openmcp", "environment", o.environment,
		"accessRequest", o.podNamespace+"/"+clusters.OnboardingRequestName(o.providerName, localName), "timeout", o.accessTimeout)
	access, err := req.Request(ctx, clusters.Scheme)
	if err != nil {
		return nil, nil, err
	}
	log.Info("openmcp granted the onboarding cluster", "host", access.Config.Host, "secret", access.Secret.String())
	return access.Config, access, nil
}

// verbosityLevel maps openmcp's --verbosity to a zap level.
func verbosityLevel(v string) (zapcore.Level, error) {
	switch strings.ToUpper(v) {
	case "DEBUG":
		return zapcore.DebugLevel, nil
	case "INFO":
		return zapcore.InfoLevel, nil
	case "ERROR":
		return zapcore.ErrorLevel, nil
	}
	return 0, fmt.Errorf("--verbosity=%s: want DEBUG, INFO or ERROR", v)
}

// Package clusters knows the kinds of cluster the provider works with and how each is
// reached: the onboarding cluster (Kro objects), the platform cluster (ProviderConfig,
// Flux, tenant namespaces) and the tenants' ControlPlanes.
package clusters

import (
	"context"
	"fmt"
	"os"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/openmcp-project/service-provider-kro/providers/controlplane"
)

// The kinds of cluster, as named by the openmcp.cloud/cluster label on CRDs.
const (
	Onboarding = "onboarding"
	Platform   = "platform"
)

// Client-side rate limits for the onboarding and platform clusters. client-go's default
// of 5 requests per second (burst 10) caps a provider serving hundreds of ControlPlanes
// at a handful of Kros per second; the API servers of these clusters are the platform's.
// These are Flux's controllers' defaults: a pull secret rotation rewrites one copy per Kro
// at once up to the burst, then at the rate.
const (
	DefaultQPS   = 50
	DefaultBurst = 300
)

// RESTConfig loads a kubeconfig file. An empty path means the ambient configuration:
// $KUBECONFIG, ~/.kube/config, or the in-cluster service account.
func RESTConfig(kind, path string) (*rest.Config, error) {
	if path == "" {
		rules := clientcmd.NewDefaultClientConfigLoadingRules()
		cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("no kubeconfig given for the %s cluster and none found in $KUBECONFIG, ~/.kube/config or the pod: %w", kind, err)
		}
		return withRateLimits(cfg), nil
	}
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("reading the %s cluster's kubeconfig: %w", kind, err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("loading the %s cluster's kubeconfig %s: %w", kind, path, err)
	}
	return withRateLimits(cfg), nil
}

func withRateLimits(cfg *rest.Config) *rest.Config {
	if cfg.QPS == 0 {
		cfg.QPS = DefaultQPS
	}
	if cfg.Burst == 0 {
		cfg.Burst = DefaultBurst
	}
	return cfg
}

// Ping asks the API server for its version, to fail early and clearly when it cannot be
// reached or does not accept the credentials.
func Ping(cfg *rest.Config) error {
	return PingContext(context.Background(), cfg)
}

// PingContext is Ping bounded by ctx.
func PingContext(ctx context.Context, cfg *rest.Config) error {
	return controlplane.Ping(ctx, cfg)
}

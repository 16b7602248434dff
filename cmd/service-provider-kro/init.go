package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	libutils "github.com/openmcp-project/openmcp-operator/lib/utils"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/clusters"
	"github.com/openmcp-project/service-provider-kro/config/crd"
	"github.com/openmcp-project/service-provider-kro/config/rbac"
)

// runInit claims the onboarding cluster for the provider's installation (see claim.go),
// installs the onboarding CRDs on the onboarding cluster and the platform CRDs on
// the platform cluster, then registers the Kro kind on the provider's ServiceProvider
// where there is one (under openmcp), so that openmcp deletes a ControlPlane's Kro
// before the ControlPlane. It is idempotent and fails on the first error, and before
// changing anything when another installation serves the onboarding cluster.
func runInit(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseInit(args, stderr)
	if err != nil {
		return err
	}
	log, err := o.logger(stderr)
	if err != nil {
		return err
	}
	if !o.underOpenMCP() { // a missing kubeconfig file is named before anything connects
		if _, err := clusters.RESTConfig(clusters.Onboarding, o.onboardingKubeconfig); err != nil {
			return fmt.Errorf("init on the onboarding cluster: %w", err)
		}
	}
	platform, err := clusters.RESTConfig(clusters.Platform, o.platformKubeconfig)
	if err != nil {
		return fmt.Errorf("init on the platform cluster: %w", err)
	}
	if err := reachable(platform); err != nil {
		return fmt.Errorf("init on the platform cluster: %w", err)
	}
	self, err := o.installation(ctx, platform)
	if err != nil {
		return fmt.Errorf("init on the platform cluster: %w", err)
	}
	onboarding, _, err := o.onboardingConfig(ctx, platform, clusters.OnboardingInitRequest, rbac.InitRules(), log)
	if err != nil {
		return fmt.Errorf("init on the onboarding cluster: %w", err)
	}
	for _, target := range []struct {
		kind string
		cfg  *rest.Config
	}{{clusters.Onboarding, onboarding}, {clusters.Platform, platform}} {
		if err := installFor(ctx, target.kind, target.cfg, self, stdout); err != nil {
			return fmt.Errorf("init on the %s cluster: %w", target.kind, err)
		}
	}
	return registerServiceKind(ctx, platform, o.providerName, stdout)
}

// parseInit parses init's flags: those openmcp-operator gives its init Job and the
// kubeconfigs of the standalone mode.
func parseInit(args []string, stderr io.Writer) (*commonOptions, error) {
	fs := flag.NewFlagSet("init", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := &commonOptions{}
	o.bind(fs)
	if err := o.parse(fs, "init", args); err != nil {
		return nil, err
	}
	return o, nil
}

func reachable(cfg *rest.Config) error {
	if cfg.Timeout == 0 {
		cfg.Timeout = 30 * time.Second // a black-holed address must not hang init
	}
	return clusters.Ping(cfg)
}

// installFor applies the CRDs of the cluster kind. On the onboarding cluster it claims
// the cluster for the installation self before and after the install.
func installFor(ctx context.Context, kind string, cfg *rest.Config, self clusters.Claimant, stdout io.Writer) error {
	if err := reachable(cfg); err != nil {
		return err
	}
	c, err := client.New(cfg, client.Options{Scheme: clusters.Scheme})
	if err != nil {
		return fmt.Errorf("connecting to %s: %w", cfg.Host, err)
	}
	crds, err := crd.ForCluster(kind)
	if err != nil {
		return err
	}
	claim := kind == clusters.Onboarding
	claimedBefore := clusters.ClaimHeld
	if claim {
		if claimedBefore, err = claimBeforeInstall(ctx, c, self); err != nil {
			return err
		}
	}
	changed, err := clusters.InstallCRDs(ctx, c, crds)
	if err != nil {
		return err
	}
	names := make([]string, 0, len(crds))
	for _, c := range crds {
		names = append(names, c.Name)
	}
	state := "up to date"
	if len(changed) > 0 {
		state = "applied " + strings.Join(changed, ", ")
	}
	fmt.Fprintf(stdout, "%s cluster: CRDs %s (%s)\n", kind, strings.Join(names, ", "), state)
	if claim {
		return claimAfterInstall(ctx, c, self, claimedBefore, stdout)
	}
	return nil
}

// registerServiceKind lists the Kro kind in the status of the ServiceProvider named
// like the provider. Without openmcp (no ServiceProvider kind or object) there is
// nothing to register with.
func registerServiceKind(ctx context.Context, platform *rest.Config, providerName string, stdout io.Writer) error {
	c, err := client.New(platform, client.Options{Scheme: clusters.Scheme})
	if err != nil {
		return fmt.Errorf("connecting to %s: %w", platform.Host, err)
	}
	gvk := metav1.GroupVersionKind{Group: v1alpha1.GroupVersion.Group, Version: v1alpha1.GroupVersion.Version, Kind: "Kro"}
	err = libutils.RegisterGVKsAtServiceProvider(ctx, c, providerName, gvk)
	switch {
	case err == nil:
		fmt.Fprintf(stdout, "platform cluster: ServiceProvider %s serves %s/%s %s\n", providerName, gvk.Group, gvk.Version, gvk.Kind)
		return nil
	case apierrors.IsNotFound(err) || meta.IsNoMatchError(err):
		fmt.Fprintf(stdout, "platform cluster: no ServiceProvider %s to register the Kro kind with (not deployed by openmcp)\n", providerName)
		return nil
	default:
		return fmt.Errorf("registering the Kro kind on ServiceProvider %s: %w", providerName, err)
	}
}

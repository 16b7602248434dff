package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmcp-project/service-provider-kro/clusters"
	"github.com/openmcp-project/service-provider-kro/config/crd"
)

type initOptions struct {
	onboardingKubeconfig string
	platformKubeconfig   string
}

func (o *initOptions) bind(fs *flag.FlagSet) {
	fs.StringVar(&o.onboardingKubeconfig, "onboarding-kubeconfig", "", "kubeconfig of the onboarding cluster (default: the ambient kubeconfig)")
	fs.StringVar(&o.platformKubeconfig, "platform-kubeconfig", "", "kubeconfig of the platform cluster (default: the ambient kubeconfig)")
}

// runInit installs the onboarding CRDs on the onboarding cluster and the platform CRDs on
// the platform cluster. It is idempotent and fails on the first error.
func runInit(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("init", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o initOptions
	o.bind(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	for _, target := range []struct{ kind, kubeconfig string }{
		{clusters.Onboarding, o.onboardingKubeconfig},
		{clusters.Platform, o.platformKubeconfig},
	} {
		if err := installFor(ctx, target.kind, target.kubeconfig, stdout); err != nil {
			return fmt.Errorf("init on the %s cluster: %w", target.kind, err)
		}
	}
	return nil
}

func installFor(ctx context.Context, kind, kubeconfig string, stdout io.Writer) error {
	cfg, err := clusters.RESTConfig(kind, kubeconfig)
	if err != nil {
		return err
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 30 * time.Second // a black-holed address must not hang init
	}
	if err := clusters.Ping(cfg); err != nil {
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
	return nil
}

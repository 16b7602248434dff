package main

import (
	"context"
	"fmt"
	"io"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/clusters"
)

// One environment serves an onboarding cluster. Each environment's provider acts on
// every Kro there, so a second one would count the Kros of the first one's ControlPlanes
// as gone and remove their finalizer past the first one's deletion guard. `init` and
// `run` therefore claim the onboarding cluster for their environment on the Kro CRD
// (v1alpha1.AnnotationEnvironment) and refuse to act when another environment holds it.

// standaloneEnvironment is the environment of a provider started without --environment.
const standaloneEnvironment = "standalone"

// claimEnvironment is the environment the provider claims the onboarding cluster for:
// --environment, or "standalone" without it.
func (o *commonOptions) claimEnvironment() string {
	if o.environment == "" {
		return standaloneEnvironment
	}
	return o.environment
}

// claimBeforeInstall checks the claim before init applies the onboarding CRDs, so that
// another environment's CRD is never changed: it claims an unclaimed CRD and fails with
// a *clusters.ClaimError when another environment holds it. A missing CRD (a new
// onboarding cluster) is claimed after the install. It reports whether it claimed.
func claimBeforeInstall(ctx context.Context, c client.Client, environment string) (bool, error) {
	claimed, err := clusters.Claim(ctx, c, environment)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	return claimed, err
}

// claimAfterInstall claims the freshly applied CRD (under optimistic locking, so that of
// two environments installing at once only one wins) and says who serves the cluster.
func claimAfterInstall(ctx context.Context, c client.Client, environment string, claimedBefore bool, stdout io.Writer) error {
	claimed, err := clusters.Claim(ctx, c, environment)
	if err != nil {
		return err
	}
	state := "already claimed"
	if claimed || claimedBefore {
		state = "claimed now"
	}
	fmt.Fprintf(stdout, "%s cluster: served by environment %s (%s=%s on CRD %s, %s)\n",
		clusters.Onboarding, environment, v1alpha1.AnnotationEnvironment, environment, clusters.KroCRD, state)
	return nil
}

// claimForRun claims the onboarding cluster before any controller acts: it refuses to
// start beside another environment, and claims a CRD that no environment holds yet (one
// installed by an earlier init or by kustomize).
func claimForRun(ctx context.Context, onboarding *rest.Config, environment string, log logr.Logger) error {
	c, err := client.New(onboarding, client.Options{Scheme: clusters.Scheme})
	if err != nil {
		return fmt.Errorf("connecting to the onboarding cluster %s: %w", onboarding.Host, err)
	}
	claimed, err := clusters.Claim(ctx, c, environment)
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Errorf("the Kro CRD %s is not installed on the onboarding cluster: run `service-provider-kro init` first", clusters.KroCRD)
	case err != nil:
		return fmt.Errorf("refusing to start: %w", err)
	case claimed:
		log.Info("claimed the onboarding cluster for this environment", "crd", clusters.KroCRD,
			"annotation", v1alpha1.AnnotationEnvironment, "environment", environment)
	}
	return nil
}

// addClaimWatch keeps checking the claim while the provider runs, on every replica:
// when another environment takes it, lost stops the manager.
func addClaimWatch(mgr manager.Manager, onboarding *rest.Config, environment string, log logr.Logger, lost func(*clusters.ClaimError)) error {
	return mgr.Add(nonLeader(func(ctx context.Context) error {
		return clusters.WatchClaim(ctx, onboarding, environment, log.WithName("claim"), lost)
	}))
}

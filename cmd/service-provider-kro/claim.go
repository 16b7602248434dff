package main

import (
	"context"
	"fmt"
	"io"

	"github.com/go-logr/logr"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/clusters"
)

// One installation serves an onboarding cluster. Each installation's provider acts on
// every Kro there, so a second one would count the Kros of the first one's ControlPlanes
// as gone and remove their finalizer past the first one's deletion guard. `init` and
// `run` therefore claim the onboarding cluster for their installation on the Kro CRD
// (v1alpha1.AnnotationEnvironment) and refuse to act when another installation holds
// it. An installation is its environment, its provider name, its platform cluster and
// its namespace there (clusters.Installation): two standalone installations are both
// "standalone", and only their platform clusters or namespaces tell them apart; the
// replicas of one installation share the claim.

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

// installation is the installation the provider claims the onboarding cluster for; it
// reads the platform cluster's identity and looks there for a trace of an earlier run
// of the installation (clusters.FindTrace).
func (o *commonOptions) installation(ctx context.Context, platform *rest.Config) (clusters.Claimant, error) {
	c, err := client.New(platform, client.Options{Scheme: clusters.Scheme})
	if err != nil {
		return clusters.Claimant{}, fmt.Errorf("connecting to the platform cluster %s: %w", platform.Host, err)
	}
	return o.claimant(ctx, c)
}

// claimant is installation with a client of the platform cluster.
func (o *commonOptions) claimant(ctx context.Context, platform client.Reader) (clusters.Claimant, error) {
	uid, err := clusters.PlatformIdentity(ctx, platform)
	if err != nil {
		return clusters.Claimant{}, err
	}
	self := clusters.Installation{Environment: o.claimEnvironment(), Provider: o.providerName, Platform: uid, Namespace: o.podNamespace}
	trace, err := clusters.FindTrace(ctx, platform, self)
	if err != nil {
		return clusters.Claimant{}, err
	}
	return clusters.Claimant{Installation: self, Trace: trace}, nil
}

// claimStates says in words what init found or did with the claim.
var claimStates = map[clusters.Claimed]string{
	clusters.ClaimHeld:      "already claimed",
	clusters.ClaimWritten:   "claimed now",
	clusters.ClaimRewritten: "rewritten with the namespace from this installation's claim of the previous format",
	clusters.ClaimTakenOver: "taken over from an earlier version's claim of the environment",
}

// claimBeforeInstall checks the claim before init applies the onboarding CRDs, so that
// another installation's CRD is never changed: it claims an unclaimed CRD and fails
// with a *clusters.ClaimError when another installation holds it. A missing CRD (a new
// onboarding cluster) is claimed after the install.
func claimBeforeInstall(ctx context.Context, c client.Client, self clusters.Claimant) (clusters.Claimed, error) {
	claimed, err := clusters.Claim(ctx, c, self)
	if apierrors.IsNotFound(err) {
		return clusters.ClaimHeld, nil
	}
	return claimed, err
}

// claimAfterInstall claims the freshly applied CRD (under optimistic locking, so that of
// two installations installing at once only one wins) and says who serves the cluster.
func claimAfterInstall(ctx context.Context, c client.Client, self clusters.Claimant, before clusters.Claimed, stdout io.Writer) error {
	claimed, err := clusters.Claim(ctx, c, self)
	if err != nil {
		return err
	}
	if before != clusters.ClaimHeld {
		claimed = before
	}
	// Without its namespace, init accepts its installation's claim that names one.
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := c.Get(ctx, client.ObjectKey{Name: clusters.KroCRD}, crd); err != nil {
		return fmt.Errorf("reading the claim on CRD %s: %w", clusters.KroCRD, err)
	}
	claim := crd.Annotations[v1alpha1.AnnotationEnvironment]
	fmt.Fprintf(stdout, "%s cluster: served by installation %s (%s=%s on CRD %s, %s)\n",
		clusters.Onboarding, clusters.ParseClaim(claim), v1alpha1.AnnotationEnvironment, claim, clusters.KroCRD, claimStates[claimed])
	return nil
}

// claimForRun claims the onboarding cluster before any controller acts: it refuses to
// start beside another installation, and claims a CRD that no installation holds yet
// (one installed by an earlier init or by kustomize), and rewrites the installation's
// own claim of an earlier format (clusters.Claim says which is its own).
func claimForRun(ctx context.Context, onboarding *rest.Config, self clusters.Claimant, log logr.Logger) error {
	c, err := client.New(onboarding, client.Options{Scheme: clusters.Scheme})
	if err != nil {
		return fmt.Errorf("connecting to the onboarding cluster %s: %w", onboarding.Host, err)
	}
	claimed, err := clusters.Claim(ctx, c, self)
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Errorf("the Kro CRD %s is not installed on the onboarding cluster: run `service-provider-kro init` first", clusters.KroCRD)
	case err != nil:
		return fmt.Errorf("refusing to start: %w", err)
	case claimed == clusters.ClaimWritten:
		log.Info("claimed the onboarding cluster for this installation", "crd", clusters.KroCRD,
			"annotation", v1alpha1.AnnotationEnvironment, "claim", self.Claim())
	case claimed == clusters.ClaimRewritten:
		log.Info("rewrote this installation's claim of the previous format with its namespace; a provider of that version still running stops",
			"crd", clusters.KroCRD, "annotation", v1alpha1.AnnotationEnvironment, "claim", self.Claim())
	case claimed == clusters.ClaimTakenOver:
		log.Info("took over an earlier version's claim of the onboarding cluster for this environment, which this installation wrote; a provider of that version still running stops",
			"crd", clusters.KroCRD, "annotation", v1alpha1.AnnotationEnvironment, "claim", self.Claim(), "trace", self.Trace)
	}
	return nil
}

// addClaimWatch keeps checking the claim while the provider runs, on every replica:
// when another installation takes it, lost stops the manager.
func addClaimWatch(mgr manager.Manager, onboarding *rest.Config, self clusters.Claimant, log logr.Logger, lost func(*clusters.ClaimError)) error {
	return mgr.Add(nonLeader(func(ctx context.Context) error {
		return clusters.WatchClaim(ctx, onboarding, self, log.WithName("claim"), lost)
	}))
}

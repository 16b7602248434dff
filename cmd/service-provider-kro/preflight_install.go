package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/version"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmcp-project/service-provider-kro/clusters"
)

// The checks of who else serves the Kros: another installation that holds the
// onboarding cluster's claim, and the earlier provider while it still runs. Either
// would have this provider refuse to start, or two providers act on every Kro.

// firstRelease is this provider's first release: the earlier provider's releases,
// up to v1.4.0, come before it.
var firstRelease = version.MustParseSemantic("v1.5.0")

// imageName is the last part of the repository of the provider's image, the earlier
// provider's and this one's.
const imageName = "service-provider-kro"

// checkClaim says what init and run would find in the onboarding cluster's claim
// (clusters.CheckClaim): nothing to do, a claim of an earlier format they rewrite, or
// another installation's, on which they would refuse to act.
func (p *preflightRun) checkClaim(ctx context.Context) error {
	env := p.opts.environment
	if env == "" {
		env = standaloneEnvironment
	}
	o := commonOptions{environment: env, providerName: p.opts.providerName, podNamespace: p.opts.podNamespace}
	self, err := o.claimant(ctx, p.platform)
	if err != nil {
		return fmt.Errorf("preflight: %w", err)
	}
	claimed, err := clusters.CheckClaim(ctx, p.onboarding, self)
	var held *clusters.ClaimError
	switch {
	case apierrors.IsNotFound(err):
		p.ok("the onboarding cluster is not claimed yet (no CRD %s): init claims it for installation %s", clusters.KroCRD, self)
		return nil
	case errors.As(err, &held):
		p.toFix("%v", held)
		return nil
	case err != nil:
		return fmt.Errorf("preflight: reading the claim on CRD %s: %w", clusters.KroCRD, err)
	}
	if p.opts.podNamespace == "" {
		p.noteThat("the claim was checked without the provider's namespace: give --pod-namespace to tell two installations in two namespaces of this platform cluster apart")
	}
	switch claimed {
	case clusters.ClaimWritten:
		p.ok("the onboarding cluster is not claimed yet: init and run claim it for installation %s", self)
	case clusters.ClaimRewritten:
		p.noteThat("the onboarding cluster is claimed by this installation in the previous format, without its namespace: init and run rewrite the claim with namespace %s", self.Namespace)
	case clusters.ClaimTakenOver:
		p.noteThat("the onboarding cluster is claimed by an earlier version for environment %q, and %s on this platform cluster shows that this installation ran here: init and run take the claim over, and a provider of that version still running stops",
			self.Environment, self.Trace)
	default:
		p.ok("the onboarding cluster is claimed by this installation (%s)", self)
	}
	return nil
}

// checkEarlierProvider looks for the earlier provider still running on the platform
// cluster, in the provider's namespace (in every namespace without it): pods and
// Deployments with its image at a release before this provider's. Two providers acting
// on the same Kros undo each other's work, and the earlier one's HelmRelease is not
// suspended while it keeps driving it.
func (p *preflightRun) checkEarlierProvider(ctx context.Context) error {
	where := "any namespace"
	var in []client.ListOption
	if p.opts.podNamespace != "" {
		where = "namespace " + p.opts.podNamespace
		in = append(in, client.InNamespace(p.opts.podNamespace))
	}
	var running []string
	var deployments appsv1.DeploymentList
	if err := p.platform.List(ctx, &deployments, in...); err != nil {
		return fmt.Errorf("preflight: listing the Deployments in %s on the platform cluster: %w", where, err)
	}
	for _, d := range deployments.Items {
		replicas := int32(1)
		if d.Spec.Replicas != nil {
			replicas = *d.Spec.Replicas
		}
		if image := earlierImage(d.Spec.Template.Spec.Containers); image != "" && replicas > 0 {
			running = append(running, fmt.Sprintf("Deployment %s/%s (%s, %d replicas)", d.Namespace, d.Name, image, replicas))
		}
	}
	var pods corev1.PodList
	if err := p.platform.List(ctx, &pods, in...); err != nil {
		return fmt.Errorf("preflight: listing the pods in %s on the platform cluster: %w", where, err)
	}
	for _, pod := range pods.Items {
		if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue // an init Job's pod that finished
		}
		if image := earlierImage(pod.Spec.Containers); image != "" {
			running = append(running, fmt.Sprintf("pod %s/%s (%s)", pod.Namespace, pod.Name, image))
		}
	}
	if len(running) > 0 {
		p.toFix("the earlier provider still runs on the platform cluster: %s; two providers would act on the same Kros and undo each other's work. "+
			"Under openmcp delete its ServiceProvider (or scale its Deployment to 0 and keep it there), standalone stop it; wait until its pods are gone, then start this provider "+
			"(docs/migration.md, \"Taking over from the earlier provider\")", strings.Join(running, ", "))
		return nil
	}
	p.ok("the earlier provider (%s before %s) does not run in %s on the platform cluster", imageName, firstRelease, where)
	return nil
}

// earlierImage is the first of containers' images that is the earlier provider's: the
// repository's last part is imageName and the tag a release before firstRelease. An
// image without such a tag (a digest, "latest") is not taken for it.
func earlierImage(containers []corev1.Container) string {
	for _, c := range containers {
		ref, _, _ := strings.Cut(c.Image, "@")
		slash, colon := strings.LastIndex(ref, "/"), strings.LastIndex(ref, ":")
		if colon <= slash || ref[slash+1:colon] != imageName {
			continue
		}
		if v, err := version.ParseSemantic(ref[colon+1:]); err == nil && v.LessThan(firstRelease) {
			return c.Image
		}
	}
	return ""
}

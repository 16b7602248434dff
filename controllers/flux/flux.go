// Package flux holds the Kro's Flux objects: how its OCIRepository and HelmRelease are
// built, applied and read back (their install generations, Flux shards, the inventory in
// the status), and Applier, the steps that apply them.
package flux

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/version"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/clusters"
	"github.com/openmcp-project/service-provider-kro/controllers/guard"
	"github.com/openmcp-project/service-provider-kro/controllers/owned"
	"github.com/openmcp-project/service-provider-kro/controllers/reach"
	"github.com/openmcp-project/service-provider-kro/controllers/step"
)

// Applier applies the Kro's OCIRepository and HelmRelease and reads them back.
type Applier struct{ step.Clients }

// ReconcileOCIRepository applies the chart source and reports its readiness.
func (r *Applier) ReconcileOCIRepository(ctx context.Context, s *step.Scope) (step.Result, error) {
	repo := newOCIRepository(s.Kro, r.ProviderName, s.TenantNamespace, s.Version, s.ChartSecret, s.PollInterval)
	LabelFluxShard(repo, s.FluxShard)
	ours, err := owned.ApplyOwned(ctx, r.Platform, r.PlatformReader, repo, &sourcev1.OCIRepository{}, func(current client.Object) (bool, error) {
		MoveSourceShard(repo, current, s.FluxShard, time.Now())
		return true, stampInstall(repo, current)
	})
	if err != nil {
		return step.Proceed, fmt.Errorf("applying OCIRepository %s/%s: %w", repo.Namespace, repo.Name, err)
	}
	if !ours {
		s.Obs.OwnershipConflict(v1alpha1.ConditionOCIRepositoryReady,
			owned.ConflictMessage(s.Kro, "OCIRepository", "the platform cluster", repo, fluxConflictAdvice))
		return step.Waiting, nil
	}
	s.Repo = repo
	status, message := readFlux(repo, s.Before)
	s.Obs.Managed = append(s.Obs.Managed, managedFlux(repo, status, message))
	step.FluxCondition(&s.Obs, v1alpha1.ConditionOCIRepositoryReady, "OCIRepository "+repo.Namespace+"/"+repo.Name, status, message, v1alpha1.ReasonSourceNotReady)
	reportSuspended(&s.Obs, v1alpha1.ConditionOCIRepositoryReady, "OCIRepository", "source oci", repo, repo.Spec.Suspend)
	return step.Proceed, nil
}

// fluxConflictAdvice says what to do about a Flux object of the provider's name that the
// provider did not create.
const fluxConflictAdvice = "the tenant namespace holds the provider's OCIRepository and HelmRelease, named after the provider; move that object elsewhere or delete it if nobody needs it"

// ObserveControlPlane finds the access to the ControlPlane; without it, the step waits.
func (r *Applier) ObserveControlPlane(ctx context.Context, s *step.Scope) (step.Result, error) {
	access, na, err := step.LookUpAccess(ctx, r.ControlPlanes, s)
	switch {
	case err != nil:
		return step.Proceed, err
	case na != nil && na.Connecting:
		return step.Undecided, nil
	case na != nil:
		return step.Waiting, nil
	}

	rgds, err := access.ResourceGraphDefinitions(ctx)
	switch {
	case errors.Is(err, reach.ErrRGDsUnknown):
		s.Obs.RgdsNotKnownYet(meta.FindStatusCondition(s.Kro.Status.Conditions, v1alpha1.ConditionResourceGraphDefinitionsReady), err.Error())
	case err != nil:
		return step.Proceed, err
	default:
		s.Obs.Rgds = guard.SummarizeRGDs(rgds)
		step.RgdCondition(&s.Obs, s.Obs.Rgds)
	}
	return step.Proceed, nil
}

// ReconcileHelmRelease applies the release of kro onto the ControlPlane and reports its
// readiness; the Kro is Ready only when the HelmRelease is. A change that need not go out
// with the source's waits until source-controller has observed the source
// (releaseWaitsForSource); the HelmRelease as it is is reported meanwhile.
func (r *Applier) ReconcileHelmRelease(ctx context.Context, s *step.Scope) (step.Result, error) {
	hr := NewHelmRelease(s.Kro, r.ProviderName, s.TenantNamespace, s.Version, s.Access.Kubeconfig, s.PollInterval)
	LabelFluxShard(hr, s.FluxShard)
	if s.Workload != nil {
		if err := placeOnWorkloadCluster(hr, s.Workload, s.ChartExtras); err != nil {
			return step.Proceed, err
		}
	}
	if err := s.Record.Annotate(hr); err != nil {
		return step.Proceed, err
	}
	var shardWait, forced string
	ours, err := owned.ApplyOwned(ctx, r.Platform, r.PlatformReader, hr, &helmv2.HelmRelease{}, func(current client.Object) (bool, error) {
		now := time.Now()
		var until, stuckAt time.Time
		shardWait, until = HoldReleaseShard(hr, current, s.Repo, s.FluxShard, now)
		forced, stuckAt = ForceStuckRelease(hr, current, s.Version.ChartVersion, now)
		for _, at := range []time.Time{until, stuckAt} {
			if !at.IsZero() {
				s.Requeue(at.Sub(now))
			}
		}
		if err := stampInstall(hr, current); err != nil {
			return false, err
		}
		wait, err := releaseWaitsForSource(s.Repo, current, hr)
		if wait {
			forced = "" // not applied: asked for at the next apply
		}
		return !wait, err
	})
	if err != nil {
		return step.Proceed, fmt.Errorf("applying HelmRelease %s/%s: %w", hr.Namespace, hr.Name, err)
	}
	if !ours {
		s.Obs.OwnershipConflict(v1alpha1.ConditionHelmReleaseReady,
			owned.ConflictMessage(s.Kro, "HelmRelease", "the platform cluster", hr, fluxConflictAdvice))
		return step.Waiting, nil
	}
	if forced != "" {
		r.Recorder.Eventf(s.Kro, nil, corev1.EventTypeNormal, v1alpha1.ReasonFluxReleaseForced, "ForceRelease", "HelmRelease %s/%s: %s",
			hr.Namespace, hr.Name, forced)
	}
	status, message := readFlux(hr, s.Before)
	managed := managedFlux(hr, status, WithoutShardWait(message))
	if shardWait != "" {
		r.reportShardWait(s, &managed, ShardWaitMessage(s.FluxShard, shardWait))
	}
	s.Obs.Managed = append(s.Obs.Managed, managed)
	InstalledCondition(&s.Obs, "HelmRelease "+hr.Namespace+"/"+hr.Name, s.Version.ChartVersion, InstalledChart(hr), status, message, ReleaseFailReason(hr))
	reportSuspended(&s.Obs, v1alpha1.ConditionHelmReleaseReady, "HelmRelease", "helmrelease", hr, hr.Spec.Suspend)
	return step.Proceed, nil
}

// ObserveKro reports whether kro itself runs where it is installed (KroAvailable): its
// Deployment, as the Helm release made it, with a replica available. The HelmRelease
// says what Helm did last; this says what is there now, read from the watched cache, so
// that a tenant deleting or scaling down kro shows within seconds rather than at
// helm-controller's next drift check.
func (r *Applier) ObserveKro(ctx context.Context, s *step.Scope) (step.Result, error) {
	d, err := guard.ReadKroDeployment(ctx, s.Site.Deployment())
	if err != nil {
		return step.Proceed, err
	}
	s.Obs.KroAvailability(d.Available, d.Message)
	return step.Proceed, nil
}

// InstalledCondition reports the HelmRelease's readiness against the chart version that
// runs. A version change changes only the OCIRepository: the HelmRelease keeps its
// generation and its Ready of the old chart until helm-controller has upgraded, so Ready
// alone would claim the new version early. The Kro is Ready, and status.chartVersion
// names the requested chart, only once the release history shows it deployed.
func InstalledCondition(obs *step.Observation, what, wanted, installed string, status metav1.ConditionStatus, message, failReason string) {
	obs.ChartObserved = true
	obs.ChartVersion = ChartCore(installed)
	switch {
	case installed != "" && SameChart(installed, wanted):
		obs.ChartVersion = wanted
		step.FluxCondition(obs, v1alpha1.ConditionHelmReleaseReady, what, status, message, failReason)
	case installed == "":
		if status == metav1.ConditionTrue {
			status, message = metav1.ConditionUnknown, "ready, but no deployed release in its history yet"
		}
		step.FluxCondition(obs, v1alpha1.ConditionHelmReleaseReady, what, status, message, failReason)
	case status == metav1.ConditionFalse:
		obs.Set(v1alpha1.ConditionHelmReleaseReady, status, failReason, fmt.Sprintf(
			"%s kro from %s to %s failed: %s is not ready: %s; kro %s still runs",
			ChangeVerb(installed, wanted), obs.ChartVersion, wanted, what, message, obs.ChartVersion))
	default:
		detail := "waiting for Flux to upgrade " + what
		if status == metav1.ConditionUnknown {
			detail = what + ": " + message
		}
		obs.Set(v1alpha1.ConditionHelmReleaseReady, metav1.ConditionFalse, v1alpha1.ReasonUpgradeInProgress, fmt.Sprintf(
			"%s kro from %s to %s: %s", ChangeVerb(installed, wanted), obs.ChartVersion, wanted, detail))
	}
}

// ReleaseFailReason is the reason for a HelmRelease that is not Ready: SourceNotReady when
// helm-controller says its chart source is not ready or could not be fetched (its own
// reasons SourceNotReady and ArtifactFailed), ReleaseFailed for anything else.
func ReleaseFailReason(hr *helmv2.HelmRelease) string {
	if c := meta.FindStatusCondition(hr.Status.Conditions, v1alpha1.ConditionReady); c != nil &&
		(c.Reason == "SourceNotReady" || c.Reason == helmv2.ArtifactFailedReason) {
		return v1alpha1.ReasonSourceNotReady
	}
	return v1alpha1.ReasonReleaseFailed
}

// InstalledChart is the chart version of the release that runs: the newest deployed
// snapshot in the HelmRelease's history, or "" when none is.
func InstalledChart(hr *helmv2.HelmRelease) string {
	for _, snap := range hr.Status.History {
		if snap != nil && snap.Status == "deployed" {
			return snap.ChartVersion
		}
	}
	return ""
}

// ChartCore is a chart version as the requested tag names it: helm-controller appends the
// OCI artifact's digest as semver build metadata ("0.9.4+1c7c5a1b0f4b"), and OCI tags
// spell "+" as "_".
func ChartCore(v string) string {
	v = strings.TrimPrefix(strings.ReplaceAll(v, "_", "+"), "v")
	core, _, _ := strings.Cut(v, "+")
	return core
}

// SameChart tells whether an installed chart version is the requested tag.
func SameChart(installed, wanted string) bool {
	return ChartCore(installed) == ChartCore(wanted)
}

// ChangeVerb says whether going from one chart version to another is an upgrade.
func ChangeVerb(from, to string) string {
	f, errF := version.ParseSemantic(ChartCore(from))
	t, errT := version.ParseSemantic(ChartCore(to))
	if errF == nil && errT == nil && t.LessThan(f) {
		return "downgrading"
	}
	return "upgrading"
}

func managedFlux(o client.Object, ready metav1.ConditionStatus, message string) v1alpha1.ManagedResource {
	gvk := o.GetObjectKind().GroupVersionKind()
	if gvk.Empty() {
		gvk, _ = apiutil.GVKForObject(o, clusters.Scheme)
	}
	return v1alpha1.ManagedResource{
		Cluster: clusters.Platform, APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind, Namespace: o.GetNamespace(), Name: o.GetName(),
		Ready: ready, Message: message,
	}
}

// SuspendRelease suspends a HelmRelease, so that Flux deletes it without an uninstall; a
// HelmRelease already suspended, or gone, is left as it is.
func SuspendRelease(ctx context.Context, c client.Client, hr *helmv2.HelmRelease) error {
	if hr.Spec.Suspend {
		return nil
	}
	orig := hr.DeepCopy()
	hr.Spec.Suspend = true
	if err := c.Patch(ctx, hr, client.MergeFrom(orig), clusters.FieldOwner); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("suspending HelmRelease %s/%s: %w", hr.Namespace, hr.Name, err)
	}
	return nil
}

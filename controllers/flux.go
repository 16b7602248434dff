package controllers

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
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
)

// reconcileOCIRepository applies the chart source and reports its readiness.
func (r *fluxObjects) reconcileOCIRepository(ctx context.Context, s *scope) (result, error) {
	repo := newOCIRepository(s.kro, r.ProviderName, s.tenantNamespace, s.version, s.chartSecret, s.pollInterval)
	labelFluxShard(repo, s.fluxShard)
	ours, err := owned.ApplyOwned(ctx, r.Platform, r.PlatformReader, repo, &sourcev1.OCIRepository{}, func(current client.Object) (bool, error) {
		moveSourceShard(repo, current, s.fluxShard, time.Now())
		return true, stampInstall(repo, current)
	})
	if err != nil {
		return proceed, fmt.Errorf("applying OCIRepository %s/%s: %w", repo.Namespace, repo.Name, err)
	}
	if !ours {
		s.obs.ownershipConflict(v1alpha1.ConditionOCIRepositoryReady,
			owned.ConflictMessage(s.kro, "OCIRepository", "the platform cluster", repo, fluxConflictAdvice))
		return waiting, nil
	}
	s.repo = repo
	status, message := readFlux(repo, s.before)
	s.obs.managed = append(s.obs.managed, managedFlux(repo, status, message))
	fluxCondition(&s.obs, v1alpha1.ConditionOCIRepositoryReady, "OCIRepository "+repo.Namespace+"/"+repo.Name, status, message, v1alpha1.ReasonSourceNotReady)
	return proceed, nil
}

// fluxConflictAdvice says what to do about a Flux object of the provider's name that the
// provider did not create.
const fluxConflictAdvice = "the tenant namespace holds the provider's OCIRepository and HelmRelease, named after the provider; move that object elsewhere or delete it if nobody needs it"

// observeControlPlane finds the access to the ControlPlane; without it, the step waits.
func (r *fluxObjects) observeControlPlane(ctx context.Context, s *scope) (result, error) {
	access, na, err := r.deletion.lookUpAccess(ctx, s)
	switch {
	case err != nil:
		return proceed, err
	case na != nil && na.Connecting:
		return undecided, nil
	case na != nil:
		return waiting, nil
	}

	rgds, err := access.ResourceGraphDefinitions(ctx)
	switch {
	case errors.Is(err, reach.ErrRGDsUnknown):
		s.obs.rgdsNotKnownYet(meta.FindStatusCondition(s.kro.Status.Conditions, v1alpha1.ConditionResourceGraphDefinitionsReady), err.Error())
	case err != nil:
		return proceed, err
	default:
		s.obs.rgds = guard.SummarizeRGDs(rgds)
		rgdCondition(&s.obs, s.obs.rgds)
	}
	return proceed, nil
}

// reconcileHelmRelease applies the release of kro onto the ControlPlane and reports its
// readiness; the Kro is Ready only when the HelmRelease is. A change that need not go out
// with the source's waits until source-controller has observed the source
// (releaseWaitsForSource); the HelmRelease as it is is reported meanwhile.
func (r *fluxObjects) reconcileHelmRelease(ctx context.Context, s *scope) (result, error) {
	hr := newHelmRelease(s.kro, r.ProviderName, s.tenantNamespace, s.version, s.access.Kubeconfig, s.pollInterval)
	labelFluxShard(hr, s.fluxShard)
	if s.workload != nil {
		if err := placeOnWorkloadCluster(hr, s.workload, s.chartExtras); err != nil {
			return proceed, err
		}
	}
	if err := s.record.Annotate(hr); err != nil {
		return proceed, err
	}
	var shardWait string
	ours, err := owned.ApplyOwned(ctx, r.Platform, r.PlatformReader, hr, &helmv2.HelmRelease{}, func(current client.Object) (bool, error) {
		var until time.Time
		shardWait, until = holdReleaseShard(hr, current, s.repo, s.fluxShard, time.Now())
		if !until.IsZero() {
			s.requeue(time.Until(until))
		}
		if err := stampInstall(hr, current); err != nil {
			return false, err
		}
		wait, err := releaseWaitsForSource(s.repo, current, hr)
		return !wait, err
	})
	if err != nil {
		return proceed, fmt.Errorf("applying HelmRelease %s/%s: %w", hr.Namespace, hr.Name, err)
	}
	if !ours {
		s.obs.ownershipConflict(v1alpha1.ConditionHelmReleaseReady,
			owned.ConflictMessage(s.kro, "HelmRelease", "the platform cluster", hr, fluxConflictAdvice))
		return waiting, nil
	}
	status, message := readFlux(hr, s.before)
	managed := managedFlux(hr, status, withoutShardWait(message))
	if shardWait != "" {
		r.reportShardWait(s, &managed, shardWaitMessage(s.fluxShard, shardWait))
	}
	s.obs.managed = append(s.obs.managed, managed)
	installedCondition(&s.obs, "HelmRelease "+hr.Namespace+"/"+hr.Name, s.version.ChartVersion, installedChart(hr), status, message, releaseFailReason(hr))
	return proceed, nil
}

// installedCondition reports the HelmRelease's readiness against the chart version that
// runs. A version change changes only the OCIRepository: the HelmRelease keeps its
// generation and its Ready of the old chart until helm-controller has upgraded, so Ready
// alone would claim the new version early. The Kro is Ready, and status.chartVersion
// names the requested chart, only once the release history shows it deployed.
func installedCondition(obs *observation, what, wanted, installed string, status metav1.ConditionStatus, message, failReason string) {
	obs.chartObserved = true
	obs.chartVersion = chartCore(installed)
	switch {
	case installed != "" && sameChart(installed, wanted):
		obs.chartVersion = wanted
		fluxCondition(obs, v1alpha1.ConditionHelmReleaseReady, what, status, message, failReason)
	case installed == "":
		if status == metav1.ConditionTrue {
			status, message = metav1.ConditionUnknown, "ready, but no deployed release in its history yet"
		}
		fluxCondition(obs, v1alpha1.ConditionHelmReleaseReady, what, status, message, failReason)
	case status == metav1.ConditionFalse:
		obs.set(v1alpha1.ConditionHelmReleaseReady, status, failReason, fmt.Sprintf(
			"%s kro from %s to %s failed: %s is not ready: %s; kro %s still runs",
			changeVerb(installed, wanted), obs.chartVersion, wanted, what, message, obs.chartVersion))
	default:
		detail := "waiting for Flux to upgrade " + what
		if status == metav1.ConditionUnknown {
			detail = what + ": " + message
		}
		obs.set(v1alpha1.ConditionHelmReleaseReady, metav1.ConditionFalse, v1alpha1.ReasonUpgradeInProgress, fmt.Sprintf(
			"%s kro from %s to %s: %s", changeVerb(installed, wanted), obs.chartVersion, wanted, detail))
	}
}

// releaseFailReason is the reason for a HelmRelease that is not Ready: SourceNotReady when
// helm-controller says its chart source is not ready or could not be fetched (its own
// reasons SourceNotReady and ArtifactFailed), ReleaseFailed for anything else.
func releaseFailReason(hr *helmv2.HelmRelease) string {
	if c := meta.FindStatusCondition(hr.Status.Conditions, v1alpha1.ConditionReady); c != nil &&
		(c.Reason == "SourceNotReady" || c.Reason == helmv2.ArtifactFailedReason) {
		return v1alpha1.ReasonSourceNotReady
	}
	return v1alpha1.ReasonReleaseFailed
}

// installedChart is the chart version of the release that runs: the newest deployed
// snapshot in the HelmRelease's history, or "" when none is.
func installedChart(hr *helmv2.HelmRelease) string {
	for _, snap := range hr.Status.History {
		if snap != nil && snap.Status == "deployed" {
			return snap.ChartVersion
		}
	}
	return ""
}

// chartCore is a chart version as the requested tag names it: helm-controller appends the
// OCI artifact's digest as semver build metadata ("0.9.4+1c7c5a1b0f4b"), and OCI tags
// spell "+" as "_".
func chartCore(v string) string {
	v = strings.TrimPrefix(strings.ReplaceAll(v, "_", "+"), "v")
	core, _, _ := strings.Cut(v, "+")
	return core
}

// sameChart tells whether an installed chart version is the requested tag.
func sameChart(installed, wanted string) bool {
	return chartCore(installed) == chartCore(wanted)
}

// changeVerb says whether going from one chart version to another is an upgrade.
func changeVerb(from, to string) string {
	f, errF := version.ParseSemantic(chartCore(from))
	t, errT := version.ParseSemantic(chartCore(to))
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

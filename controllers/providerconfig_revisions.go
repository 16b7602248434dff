package controllers

import (
	"context"
	"fmt"
	"slices"
	"strings"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/clusters"
	"github.com/openmcp-project/service-provider-kro/controllers/foreign"
	"github.com/openmcp-project/service-provider-kro/controllers/rollout"
	"github.com/openmcp-project/service-provider-kro/controllers/versions"
)

// releaseRecords reads the records of every HelmRelease of the provider from the
// platform cache, by their Kro's "namespace/name".
func (r *ProviderConfigReconciler) releaseRecords(ctx context.Context) (map[string]rollout.Record, error) {
	list := &helmv2.HelmReleaseList{}
	if err := r.Platform.List(ctx, list, client.MatchingLabels{
		v1alpha1.LabelManagedBy: v1alpha1.ManagedByValue, v1alpha1.LabelProvider: foreign.LabelValue(r.ProviderName),
	}); err != nil {
		return nil, fmt.Errorf("listing HelmReleases: %w", err)
	}
	out := make(map[string]rollout.Record, len(list.Items))
	for i := range list.Items {
		hr := &list.Items[i]
		if kro := hr.Annotations[v1alpha1.AnnotationKro]; kro != "" && hr.DeletionTimestamp.IsZero() {
			out[kro] = rollout.ReadRecord(hr)
		}
	}
	return out, nil
}

// keepRevisions stores the current artifacts of every version as a ControllerRevision,
// before any Kro can run them, deletes the oldest of a version beyond revisionHistory
// that no Kro runs any more, and collects the revisions of versions withdrawn from
// spec.versions once no Kro runs them.
func (r *ProviderConfigReconciler) keepRevisions(ctx context.Context, pc *v1alpha1.ProviderConfig, kros []v1alpha1.Kro, records map[string]rollout.Record) error {
	list := &appsv1.ControllerRevisionList{}
	if err := r.Platform.List(ctx, list, client.InNamespace(r.PodNamespace), client.MatchingLabels{v1alpha1.LabelProvider: foreign.LabelValue(r.ProviderName)}); err != nil {
		return fmt.Errorf("listing ControllerRevisions: %w", err)
	}
	byVersion := map[string][]appsv1.ControllerRevision{}
	for _, cr := range list.Items {
		byVersion[cr.Labels[v1alpha1.LabelVersion]] = append(byVersion[cr.Labels[v1alpha1.LabelVersion]], cr)
	}
	inUse := rollout.RevisionsRun(kros, records)
	offered := map[string]bool{}
	for i := range pc.Spec.Versions {
		v := &pc.Spec.Versions[i]
		// A version whose artifacts cannot be named is still on offer: its revisions stay.
		offered[foreign.LabelValue(v.Version)] = true
		name, err := rollout.RevisionName(r.ProviderName, v)
		if err != nil {
			continue // reported in the version's status
		}
		inUse[name] = true
		kept := byVersion[foreign.LabelValue(v.Version)]
		var newest int64
		for _, cr := range kept {
			newest = max(newest, cr.Revision)
		}
		if !slices.ContainsFunc(kept, func(cr appsv1.ControllerRevision) bool { return cr.Name == name }) {
			cr, err := rollout.NewRevision(r.ProviderName, r.PodNamespace, v, newest+1)
			if err != nil {
				return err
			}
			if err := r.Platform.Create(ctx, cr, clusters.FieldOwner); client.IgnoreAlreadyExists(err) != nil {
				return fmt.Errorf("keeping revision %s of version %s: %w", name, v.Version, err)
			}
		}
		slices.SortFunc(kept, func(a, b appsv1.ControllerRevision) int { return int(b.Revision - a.Revision) })
		if err := r.deleteRevisions(ctx, kept[min(rollout.RevisionHistory, len(kept)):], inUse); err != nil {
			return err
		}
	}
	return r.collectWithdrawn(ctx, byVersion, offered, inUse)
}

// collectWithdrawn deletes the revisions of versions no longer in spec.versions that no
// Kro runs. The per-version history is for versions on offer, to return to; a
// withdrawn version's revisions only serve the Kros still on them.
func (r *ProviderConfigReconciler) collectWithdrawn(ctx context.Context, byVersion map[string][]appsv1.ControllerRevision, offered, inUse map[string]bool) error {
	for version, crs := range byVersion {
		if offered[version] {
			continue
		}
		if err := r.deleteRevisions(ctx, crs, inUse); err != nil {
			return err
		}
	}
	return nil
}

// keptVersions is the version of every revision kept in the provider's namespace, by
// the revision's name. A revision's label carries the version shortened for a label,
// so it is matched against the versions on offer; one that matches none is left out.
func (r *ProviderConfigReconciler) keptVersions(ctx context.Context, pc *v1alpha1.ProviderConfig) (map[string]string, error) {
	list := &appsv1.ControllerRevisionList{}
	if err := r.Platform.List(ctx, list, client.InNamespace(r.PodNamespace), client.MatchingLabels{v1alpha1.LabelProvider: foreign.LabelValue(r.ProviderName)}); err != nil {
		return nil, fmt.Errorf("listing ControllerRevisions: %w", err)
	}
	byLabel := map[string]string{}
	for _, v := range pc.Spec.Versions {
		byLabel[foreign.LabelValue(v.Version)] = v.Version
	}
	out := make(map[string]string, len(list.Items))
	for _, cr := range list.Items {
		if v, ok := byLabel[cr.Labels[v1alpha1.LabelVersion]]; ok {
			out[cr.Name] = v
		}
	}
	return out, nil
}

// deleteRevisions deletes those of crs that no Kro runs.
func (r *ProviderConfigReconciler) deleteRevisions(ctx context.Context, crs []appsv1.ControllerRevision, inUse map[string]bool) error {
	for i := range crs {
		if inUse[crs[i].Name] {
			continue
		}
		if err := r.Platform.Delete(ctx, &crs[i]); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting old revision %s: %w", crs[i].Name, err)
		}
	}
	return nil
}

// heldRevision is a revision, other than its version's current one, that Kros on the
// version may be held on by a rollout, with the artifacts it keeps.
type heldRevision struct {
	name      string
	artifacts *v1alpha1.KroVersion
}

// heldRevisions are the revisions that Kros may still be installed with although
// spec.versions no longer has their artifacts: under spec.rollout, those that Kros on
// an offered version run (runningRevision) when the version's current revision is
// another (chooseRevision). A Kro being deleted is installed with nothing any more, and
// one on a version not on offer waits; neither counts. The revisions are read from the
// platform cache, once each however many Kros run them; one the cache does not hold is
// not kept, and no Kro can be held on it. Sorted by name, so that the status they go into
// does not change with the order of the Kros.
func (r *ProviderConfigReconciler) heldRevisions(ctx context.Context, pc *v1alpha1.ProviderConfig, kros []v1alpha1.Kro, records map[string]rollout.Record) ([]heldRevision, error) {
	if pc.Spec.Rollout == nil {
		return nil, nil
	}
	seen := map[string]bool{}
	var out []heldRevision
	for i := range kros {
		k := &kros[i]
		running := rollout.RunningRevision(k, records[rollout.KroKey(k)])
		v := versions.FindVersion(pc, k.Spec.Version)
		if running == "" || seen[running] || v == nil || !k.DeletionTimestamp.IsZero() {
			continue
		}
		if current, err := rollout.RevisionName(r.ProviderName, v); err == nil && current == running {
			continue
		}
		seen[running] = true
		artifacts, err := keptArtifacts(ctx, r.Platform, r.PodNamespace, running)
		if err != nil {
			return nil, err
		}
		if artifacts != nil && artifacts.Version == v.Version {
			out = append(out, heldRevision{name: running, artifacts: artifacts})
		}
	}
	slices.SortFunc(out, func(a, b heldRevision) int { return strings.Compare(a.name, b.name) })
	return out, nil
}

// keptArtifacts reads the artifacts a revision in namespace keeps, from the platform
// cache; nil when they are no longer kept or cannot be read (no Kro is held on such a
// revision: chooseRevision).
func keptArtifacts(ctx context.Context, platform client.Reader, namespace, revision string) (*v1alpha1.KroVersion, error) {
	cr := &appsv1.ControllerRevision{}
	if err := platform.Get(ctx, client.ObjectKey{Namespace: namespace, Name: revision}, cr); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading ControllerRevision %s/%s: %w", namespace, revision, err)
	}
	artifacts, err := rollout.RevisionArtifacts(cr)
	if err != nil {
		return nil, nil //nolint:nilerr // an unreadable revision is not kept to
	}
	return artifacts, nil
}

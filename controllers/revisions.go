package controllers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/clusters"
	"github.com/openmcp-project/service-provider-kro/controllers/foreign"
)

// A version's artifacts (chart URL, chart version, chart pull secret, helmValues) are
// kept as ControllerRevisions in the provider's namespace, as a DaemonSet keeps its pod
// templates: a Kro that a rollout has not yet admitted to the version's new artifacts is
// still installed with the ones it runs, although spec.versions no longer has them.

// revisionHistory is how many revisions of a version are kept besides those Kros run.
const revisionHistory = 10

// revisionName names the revision of a version's artifacts: the provider, the version
// and a digest of the artifacts, so that every replica derives the same name, and the
// same artifacts again (a revert) give the same revision.
func revisionName(provider string, v *v1alpha1.KroVersion) (string, error) {
	canonical, err := canonicalArtifacts(v)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(canonical)
	digest := hex.EncodeToString(sum[:])[:10]
	name := provider + "-" + foreign.NamePart(v.Version, 40)
	return foreign.Subdomain(name, foreign.SubdomainMax-len(digest)-1) + "-" + digest, nil
}

// canonicalArtifacts is the artifacts' JSON with the helmValues' keys sorted, so that
// equal artifacts give equal bytes however the API server ordered them.
func canonicalArtifacts(v *v1alpha1.KroVersion) ([]byte, error) {
	var values any
	if v.HelmValues != nil && len(v.HelmValues.Raw) > 0 {
		if err := json.Unmarshal(v.HelmValues.Raw, &values); err != nil {
			return nil, fmt.Errorf("version %s: helmValues: %w", v.Version, err)
		}
	}
	// The default placement is left out, so that revisions named before placements
	// existed keep their names and nobody is rolled out again by an upgrade.
	var placement v1alpha1.Placement
	if p := v1alpha1.PlacementOf(v); p != v1alpha1.PlacementControlPlane {
		placement = p
	}
	return json.Marshal(struct {
		ChartURL        string             `json:"chartURL"`
		ChartVersion    string             `json:"chartVersion"`
		ChartPullSecret string             `json:"chartPullSecret"`
		HelmValues      any                `json:"helmValues"`
		Placement       v1alpha1.Placement `json:"placement,omitempty"`
	}{chartURL(v), v.ChartVersion, v.ChartPullSecret, values, placement})
}

// newRevision is the ControllerRevision that keeps a version's artifacts.
func newRevision(provider, namespace string, v *v1alpha1.KroVersion, number int64) (*appsv1.ControllerRevision, error) {
	name, err := revisionName(provider, v)
	if err != nil {
		return nil, err
	}
	data, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return &appsv1.ControllerRevision{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: namespace,
			Labels: map[string]string{
				v1alpha1.LabelManagedBy: v1alpha1.ManagedByValue,
				v1alpha1.LabelProvider:  foreign.LabelValue(provider),
				v1alpha1.LabelVersion:   foreign.LabelValue(v.Version),
			},
		},
		Data:     runtime.RawExtension{Raw: data},
		Revision: number,
	}, nil
}

// revisionArtifacts reads the artifacts a ControllerRevision keeps.
func revisionArtifacts(cr *appsv1.ControllerRevision) (*v1alpha1.KroVersion, error) {
	v := &v1alpha1.KroVersion{}
	if err := json.Unmarshal(cr.Data.Raw, v); err != nil {
		return nil, fmt.Errorf("ControllerRevision %s/%s: %w", cr.Namespace, cr.Name, err)
	}
	return v, nil
}

// keepRevisions stores the current artifacts of every version as a ControllerRevision,
// before any Kro can run them, deletes the oldest of a version beyond revisionHistory
// that no Kro runs any more, and collects the revisions of versions withdrawn from
// spec.versions once no Kro runs them.
func (r *ProviderConfigReconciler) keepRevisions(ctx context.Context, pc *v1alpha1.ProviderConfig, kros []v1alpha1.Kro, records map[string]releaseRecord) error {
	list := &appsv1.ControllerRevisionList{}
	if err := r.Platform.List(ctx, list, client.InNamespace(r.PodNamespace), client.MatchingLabels{v1alpha1.LabelProvider: foreign.LabelValue(r.ProviderName)}); err != nil {
		return fmt.Errorf("listing ControllerRevisions: %w", err)
	}
	byVersion := map[string][]appsv1.ControllerRevision{}
	for _, cr := range list.Items {
		byVersion[cr.Labels[v1alpha1.LabelVersion]] = append(byVersion[cr.Labels[v1alpha1.LabelVersion]], cr)
	}
	inUse := revisionsRun(kros, records)
	offered := map[string]bool{}
	for i := range pc.Spec.Versions {
		v := &pc.Spec.Versions[i]
		// A version whose artifacts cannot be named is still on offer: its revisions stay.
		offered[foreign.LabelValue(v.Version)] = true
		name, err := revisionName(r.ProviderName, v)
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
			cr, err := newRevision(r.ProviderName, r.PodNamespace, v, newest+1)
			if err != nil {
				return err
			}
			if err := r.Platform.Create(ctx, cr, clusters.FieldOwner); client.IgnoreAlreadyExists(err) != nil {
				return fmt.Errorf("keeping revision %s of version %s: %w", name, v.Version, err)
			}
		}
		slices.SortFunc(kept, func(a, b appsv1.ControllerRevision) int { return int(b.Revision - a.Revision) })
		if err := r.deleteRevisions(ctx, kept[min(revisionHistory, len(kept)):], inUse); err != nil {
			return err
		}
	}
	return r.collectWithdrawn(ctx, byVersion, offered, inUse)
}

// revisionsRun are the revisions the Kros run: the one each was last Ready with
// (status.revision) and the one its HelmRelease carries. A Kro being deleted counts:
// until it is gone, nothing is taken from under it.
func revisionsRun(kros []v1alpha1.Kro, records map[string]releaseRecord) map[string]bool {
	out := map[string]bool{}
	for i := range kros {
		for _, rev := range []string{kros[i].Status.Revision, records[kroKey(&kros[i])].Revision} {
			if rev != "" {
				out[rev] = true
			}
		}
	}
	return out
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
func (r *ProviderConfigReconciler) heldRevisions(ctx context.Context, pc *v1alpha1.ProviderConfig, kros []v1alpha1.Kro, records map[string]releaseRecord) ([]heldRevision, error) {
	if pc.Spec.Rollout == nil {
		return nil, nil
	}
	seen := map[string]bool{}
	var out []heldRevision
	for i := range kros {
		k := &kros[i]
		running := runningRevision(k, records[kroKey(k)])
		v := findVersion(pc, k.Spec.Version)
		if running == "" || seen[running] || v == nil || !k.DeletionTimestamp.IsZero() {
			continue
		}
		if current, err := revisionName(r.ProviderName, v); err == nil && current == running {
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
	artifacts, err := revisionArtifacts(cr)
	if err != nil {
		return nil, nil //nolint:nilerr // an unreadable revision is not kept to
	}
	return artifacts, nil
}

package rollout

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/foreign"
	"github.com/openmcp-project/service-provider-kro/controllers/versions"
)

// A version's artifacts (chart URL, chart version, chart pull secret, helmValues) are
// kept as ControllerRevisions in the provider's namespace, as a DaemonSet keeps its pod
// templates: a Kro that a rollout has not yet admitted to the version's new artifacts is
// still installed with the ones it runs, although spec.versions no longer has them.

// RevisionHistory is how many revisions of a version are kept besides those Kros run.
const RevisionHistory = 10

// RevisionName names the revision of a version's artifacts: the provider, the version
// and a digest of the artifacts, so that every replica derives the same name, and the
// same artifacts again (a revert) give the same revision.
func RevisionName(provider string, v *v1alpha1.KroVersion) (string, error) {
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
	}{versions.ChartURL(v), v.ChartVersion, v.ChartPullSecret, values, placement})
}

// NewRevision is the ControllerRevision that keeps a version's artifacts.
func NewRevision(provider, namespace string, v *v1alpha1.KroVersion, number int64) (*appsv1.ControllerRevision, error) {
	name, err := RevisionName(provider, v)
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

// RevisionArtifacts reads the artifacts a ControllerRevision keeps.
func RevisionArtifacts(cr *appsv1.ControllerRevision) (*v1alpha1.KroVersion, error) {
	v := &v1alpha1.KroVersion{}
	if err := json.Unmarshal(cr.Data.Raw, v); err != nil {
		return nil, fmt.Errorf("ControllerRevision %s/%s: %w", cr.Namespace, cr.Name, err)
	}
	return v, nil
}

// RevisionsRun are the revisions the Kros run: the one each was last Ready with
// (status.revision) and the one its HelmRelease carries. A Kro being deleted counts:
// until it is gone, nothing is taken from under it.
func RevisionsRun(kros []v1alpha1.Kro, records map[string]Record) map[string]bool {
	out := map[string]bool{}
	for i := range kros {
		for _, rev := range []string{kros[i].Status.Revision, records[KroKey(&kros[i])].Revision} {
			if rev != "" {
				out[rev] = true
			}
		}
	}
	return out
}

package placement

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/chartparts"
	"github.com/openmcp-project/service-provider-kro/controllers/handover"
	"github.com/openmcp-project/service-provider-kro/controllers/owned"
	"github.com/openmcp-project/service-provider-kro/controllers/step"
	"github.com/openmcp-project/service-provider-kro/controllers/versions"
)

// What kro's chart would have put on the ControlPlane besides the Deployment, when kro
// runs on a workload cluster: its CRDs, created and upgraded with the chart (like
// Helm's CreateReplace), its RBAC as the chart renders it for the version's values
// (rbac.mode), bound to kro's own service account there. The provider takes them from
// the very chart Flux installs: source-controller's artifact of the OCIRepository.
//
// The ControlPlane's cache holds none of these kinds, so the provider does not read them
// back in every reconcile: it applies them (server-side apply, a no-op write when
// nothing changed) when the chart or the values change, and again every
// partsReapplyInterval to repair drift.

// partsReapplyInterval is how often unchanged parts are applied again.
const partsReapplyInterval = 10 * time.Minute

// appliedParts remembers, per Kro, which parts were applied to its ControlPlane and when.
type appliedParts struct {
	mu   sync.Mutex
	last map[types.NamespacedName]appliedPartsRecord
}

type appliedPartsRecord struct {
	hash string
	at   time.Time
	// extras: the chart offers the deployment.extra* values (chartparts.Parts).
	extras bool
}

// due tells whether parts of this hash must be applied for the Kro now; when not, it
// also says whether their chart offers the deployment.extra* values, so that an idle
// reconcile neither looks up nor copies the rendered chart.
func (a *appliedParts) due(kro types.NamespacedName, hash string, now time.Time) (due, extras bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	rec, ok := a.last[kro]
	if !ok || rec.hash != hash || now.Sub(rec.at) >= partsReapplyInterval {
		return true, false
	}
	return false, rec.extras
}

func (a *appliedParts) done(kro types.NamespacedName, rec appliedPartsRecord) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.last == nil {
		a.last = map[types.NamespacedName]appliedPartsRecord{}
	}
	a.last[kro] = rec
}

func (a *appliedParts) forget(kro types.NamespacedName) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.last, kro)
}

// artifactClient fetches source-controller's artifacts.
var artifactClient = &http.Client{Timeout: time.Minute}

// ReconcileControlPlaneParts applies kro's CRDs, RBAC and service account to the
// ControlPlane of a Kro placed on a workload cluster, from the chart of its
// OCIRepository, and keeps what the chart offers (s.chartExtras) for the HelmRelease. It
// reports under ControlPlanePartsReady.
func (r *Parts) ReconcileControlPlaneParts(ctx context.Context, s *step.Scope) (step.Result, error) {
	if s.Workload == nil {
		return step.Proceed, nil
	}
	res, err := r.reconcileControlPlaneParts(ctx, s)
	if res == step.Proceed && err == nil {
		s.Obs.Set(v1alpha1.ConditionControlPlanePartsReady, metav1.ConditionTrue, v1alpha1.ReasonReconcileSuccess, fmt.Sprintf(
			"kro's CRDs, RBAC and service account from chart %s:%s are applied to the ControlPlane", versions.ChartURL(s.Version), s.Version.ChartVersion))
	}
	return res, err
}

// reconcileControlPlaneParts applies the parts when the chart or the values changed, or
// when they are due again.
func (r *Parts) reconcileControlPlaneParts(ctx context.Context, s *step.Scope) (step.Result, error) {
	artifact := s.Repo.Status.Artifact
	if artifact == nil || artifact.URL == "" || !strings.HasPrefix(artifact.Revision, s.Version.ChartVersion+"@") {
		s.Obs.Set(v1alpha1.ConditionControlPlanePartsReady, metav1.ConditionFalse, v1alpha1.ReasonReconciling,
			fmt.Sprintf("waiting for source-controller to fetch chart %s:%s: kro's CRDs and RBAC for the ControlPlane come from it", versions.ChartURL(s.Version), s.Version.ChartVersion))
		return step.Waiting, nil
	}
	values, err := versions.VersionValues(s.Version)
	if err != nil {
		return step.Proceed, err
	}
	key := client.ObjectKeyFromObject(s.Kro)
	hash := partsHash(artifact.Digest, values)
	now := time.Now()
	due, extras := r.applied.due(key, hash, now)
	if !due {
		s.ChartExtras = extras
		return step.Proceed, nil
	}
	parts, err := r.charts.Get(ctx, artifactClient, artifact.URL, artifact.Digest, chartparts.Options{
		ReleaseName: owned.ReleaseName, Namespace: owned.KroNamespace, Values: values, ServiceAccount: owned.KroServiceAccount,
	})
	if err != nil {
		return step.Proceed, fmt.Errorf("reading kro's CRDs and RBAC from chart %s:%s: %w", versions.ChartURL(s.Version), s.Version.ChartVersion, err)
	}
	s.ChartExtras = parts.OffersDeploymentExtras()
	if what, err := handover.HelmOwnedOnControlPlane(ctx, s.Access.Reader, parts.Objects()); err != nil {
		return step.Proceed, err
	} else if what != "" {
		s.Obs.OwnershipConflict(v1alpha1.ConditionControlPlanePartsReady, fmt.Sprintf(
			"%s is on the ControlPlane: a kro installed there by Helm, which the provider neither labels nor deletes; uninstall that release (or delete the object if nobody needs it) so that kro can run on the workload cluster alone", what))
		s.Requeue(handover.HelmConflictRecheck) // kro's objects on the ControlPlane are not watched
		return step.Waiting, nil
	}
	if err := r.applyParts(ctx, s, parts); err != nil {
		return step.Proceed, err
	}
	if err := r.requestKroAccess(ctx, s, parts); err != nil {
		return step.Proceed, err
	}
	r.applied.done(key, appliedPartsRecord{hash: hash, at: now, extras: s.ChartExtras})
	return step.Proceed, nil
}

// applyParts writes kro's CRDs and RBAC onto the ControlPlane; kro's service account,
// which the RBAC binds, comes with its credential (kro_credential.go). Where openmcp
// grants kro its access, openmcp binds kro's ClusterRoles, so the chart's bindings are
// left out (requestKroAccess).
func (r *Parts) applyParts(ctx context.Context, s *step.Scope, parts *chartparts.Parts) error {
	c := s.Access.Client
	granted := r.ControlPlanes.KroAccess() != nil
	for _, o := range parts.Objects() { // the Kro's own copy (chartparts.Cache.Get)
		if _, binding := o.(*rbacv1.ClusterRoleBinding); binding && granted {
			continue
		}
		// The CRDs stay when the Kro goes, as Helm leaves a chart's CRDs: they carry
		// none of the provider's labels, as they would not after a Helm install.
		if _, crd := o.(*apiextensionsv1.CustomResourceDefinition); !crd {
			labels := o.GetLabels()
			if labels == nil {
				labels = map[string]string{}
			}
			for k, v := range owned.Labels(s.Kro, r.ProviderName, v1alpha1.RoleKroParts) {
				labels[k] = v
			}
			o.SetLabels(labels)
		}
		o.SetManagedFields(nil)
		o.SetResourceVersion("")
		if err := owned.Apply(ctx, c, o); err != nil {
			return fmt.Errorf("applying %s %s on the ControlPlane: %w", o.GetObjectKind().GroupVersionKind().Kind, o.GetName(), err)
		}
	}
	return nil
}

// requestKroAccess asks openmcp for kro's own access to the ControlPlane, bound to the
// ClusterRoles the chart binds to kro, where openmcp grants it. kro's lease lives in
// kro-system on the ControlPlane, which is made when missing, as Flux would make it.
func (r *Parts) requestKroAccess(ctx context.Context, s *step.Scope, parts *chartparts.Parts) error {
	access := r.ControlPlanes.KroAccess()
	if access == nil {
		return nil
	}
	if err := owned.EnsureNamespace(ctx, s.Access.Client, owned.KroNamespace, nil); err != nil {
		return fmt.Errorf("on the ControlPlane: %w", err)
	}
	return access.Request(ctx, client.ObjectKeyFromObject(s.Kro), parts.BoundClusterRoles())
}

func partsHash(digest string, values map[string]any) string {
	data, _ := json.Marshal(values)
	sum := sha256.Sum256(append([]byte(digest+"\n"), data...))
	return hex.EncodeToString(sum[:16])
}

package controllers

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	fluxmeta "github.com/fluxcd/pkg/apis/meta"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	clustersv1alpha1 "github.com/openmcp-project/openmcp-operator/api/clusters/v1alpha1"
	openmcpconst "github.com/openmcp-project/openmcp-operator/api/constants"
	"github.com/openmcp-project/openmcp-operator/lib/clusteraccess"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/clusters"
	"github.com/openmcp-project/service-provider-kro/controllers/owned"
	"github.com/openmcp-project/service-provider-kro/controllers/reach"
	"github.com/openmcp-project/service-provider-kro/controllers/versions"
)

// The earlier provider, openmcp-project/service-provider-kro up to v1.3.0, installs kro
// through Flux objects of fixed names in the same tenant namespace, for the same Helm
// release. This file takes such an installation over without an uninstall: its
// HelmRelease is suspended before the provider's own is applied, which then upgrades the
// release kro in place; once the provider's HelmRelease is Ready, the earlier objects are
// removed, the HelmRelease first (suspended, so Flux does not uninstall) and the
// OCIRepository last, so that a restart at any point finds what is left and goes on.
const (
	earlierHelmReleaseName   = "kro-helm-release"
	earlierOCIRepositoryName = "kro-oci-repository"
	// earlierControllerName names the earlier provider's AccessRequests.
	earlierControllerName = "kro"
	// handOverRecheck is how soon a hand-over looks again while Flux is busy with the
	// earlier HelmRelease.
	handOverRecheck = 2 * time.Second
)

// EarlierCache caches only the earlier provider's Flux objects, selected by their fixed
// names: nothing at all once every hand-over is done. Its watches bring a Kro back when
// one of them changes or goes.
func EarlierCache(platform cluster.Cluster) (cache.Cache, error) {
	return cache.New(platform.GetConfig(), cache.Options{
		Scheme: platform.GetScheme(),
		ByObject: map[client.Object]cache.ByObject{
			&helmv2.HelmRelease{}:     {Field: fields.OneTermEqualSelector("metadata.name", earlierHelmReleaseName)},
			&sourcev1.OCIRepository{}: {Field: fields.OneTermEqualSelector("metadata.name", earlierOCIRepositoryName)},
		},
	})
}

// earlier is what the earlier provider left of a Kro's installation.
type earlier struct {
	// release is its HelmRelease of the Helm release kro in kro-system; nil when gone.
	release *helmv2.HelmRelease
	// repo is its OCIRepository; nil when gone. It goes last.
	repo *sourcev1.OCIRepository
}

func (e *earlier) found() bool { return e != nil && (e.release != nil || e.repo != nil) }

// names lists what is left, for messages.
func (e *earlier) names() string {
	var out []string
	if e.release != nil {
		out = append(out, "HelmRelease "+e.release.Namespace+"/"+e.release.Name)
	}
	if e.repo != nil {
		out = append(out, "OCIRepository "+e.repo.Namespace+"/"+e.repo.Name)
	}
	return strings.Join(out, " and ")
}

// earlierReader reads the earlier objects: from their cache, or the API server when the
// reconciler has none (tests that build it by hand).
func (r *handOver) earlierReader() client.Reader {
	if r.Earlier != nil {
		return r.Earlier
	}
	return r.PlatformReader
}

// findEarlier looks for the earlier provider's objects in the tenant namespace. Its
// HelmRelease counts only when it drives the same Helm release as the provider's
// (release kro, target and storage namespace kro-system) and carries none of the
// provider's labels; anything else of that name is not the provider's business.
func (r *handOver) findEarlier(ctx context.Context, s *scope) error {
	e := &earlier{}
	hr := &helmv2.HelmRelease{}
	switch err := r.earlierReader().Get(ctx, client.ObjectKey{Namespace: s.tenantNamespace, Name: earlierHelmReleaseName}, hr); {
	case apierrors.IsNotFound(err):
	case err != nil:
		return fmt.Errorf("looking for the earlier provider's HelmRelease: %w", err)
	case hr.Labels[v1alpha1.LabelManagedBy] == "" && hr.Spec.ReleaseName == owned.ReleaseName &&
		hr.Spec.TargetNamespace == owned.KroNamespace && hr.Spec.StorageNamespace == owned.KroNamespace:
		e.release = hr
	}
	repo := &sourcev1.OCIRepository{}
	switch err := r.earlierReader().Get(ctx, client.ObjectKey{Namespace: s.tenantNamespace, Name: earlierOCIRepositoryName}, repo); {
	case apierrors.IsNotFound(err):
	case err != nil:
		return fmt.Errorf("looking for the earlier provider's OCIRepository: %w", err)
	case repo.Labels[v1alpha1.LabelManagedBy] == "":
		e.repo = repo
	}
	switch {
	case s.obs.deleting:
		s.earlier = e
		return nil
	case !e.found():
		r.handOverComplete(s)
		return nil
	}
	s.earlier = e
	s.obs.set(v1alpha1.ConditionHandOver, metav1.ConditionTrue, v1alpha1.ReasonHandingOver, fmt.Sprintf(
		"the earlier provider's installation of kro is here (%s); the provider takes it over without an uninstall once the steps before its HelmRelease are done (see the other conditions), and removes it once its own HelmRelease is Ready",
		e.names()))
	return nil
}

// suspendEarlier runs before the provider applies its HelmRelease: the earlier one must
// no longer drive the Helm release, so it is suspended. While helm-controller is still
// working on it, the step waits, so that two releases never run at once. For a version
// on a workload cluster the earlier release is uninstalled instead, and the step waits
// until it is gone (handover_placement.go).
func (r *handOver) suspendEarlier(ctx context.Context, s *scope) (result, error) {
	if !s.earlier.found() || s.earlier.release == nil {
		return proceed, nil
	}
	if earlierUninstallsFirst(s) {
		return r.uninstallEarlierFirst(ctx, s)
	}
	if s.earlier.release.Spec.Suspend {
		return proceed, nil
	}
	hr := s.earlier.release
	if meta.IsStatusConditionTrue(hr.Status.Conditions, fluxmeta.ReconcilingCondition) {
		s.obs.set(v1alpha1.ConditionHelmReleaseReady, metav1.ConditionUnknown, v1alpha1.ReasonReconciling, fmt.Sprintf(
			"waiting for Flux to finish its work on the earlier provider's HelmRelease %s/%s before suspending it", hr.Namespace, hr.Name))
		s.requeue(handOverRecheck)
		return waiting, nil
	}
	if err := r.setSuspend(ctx, hr, true); err != nil {
		return proceed, err
	}
	r.Recorder.Eventf(s.kro, nil, corev1.EventTypeNormal, v1alpha1.ReasonHandingOver, "HandOver",
		"suspended the earlier provider's HelmRelease %s/%s, so that only the provider's HelmRelease drives the Helm release %s in %s on the ControlPlane; it takes the release over in place, without an uninstall",
		hr.Namespace, hr.Name, owned.ReleaseName, owned.KroNamespace)
	return proceed, nil
}

// finishHandOver runs after the provider's HelmRelease step: once that is Ready, the
// earlier objects are removed in order, each only if it is still the one found. Their
// disappearance, which the earlier cache watches, brings the Kro back until none is left.
func (r *handOver) finishHandOver(ctx context.Context, s *scope) (result, error) {
	if !s.earlier.found() {
		return proceed, nil
	}
	if c := findCondition(s.obs.conditions, v1alpha1.ConditionHelmReleaseReady); c == nil || c.Status != metav1.ConditionTrue {
		s.obs.set(v1alpha1.ConditionHandOver, metav1.ConditionTrue, v1alpha1.ReasonHandingOver, fmt.Sprintf(
			"the provider's HelmRelease is taking over the Helm release %s from the earlier provider; %s stay until it is Ready",
			owned.ReleaseName, s.earlier.names()))
		return proceed, nil
	}
	if err := r.removeEarlier(ctx, s); err != nil {
		return proceed, err
	}
	s.obs.set(v1alpha1.ConditionHandOver, metav1.ConditionTrue, v1alpha1.ReasonHandingOver, fmt.Sprintf(
		"the provider's HelmRelease is Ready and drives kro; removing what the earlier provider left: %s", s.earlier.names()))
	return proceed, nil
}

// handOverComplete emits the event of a hand-over that the last reconcile reported and
// that found nothing left this time.
func (r *handOver) handOverComplete(s *scope) {
	if meta.FindStatusCondition(s.before.Conditions, v1alpha1.ConditionHandOver) == nil {
		return
	}
	r.Recorder.Eventf(s.kro, nil, corev1.EventTypeNormal, v1alpha1.ReasonHandOverComplete, "HandOver",
		"the earlier provider's installation of kro is taken over: the provider's HelmRelease drives kro alone, and the earlier HelmRelease, OCIRepository, AccessRequest and secret copies are gone")
}

// removeEarlier deletes what the earlier provider left, in a safe order: the image pull
// secret copies the provider did not adopt (while its HelmRelease still names them), the
// HelmRelease (only when suspended: Flux lets it go without an uninstall), the chart pull secret copy and the AccessRequest with its secret (while the
// OCIRepository still names them), and the OCIRepository last.
func (r *handOver) removeEarlier(ctx context.Context, s *scope) error {
	e := s.earlier
	if hr := e.release; hr != nil {
		if s.access != nil {
			if err := r.removeEarlierImageCopies(ctx, s, hr); err != nil {
				return err
			}
		}
		if !hr.Spec.Suspend {
			return fmt.Errorf("the earlier provider's HelmRelease %s/%s is not suspended; it is not deleted, as Flux would uninstall kro", hr.Namespace, hr.Name)
		}
		if err := r.deleteExactly(ctx, hr, "the earlier provider's HelmRelease"); err != nil {
			return err
		}
	}
	if e.repo == nil {
		return nil
	}
	if err := r.removeEarlierChartCopy(ctx, s); err != nil {
		return err
	}
	if err := r.removeEarlierAccess(ctx, s); err != nil {
		return err
	}
	return r.deleteExactly(ctx, e.repo, "the earlier provider's OCIRepository")
}

// deleteExactly deletes obj if it is still the very object that was read (UID and
// resourceVersion): a change since makes the next reconcile decide again.
func (r *handOver) deleteExactly(ctx context.Context, obj client.Object, what string) error {
	if !obj.GetDeletionTimestamp().IsZero() {
		return nil
	}
	uid, rv := obj.GetUID(), obj.GetResourceVersion()
	err := r.Platform.Delete(ctx, obj, client.Preconditions{UID: &uid, ResourceVersion: &rv})
	if client.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err) {
		return fmt.Errorf("deleting %s %s/%s: %w", what, obj.GetNamespace(), obj.GetName(), err)
	}
	return nil
}

// removeEarlierImageCopies deletes the earlier copies of image pull secrets in kro-system
// that the provider did not adopt: those the earlier HelmRelease's values name, that
// carry no manager's label and still hold exactly the source's type and data. A secret
// of the same name with other data is someone's own and stays.
func (r *handOver) removeEarlierImageCopies(ctx context.Context, s *scope, hr *helmv2.HelmRelease) error {
	names, err := versions.ImagePullSecretNames(&v1alpha1.KroVersion{Version: "of the earlier HelmRelease", HelmValues: hr.Spec.Values})
	if err != nil {
		return nil // values the earlier provider wrote that name nothing readable: no copies to find
	}
	for _, name := range names {
		if s.workload == nil && slices.Contains(s.imageSecrets, name) {
			continue // adopted: the provider's own copy now
		}
		src := &corev1.Secret{}
		if err := r.Platform.Get(ctx, client.ObjectKey{Namespace: r.PodNamespace, Name: name}, src); err != nil {
			if apierrors.IsNotFound(err) {
				continue // no source to compare with: nothing proves the copy is the earlier provider's
			}
			return fmt.Errorf("reading source secret %s/%s: %w", r.PodNamespace, name, err)
		}
		cp := &corev1.Secret{}
		switch err := s.access.Reader.Get(ctx, client.ObjectKey{Namespace: owned.KroNamespace, Name: name}, cp); {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			return fmt.Errorf("reading secret %s/%s on the ControlPlane: %w", owned.KroNamespace, name, err)
		}
		if !owned.SameSecretAsSource(cp, src) {
			continue
		}
		uid := cp.UID
		if err := s.access.Client.Delete(ctx, cp, client.Preconditions{UID: &uid}); client.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err) {
			return fmt.Errorf("deleting the earlier copy of image pull secret %s on the ControlPlane: %w", name, err)
		}
	}
	return nil
}

// removeEarlierChartCopy deletes the earlier copy of the chart pull secret: the secret
// the earlier OCIRepository names, in the tenant namespace, without a manager's label.
func (r *handOver) removeEarlierChartCopy(ctx context.Context, s *scope) error {
	ref := s.earlier.repo.Spec.SecretRef
	if ref == nil || ref.Name == "" {
		return nil
	}
	cp := &corev1.Secret{}
	switch err := r.PlatformReader.Get(ctx, client.ObjectKey{Namespace: s.tenantNamespace, Name: ref.Name}, cp); {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("reading the earlier chart pull secret copy %s/%s: %w", s.tenantNamespace, ref.Name, err)
	case cp.Labels[v1alpha1.LabelManagedBy] != "" || cp.Labels[v1alpha1.LabelControlPlaneKubeconfig] != "":
		return nil
	}
	return r.deleteExactly(ctx, cp, "the earlier chart pull secret copy")
}

// removeEarlierAccess withdraws the earlier provider's AccessRequest for the ControlPlane
// and deletes the kubeconfig secret it was granted. Under openmcp with the provider named
// kro, that request has the provider's own name and labels: it is the provider's access
// now and stays. A secret the provider itself reads a kubeconfig from stays too.
func (r *handOver) removeEarlierAccess(ctx context.Context, s *scope) error {
	name := clusteraccess.StableRequestNameFromLocalName(earlierControllerName, s.kro.Name) + "--mcp"
	if own, err := clusters.NewAccessRequest(r.ProviderName, client.ObjectKeyFromObject(s.kro)); err == nil && own.Name == name && r.AccessMode == reach.AccessOpenMCP {
		return nil
	}
	ar := &clustersv1alpha1.AccessRequest{}
	switch err := r.PlatformReader.Get(ctx, client.ObjectKey{Namespace: s.tenantNamespace, Name: name}, ar); {
	case apierrors.IsNotFound(err) || meta.IsNoMatchError(err):
		return nil // withdrawn already, or no openmcp on this platform cluster
	case err != nil:
		return fmt.Errorf("reading the earlier provider's AccessRequest %s/%s: %w", s.tenantNamespace, name, err)
	case ar.Labels[openmcpconst.ManagedByLabel] != earlierControllerName || ar.Labels[openmcpconst.OnboardingNameLabel] != s.kro.Name:
		return nil // not the earlier provider's request for this ControlPlane
	}
	if ref := ar.Status.SecretRef; ref != nil && ref.Name != "" && (s.access == nil || s.access.Kubeconfig.Name != ref.Name) {
		secret := &corev1.Secret{}
		switch err := r.PlatformReader.Get(ctx, client.ObjectKey{Namespace: ar.Namespace, Name: ref.Name}, secret); {
		case apierrors.IsNotFound(err):
		case err != nil:
			return fmt.Errorf("reading the earlier access secret %s/%s: %w", ar.Namespace, ref.Name, err)
		case secret.Labels[v1alpha1.LabelControlPlaneKubeconfig] == "" && secret.Labels[v1alpha1.LabelManagedBy] == "":
			if err := r.deleteExactly(ctx, secret, "the earlier access secret"); err != nil {
				return err
			}
		}
	}
	return r.deleteExactly(ctx, ar, "the earlier provider's AccessRequest")
}

// earlierReleaseForDeletion decides, during a deletion, which HelmRelease uninstalls kro
// when the earlier provider's is still there. Beside the provider's own that has taken
// the release over (takesOverRelease) it is deleted at once, suspended, without an
// uninstall: the provider's release drives kro and uninstalls it. Beside one that has not
// (no revision written yet, or kro on a workload cluster), the provider's goes first and
// the earlier one waits, suspended. Alone, it is kro's release and is returned, to be
// guarded and deleted with an uninstall like the provider's own.
func (r *handOver) earlierReleaseForDeletion(ctx context.Context, s *scope, own *helmv2.HelmRelease) (*helmv2.HelmRelease, error) {
	if err := r.findEarlier(ctx, s); err != nil || s.earlier == nil || s.earlier.release == nil {
		return own, err
	}
	hr := s.earlier.release
	if own == nil {
		return hr, nil
	}
	if !hr.DeletionTimestamp.IsZero() || !takesOverRelease(own) {
		// The provider's release goes first; the earlier one, suspended meanwhile,
		// uninstalls kro once it is alone (handover_placement.go).
		return own, nil
	}
	if err := r.setSuspend(ctx, hr, true); err != nil {
		return nil, err
	}
	return own, r.deleteExactly(ctx, hr, "the earlier provider's HelmRelease")
}

// uninstallEarlier lets the earlier provider's HelmRelease, when it is the one that
// drives kro, uninstall it: its unadopted image pull secret copies go first (its values
// name them), and a suspended one is resumed, as Flux skips the uninstall of a suspended
// release.
func (r *handOver) uninstallEarlier(ctx context.Context, s *scope, hr *helmv2.HelmRelease) error {
	if s.earlier == nil || s.earlier.release != hr {
		return nil
	}
	if s.access != nil {
		if err := r.removeEarlierImageCopies(ctx, s, hr); err != nil {
			return err
		}
	}
	return r.setSuspend(ctx, hr, false)
}

// setSuspend suspends or resumes the earlier provider's HelmRelease, if it is not so
// already, with an optimistic lock: a change since it was read fails this round.
func (r *handOver) setSuspend(ctx context.Context, hr *helmv2.HelmRelease, suspend bool) error {
	if hr.Spec.Suspend == suspend {
		return nil
	}
	orig := hr.DeepCopy()
	hr.Spec.Suspend = suspend
	if err := r.Platform.Patch(ctx, hr, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}), clusters.FieldOwner); err != nil {
		return fmt.Errorf("setting suspend=%t on the earlier provider's HelmRelease %s/%s: %w", suspend, hr.Namespace, hr.Name, err)
	}
	return nil
}

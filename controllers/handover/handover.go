// Package handover takes over in place what the earlier provider (v1.3.0) installed: its
// HelmRelease is suspended, replaced and its objects removed. Taker holds the steps.
package handover

import (
	"context"
	"fmt"
	"slices"
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
	"github.com/openmcp-project/service-provider-kro/controllers/step"
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
	EarlierHelmReleaseName   = "kro-helm-release"
	EarlierOCIRepositoryName = "kro-oci-repository"
	// earlierControllerName names the earlier provider's AccessRequests.
	earlierControllerName = "kro"
	// handOverRecheck is how soon a hand-over looks again while Flux is busy with the
	// earlier HelmRelease.
	handOverRecheck = 2 * time.Second
)

// Taker takes over what the earlier provider installed.
type Taker struct {
	step.Clients
	Earlier client.Reader
}

// EarlierCache caches only the earlier provider's Flux objects, selected by their fixed
// names: nothing at all once every hand-over is done. Its watches bring a Kro back when
// one of them changes or goes.
func EarlierCache(platform cluster.Cluster) (cache.Cache, error) {
	return cache.New(platform.GetConfig(), cache.Options{
		Scheme: platform.GetScheme(),
		ByObject: map[client.Object]cache.ByObject{
			&helmv2.HelmRelease{}:     {Field: fields.OneTermEqualSelector("metadata.name", EarlierHelmReleaseName)},
			&sourcev1.OCIRepository{}: {Field: fields.OneTermEqualSelector("metadata.name", EarlierOCIRepositoryName)},
		},
	})
}

// earlierReader reads the earlier objects: from their cache, or the API server when the
// reconciler has none (tests that build it by hand).
func (r *Taker) earlierReader() client.Reader {
	if r.Earlier != nil {
		return r.Earlier
	}
	return r.PlatformReader
}

// FindEarlier looks for the earlier provider's objects in the tenant namespace. Its
// HelmRelease counts only when IsEarlierRelease; anything else of that name is not the
// provider's business.
func (r *Taker) FindEarlier(ctx context.Context, s *step.Scope) error {
	e := &step.Earlier{}
	hr := &helmv2.HelmRelease{}
	switch err := r.earlierReader().Get(ctx, client.ObjectKey{Namespace: s.TenantNamespace, Name: EarlierHelmReleaseName}, hr); {
	case apierrors.IsNotFound(err):
	case err != nil:
		return fmt.Errorf("looking for the earlier provider's HelmRelease: %w", err)
	case IsEarlierRelease(hr):
		e.Release = hr
	}
	repo := &sourcev1.OCIRepository{}
	switch err := r.earlierReader().Get(ctx, client.ObjectKey{Namespace: s.TenantNamespace, Name: EarlierOCIRepositoryName}, repo); {
	case apierrors.IsNotFound(err):
	case err != nil:
		return fmt.Errorf("looking for the earlier provider's OCIRepository: %w", err)
	case repo.Labels[v1alpha1.LabelManagedBy] == "":
		e.Repo = repo
	}
	switch {
	case s.Obs.Deleting:
		s.Earlier = e
		return nil
	case !e.Found():
		r.handOverComplete(s)
		return nil
	}
	s.Earlier = e
	s.Obs.Set(v1alpha1.ConditionHandOver, metav1.ConditionTrue, v1alpha1.ReasonHandingOver, fmt.Sprintf(
		"the earlier provider's installation of kro is here (%s); the provider takes it over without an uninstall once the steps before its HelmRelease are done (see the other conditions), and removes it once its own HelmRelease is Ready",
		e.Names()))
	return nil
}

// IsEarlierRelease tells whether a HelmRelease named EarlierHelmReleaseName is the
// earlier provider's: it carries none of the provider's labels and drives the Helm
// release the provider's would (release kro, target and storage namespace kro-system).
func IsEarlierRelease(hr *helmv2.HelmRelease) bool {
	return hr.Labels[v1alpha1.LabelManagedBy] == "" && hr.Spec.ReleaseName == owned.ReleaseName &&
		hr.Spec.TargetNamespace == owned.KroNamespace && hr.Spec.StorageNamespace == owned.KroNamespace
}

// SuspendEarlier runs before the provider applies its HelmRelease: the earlier one must
// no longer drive the Helm release, so it is suspended. While helm-controller is still
// working on it, the step waits, so that two releases never run at once. For a version
// on a workload cluster the earlier release is uninstalled instead, and the step waits
// until it is gone (handover_placement.go).
func (r *Taker) SuspendEarlier(ctx context.Context, s *step.Scope) (step.Result, error) {
	if !s.Earlier.Found() || s.Earlier.Release == nil {
		return step.Proceed, nil
	}
	if earlierUninstallsFirst(s) {
		return r.uninstallEarlierFirst(ctx, s)
	}
	hr := s.Earlier.Release
	suspended := fmt.Sprintf("the earlier provider's HelmRelease %s/%s is suspended: only the provider's HelmRelease drives the Helm release %s", hr.Namespace, hr.Name, owned.ReleaseName)
	if hr.Spec.Suspend {
		s.Obs.Set(v1alpha1.ConditionEarlierReleaseSuspended, metav1.ConditionTrue, v1alpha1.ReasonReconcileSuccess, suspended)
		return step.Proceed, nil
	}
	if fluxBusy(s, hr, "suspending it") {
		return step.Waiting, nil
	}
	if err := r.setSuspend(ctx, hr, true); err != nil {
		return step.Proceed, err
	}
	r.Recorder.Eventf(s.Kro, nil, corev1.EventTypeNormal, v1alpha1.ReasonHandingOver, "HandOver",
		"suspended the earlier provider's HelmRelease %s/%s, so that only the provider's HelmRelease drives the Helm release %s in %s on the ControlPlane; it takes the release over in place, without an uninstall",
		hr.Namespace, hr.Name, owned.ReleaseName, owned.KroNamespace)
	s.Obs.Set(v1alpha1.ConditionEarlierReleaseSuspended, metav1.ConditionTrue, v1alpha1.ReasonReconcileSuccess, suspended)
	return step.Proceed, nil
}

// fluxBusy tells whether helm-controller is still working on the earlier HelmRelease, and
// then reports that the step waits for it before what it is about to do.
func fluxBusy(s *step.Scope, hr *helmv2.HelmRelease, before string) bool {
	if !meta.IsStatusConditionTrue(hr.Status.Conditions, fluxmeta.ReconcilingCondition) {
		return false
	}
	s.Obs.Set(v1alpha1.ConditionEarlierReleaseSuspended, metav1.ConditionUnknown, v1alpha1.ReasonReconciling, fmt.Sprintf(
		"waiting for Flux to finish its work on the earlier provider's HelmRelease %s/%s before %s", hr.Namespace, hr.Name, before))
	s.Requeue(handOverRecheck)
	return true
}

// FinishHandOver runs after the provider's HelmRelease step: once that is Ready, the
// earlier objects are removed in order, each only if it is still the one found. Their
// disappearance, which the earlier cache watches, brings the Kro back until none is left.
func (r *Taker) FinishHandOver(ctx context.Context, s *step.Scope) (step.Result, error) {
	if !s.Earlier.Found() {
		return step.Proceed, nil
	}
	if c := step.FindCondition(s.Obs.Conditions, v1alpha1.ConditionHelmReleaseReady); c == nil || c.Status != metav1.ConditionTrue {
		s.Obs.Set(v1alpha1.ConditionHandOver, metav1.ConditionTrue, v1alpha1.ReasonHandingOver, fmt.Sprintf(
			"the provider's HelmRelease is taking over the Helm release %s from the earlier provider; %s stay until it is Ready",
			owned.ReleaseName, s.Earlier.Names()))
		return step.Proceed, nil
	}
	if err := r.RemoveEarlier(ctx, s); err != nil {
		return step.Proceed, err
	}
	s.Obs.Set(v1alpha1.ConditionHandOver, metav1.ConditionTrue, v1alpha1.ReasonHandingOver, fmt.Sprintf(
		"the provider's HelmRelease is Ready and drives kro; removing what the earlier provider left: %s", s.Earlier.Names()))
	return step.Proceed, nil
}

// handOverComplete emits the event of a hand-over that the last reconcile reported and
// that found nothing left this time.
func (r *Taker) handOverComplete(s *step.Scope) {
	if meta.FindStatusCondition(s.Before.Conditions, v1alpha1.ConditionHandOver) == nil {
		return
	}
	r.Recorder.Eventf(s.Kro, nil, corev1.EventTypeNormal, v1alpha1.ReasonHandOverComplete, "HandOver",
		"the earlier provider's installation of kro is taken over: the provider's HelmRelease drives kro alone, and the earlier HelmRelease, OCIRepository, AccessRequest and secret copies are gone")
}

// RemoveEarlier deletes what the earlier provider left, in a safe order: the image pull
// secret copies the provider did not adopt (while its HelmRelease still names them), the
// HelmRelease (only when suspended: Flux lets it go without an uninstall), the chart pull secret copy and the AccessRequest with its secret (while the
// OCIRepository still names them), and the OCIRepository last.
func (r *Taker) RemoveEarlier(ctx context.Context, s *step.Scope) error {
	e := s.Earlier
	if hr := e.Release; hr != nil {
		if s.Access != nil {
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
	if e.Repo == nil {
		return nil
	}
	if err := r.removeEarlierChartCopy(ctx, s); err != nil {
		return err
	}
	if err := r.removeEarlierAccess(ctx, s); err != nil {
		return err
	}
	return r.deleteExactly(ctx, e.Repo, "the earlier provider's OCIRepository")
}

// deleteExactly deletes obj if it is still the very object that was read (UID and
// resourceVersion): a change since makes the next reconcile decide again.
func (r *Taker) deleteExactly(ctx context.Context, obj client.Object, what string) error {
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
func (r *Taker) removeEarlierImageCopies(ctx context.Context, s *step.Scope, hr *helmv2.HelmRelease) error {
	names, err := versions.ImagePullSecretNames(&v1alpha1.KroVersion{Version: "of the earlier HelmRelease", HelmValues: hr.Spec.Values})
	if err != nil {
		return nil // values the earlier provider wrote that name nothing readable: no copies to find
	}
	for _, name := range names {
		if s.Workload == nil && slices.Contains(s.ImageSecrets, name) {
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
		switch err := s.Access.Reader.Get(ctx, client.ObjectKey{Namespace: owned.KroNamespace, Name: name}, cp); {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			return fmt.Errorf("reading secret %s/%s on the ControlPlane: %w", owned.KroNamespace, name, err)
		}
		if !owned.SameSecretAsSource(cp, src) {
			continue
		}
		uid := cp.UID
		if err := s.Access.Client.Delete(ctx, cp, client.Preconditions{UID: &uid}); client.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err) {
			return fmt.Errorf("deleting the earlier copy of image pull secret %s on the ControlPlane: %w", name, err)
		}
	}
	return nil
}

// removeEarlierChartCopy deletes the earlier copy of the chart pull secret: the secret
// the earlier OCIRepository names, in the tenant namespace, without a manager's label.
func (r *Taker) removeEarlierChartCopy(ctx context.Context, s *step.Scope) error {
	ref := s.Earlier.Repo.Spec.SecretRef
	if ref == nil || ref.Name == "" {
		return nil
	}
	cp := &corev1.Secret{}
	switch err := r.PlatformReader.Get(ctx, client.ObjectKey{Namespace: s.TenantNamespace, Name: ref.Name}, cp); {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("reading the earlier chart pull secret copy %s/%s: %w", s.TenantNamespace, ref.Name, err)
	case cp.Labels[v1alpha1.LabelManagedBy] != "" || cp.Labels[v1alpha1.LabelControlPlaneKubeconfig] != "":
		return nil
	}
	return r.deleteExactly(ctx, cp, "the earlier chart pull secret copy")
}

// removeEarlierAccess withdraws the earlier provider's AccessRequest for the ControlPlane
// and deletes the kubeconfig secret it was granted. Under openmcp with the provider named
// kro, that request has the provider's own name and labels: it is the provider's access
// now and stays. A secret the provider itself reads a kubeconfig from stays too.
func (r *Taker) removeEarlierAccess(ctx context.Context, s *step.Scope) error {
	name := clusteraccess.StableRequestNameFromLocalName(earlierControllerName, s.Kro.Name) + "--mcp"
	if own, err := clusters.NewAccessRequest(r.ProviderName, client.ObjectKeyFromObject(s.Kro)); err == nil && own.Name == name && r.AccessMode == reach.AccessOpenMCP {
		return nil
	}
	ar := &clustersv1alpha1.AccessRequest{}
	switch err := r.PlatformReader.Get(ctx, client.ObjectKey{Namespace: s.TenantNamespace, Name: name}, ar); {
	case apierrors.IsNotFound(err) || meta.IsNoMatchError(err):
		return nil // withdrawn already, or no openmcp on this platform cluster
	case err != nil:
		return fmt.Errorf("reading the earlier provider's AccessRequest %s/%s: %w", s.TenantNamespace, name, err)
	case ar.Labels[openmcpconst.ManagedByLabel] != earlierControllerName || ar.Labels[openmcpconst.OnboardingNameLabel] != s.Kro.Name:
		return nil // not the earlier provider's request for this ControlPlane
	}
	if ref := ar.Status.SecretRef; ref != nil && ref.Name != "" && (s.Access == nil || s.Access.Kubeconfig.Name != ref.Name) {
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

// EarlierReleaseForDeletion decides, during a deletion, which HelmRelease uninstalls kro
// when the earlier provider's is still there. Beside the provider's own that has taken
// the release over (takesOverRelease) it is deleted at once, suspended, without an
// uninstall: the provider's release drives kro and uninstalls it. Beside one that has not
// (no revision written yet, or kro on a workload cluster), the provider's goes first and
// the earlier one waits, suspended. Alone, it is kro's release and is returned, to be
// guarded and deleted with an uninstall like the provider's own.
func (r *Taker) EarlierReleaseForDeletion(ctx context.Context, s *step.Scope, own *helmv2.HelmRelease) (*helmv2.HelmRelease, error) {
	if err := r.FindEarlier(ctx, s); err != nil || s.Earlier == nil || s.Earlier.Release == nil {
		return own, err
	}
	hr := s.Earlier.Release
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

// UninstallEarlier lets the earlier provider's HelmRelease, when it is the one that
// drives kro, uninstall it: its unadopted image pull secret copies go first (its values
// name them), and a suspended one is resumed, as Flux skips the uninstall of a suspended
// release.
func (r *Taker) UninstallEarlier(ctx context.Context, s *step.Scope, hr *helmv2.HelmRelease) error {
	if s.Earlier == nil || s.Earlier.Release != hr {
		return nil
	}
	if s.Access != nil {
		if err := r.removeEarlierImageCopies(ctx, s, hr); err != nil {
			return err
		}
	}
	return r.setSuspend(ctx, hr, false)
}

// setSuspend suspends or resumes the earlier provider's HelmRelease, if it is not so
// already, with an optimistic lock: a change since it was read fails this round.
func (r *Taker) setSuspend(ctx context.Context, hr *helmv2.HelmRelease, suspend bool) error {
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

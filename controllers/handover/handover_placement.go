package handover

import (
	"context"
	"fmt"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/flux"
	"github.com/openmcp-project/service-provider-kro/controllers/owned"
	"github.com/openmcp-project/service-provider-kro/controllers/step"
)

// The hand-over when the provider's release cannot take the earlier one's place in Helm's
// storage (handover.go takes it over in place otherwise):
//
//   - A version placed on a workload cluster installs kro elsewhere than the earlier
//     release, kro in kro-system on the ControlPlane. Suspending that release would leave
//     its kro running beside the new one, both reconciling the ControlPlane's RGDs. So the
//     earlier release is uninstalled through itself, resumed and then deleted, so that
//     helm-controller uninstalls it (a suspended release is let go without an uninstall),
//     and only once it is gone does anything of kro's start on the workload cluster: its
//     parts on the ControlPlane, its credential, the provider's HelmRelease. Helm's own
//     objects (kro's ServiceAccount and RBAC) go with the uninstall, so the provider never
//     writes its labels onto them.
//   - A deletion meets the provider's HelmRelease before it wrote a revision of the release
//     (its chart never became Ready, say): helm-controller skips the uninstall of a
//     HelmRelease without a release in its history, so the provider's HelmRelease goes
//     first, the earlier one staying suspended, and the earlier one, resumed and deleted,
//     uninstalls kro.

// uninstallEarlierFirst has the earlier provider's HelmRelease uninstall kro from the
// ControlPlane and waits until it is gone. A release already being deleted is resumed if
// it is suspended, as helm-controller would otherwise let it go without the uninstall.
func (r *Taker) uninstallEarlierFirst(ctx context.Context, s *step.Scope) (step.Result, error) {
	hr := s.Earlier.Release
	if hr.DeletionTimestamp.IsZero() {
		if fluxBusy(s, hr, "deleting it to uninstall kro from the ControlPlane") {
			return step.Waiting, nil
		}
		if err := r.UninstallEarlier(ctx, s, hr); err != nil {
			return step.Proceed, err
		}
		uid, rv := hr.UID, hr.ResourceVersion
		switch err := r.Platform.Delete(ctx, hr, client.Preconditions{UID: &uid, ResourceVersion: &rv}); {
		case apierrors.IsConflict(err):
			s.Requeue(handOverRecheck) // changed since it was read: decide again
			return step.Waiting, nil
		case client.IgnoreNotFound(err) != nil:
			return step.Proceed, fmt.Errorf("deleting the earlier provider's HelmRelease %s/%s to uninstall kro from the ControlPlane: %w", hr.Namespace, hr.Name, err)
		}
		r.Recorder.Eventf(s.Kro, nil, corev1.EventTypeNormal, v1alpha1.ReasonHandingOver, "HandOver",
			"resumed and deleted the earlier provider's HelmRelease %s/%s, so that Flux uninstalls kro from %s on the ControlPlane before kro starts on the workload cluster",
			hr.Namespace, hr.Name, owned.KroNamespace)
		hr.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	} else if err := r.setSuspend(ctx, hr, false); err != nil {
		return step.Proceed, err
	}
	msg := fmt.Sprintf("kro moves from the earlier provider's installation in %s on the ControlPlane to the workload cluster: Flux is uninstalling it through the earlier HelmRelease %s/%s (deleted at %s), so that two kros never reconcile the ControlPlane at once; ResourceGraphDefinitions, their CRDs and instances stay. %s",
		owned.KroNamespace, hr.Namespace, hr.Name, hr.DeletionTimestamp.UTC().Format(time.RFC3339), flux.UninstallNote(hr))
	s.Obs.Set(v1alpha1.ConditionEarlierReleaseSuspended, metav1.ConditionFalse, v1alpha1.ReasonMovingPlacement, msg)
	s.Obs.Set(v1alpha1.ConditionHandOver, metav1.ConditionTrue, v1alpha1.ReasonHandingOver, msg)
	return step.Waiting, nil
}

// earlierUninstallsFirst tells whether the earlier provider's release must be uninstalled
// before the provider's own is applied: for a version on a workload cluster, and while an
// uninstall of it is under way (resumed and deleted), whatever the version.
func earlierUninstallsFirst(s *step.Scope) bool {
	hr := s.Earlier.Release
	return v1alpha1.PlacementOf(s.Version) == v1alpha1.PlacementWorkloadCluster ||
		!hr.DeletionTimestamp.IsZero() && !hr.Spec.Suspend
}

// takesOverRelease tells whether the provider's HelmRelease can uninstall the Helm
// release kro in kro-system on the ControlPlane, which the earlier provider's drove: it
// targets that release and has written a revision of it (helm-controller uninstalls only
// a release in its history, from the storage namespace it recorded).
func takesOverRelease(own *helmv2.HelmRelease) bool {
	return flux.ReleasePlacement(own) == v1alpha1.PlacementControlPlane &&
		own.Status.StorageNamespace != "" && own.Status.History.Latest() != nil
}

// Helm's marks on the objects of a release it installed.
const (
	HelmReleaseNameAnnotation = "meta.helm.sh/release-name"
	HelmManagedByLabel        = "app.kubernetes.io/managed-by"
	// HelmConflictRecheck is how soon a Kro held up by a Helm release's objects on its
	// ControlPlane looks again: those objects are not watched.
	HelmConflictRecheck = 30 * time.Second
)

// helmOwned tells whether an object belongs to a Helm release: Helm would uninstall it
// with the release, so the provider neither labels nor deletes it as its own.
func helmOwned(obj client.Object) bool {
	return obj.GetAnnotations()[HelmReleaseNameAnnotation] != "" || obj.GetLabels()[HelmManagedByLabel] == "Helm"
}

// HelmOwnedOnControlPlane returns the first of kro's service account and objs (kro's
// parts, CRDs aside: the provider never labels those) that exists on the ControlPlane
// as part of a Helm release, as "Kind namespace/name of release R"; "" when none does.
// The ControlPlane is read uncached, metadata only.
func HelmOwnedOnControlPlane(ctx context.Context, reader client.Reader, objs []client.Object) (string, error) {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: owned.KroServiceAccount.Namespace, Name: owned.KroServiceAccount.Name}}
	sa.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ServiceAccount"))
	for _, o := range append([]client.Object{sa}, objs...) {
		gvk := o.GetObjectKind().GroupVersionKind()
		if gvk.Kind == "CustomResourceDefinition" {
			continue
		}
		m := &metav1.PartialObjectMetadata{}
		m.SetGroupVersionKind(gvk)
		switch err := reader.Get(ctx, client.ObjectKeyFromObject(o), m); {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			return "", fmt.Errorf("reading %s %s on the ControlPlane: %w", gvk.Kind, o.GetName(), err)
		}
		if helmOwned(m) {
			return fmt.Sprintf("%s %s of Helm release %q", gvk.Kind, client.ObjectKeyFromObject(o), m.GetAnnotations()[HelmReleaseNameAnnotation]), nil
		}
	}
	return "", nil
}

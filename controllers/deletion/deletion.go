// Package deletion removes kro and the provider's objects when a Kro is deleted, once the
// guard finds nothing that holds the deletion up. Remover holds the steps.
package deletion

import (
	"context"
	"errors"
	"fmt"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	krov1alpha1 "github.com/kubernetes-sigs/kro/api/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/flux"
	"github.com/openmcp-project/service-provider-kro/controllers/foreign"
	"github.com/openmcp-project/service-provider-kro/controllers/guard"
	"github.com/openmcp-project/service-provider-kro/controllers/handover"
	"github.com/openmcp-project/service-provider-kro/controllers/owned"
	"github.com/openmcp-project/service-provider-kro/controllers/placement"
	"github.com/openmcp-project/service-provider-kro/controllers/pullsecrets"
	"github.com/openmcp-project/service-provider-kro/controllers/reach"
	"github.com/openmcp-project/service-provider-kro/controllers/step"
)

// Remover removes kro and the provider's objects, once nothing holds the deletion up.
type Remover struct {
	step.Clients
	HandOver          *handover.Taker
	Placement         *placement.Steps
	Secrets           *pullsecrets.Copier
	AccessGracePeriod time.Duration
}

// ReconcileDelete removes kro from the ControlPlane and everything the provider created,
// in order: wait until no ResourceGraphDefinitions and no instances of the kinds kro
// generated are left, delete the HelmRelease and wait until Flux has uninstalled kro,
// delete the OCIRepository and every secret copy, then drop the finalizer. Without a
// HelmRelease nothing is installed and nothing is guarded. A ControlPlane that is gone
// for good is not waited for: its HelmRelease is dropped without an uninstall. It never
// needs the version to be on offer.
func (r *Remover) ReconcileDelete(ctx context.Context, s *step.Scope) (step.Result, error) {
	s.Obs.Deleting = true
	if !controllerutil.ContainsFinalizer(s.Kro, v1alpha1.Finalizer) {
		return step.Finalized, nil
	}
	hr, err := r.ownRelease(ctx, s)
	if err == nil {
		// What the HelmRelease installs is what the clean-up after it removes.
		err = r.Placement.Move.RecordReleasePlacement(ctx, s, hr)
	}
	if err == nil {
		hr, err = r.HandOver.EarlierReleaseForDeletion(ctx, s, hr)
	}
	switch {
	case err != nil:
		return step.Proceed, err
	case hr == nil:
		return r.finishDeletion(ctx, s)
	case !hr.DeletionTimestamp.IsZero():
		return step.Waiting, r.uninstalling(ctx, s, hr)
	}
	// The ControlPlane's RGDs and its engagement are watched: the change that unblocks the
	// deletion brings the Kro back; instances and the grace period are rechecked
	// (s.requeue). The poll is only the safety net.
	if res, err := r.guardDeletion(ctx, s, hr); res != step.Proceed || err != nil {
		return res, err
	}
	if res, err := r.Placement.Workload.LeaveSwitchedWorkloadCluster(ctx, s, hr); res != step.Proceed || err != nil {
		return res, err
	}
	return step.Waiting, r.deleteRelease(ctx, s, hr)
}

// ownRelease reads the Kro's HelmRelease, uncached: nil when there is none, or when the
// one of that name is someone else's (not the provider's to guard or delete).
func (r *Remover) ownRelease(ctx context.Context, s *step.Scope) (*helmv2.HelmRelease, error) {
	hr := &helmv2.HelmRelease{}
	key := client.ObjectKey{Namespace: s.TenantNamespace, Name: owned.FluxObjectName(r.ProviderName)}
	switch err := r.PlatformReader.Get(ctx, key, hr); {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading HelmRelease %s: %w", key, err)
	case !owned.MadeFor(s.Kro, r.ProviderName, hr):
		return nil, nil
	}
	return hr, nil
}

// deleteRelease deletes the HelmRelease so that Flux uninstalls kro; its disappearance,
// which is watched, brings the Kro back.
func (r *Remover) deleteRelease(ctx context.Context, s *step.Scope, hr *helmv2.HelmRelease) error {
	s.Obs.WaitingFor = flux.UninstallAwaited(hr)
	if err := r.HandOver.UninstallEarlier(ctx, s, hr); err != nil {
		return err
	}
	if err := r.Platform.Delete(ctx, hr, client.Preconditions{UID: &hr.UID}); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting HelmRelease %s/%s: %w", hr.Namespace, hr.Name, err)
	}
	return nil
}

// abandonRelease suspends the HelmRelease of a ControlPlane that is gone for good, so
// that Flux deletes it without an uninstall it could never do, and says so.
func (r *Remover) abandonRelease(ctx context.Context, s *step.Scope, hr *helmv2.HelmRelease, why string) error {
	msg := fmt.Sprintf("%s: kro is dropped without uninstalling it; HelmRelease %s/%s is suspended and deleted", why, hr.Namespace, hr.Name)
	s.Obs.NotBlocked(v1alpha1.ReasonControlPlaneGone, msg)
	if hr.Spec.Suspend {
		return nil
	}
	if err := flux.SuspendRelease(ctx, r.Platform, hr); err != nil {
		return err
	}
	r.Recorder.Eventf(s.Kro, nil, corev1.EventTypeWarning, v1alpha1.ReasonControlPlaneGone, "Delete", "%s", msg)
	return nil
}

// uninstalling reports a deletion whose HelmRelease is already being deleted: the
// uninstall is under way and nothing stops it any more, so nothing is guarded. An RGD
// created since is named as one that will be orphaned, not as a reason to block. When
// the ControlPlane turns out to be gone for good meanwhile, the release is abandoned.
func (r *Remover) uninstalling(ctx context.Context, s *step.Scope, hr *helmv2.HelmRelease) error {
	s.Obs.WaitingFor = flux.UninstallAwaited(hr)
	msg := "the uninstall of kro from the ControlPlane is under way; nothing blocks the deletion any more"
	access, na, err := r.lookUpAccess(ctx, s)
	switch {
	case err != nil:
		return err
	case access != nil:
		if list, err := access.ResourceGraphDefinitions(ctx); err == nil && len(list) > 0 {
			names := rgdNames(list)
			msg = fmt.Sprintf("%s; %d ResourceGraphDefinitions created since it began will be orphaned, as kro no longer runs to manage them: %s; delete them on the ControlPlane",
				msg, len(names), step.ListNames(names))
		}
		if reason, failed := flux.UninstallError(hr); reason == helmv2.UninstallFailedReason {
			s.Obs.Blocked(v1alpha1.ReasonUninstallStuck, fmt.Sprintf("%s: %s; it goes on by itself once Flux succeeds",
				flux.UninstallBegan(hr), failed))
			return nil
		}
	default:
		if gone, why := r.accessGone(s, na, time.Now()); gone {
			return r.abandonRelease(ctx, s, hr, why)
		}
		if s.Obs.AccessMissingSince != nil {
			return nil // accessGone said what the deletion waits for
		}
		// The kubeconfig is there but the ControlPlane does not answer: Flux cannot
		// finish, and nothing is done until it can.
		_, failed := flux.UninstallError(hr)
		if failed == "" {
			failed = "Flux has not reported an error yet"
		}
		s.Obs.Blocked(v1alpha1.ReasonUninstallStuck, fmt.Sprintf(
			"%s, but the ControlPlane does not answer (%s); %s; the uninstall goes on when the ControlPlane answers again, or is dropped when it is gone for good",
			flux.UninstallBegan(hr), na.Message, failed))
		return nil
	}
	s.Obs.NotBlocked(v1alpha1.ReasonUninstalling, msg)
	return nil
}

// finishDeletion runs once no HelmRelease is left: kro was never installed, or Flux has
// uninstalled it (or dropped it with the ControlPlane). Nothing on the ControlPlane needs
// guarding, and its access is needed only to remove the provider's objects there: a
// ControlPlane that cannot be reached is waited for while any are known
// (awaitControlPlane), one that never was reached or is gone for good is not. What the
// provider made is removed, the access released, the tenant namespace deleted if the
// provider created it and it is empty, then the finalizer.
func (r *Remover) finishDeletion(ctx context.Context, s *step.Scope) (step.Result, error) {
	// Once the access is being released, what needed it is done: looking the access up
	// again would ask openmcp for it anew.
	if !releasingAccess(s.Before) {
		access, res, err := r.cleanupAccess(ctx, s)
		if err != nil || res != step.Proceed {
			return res, err
		}
		s.Obs.NotBlocked(v1alpha1.ReasonReconcileSuccess,
			"kro is not installed on the ControlPlane (no HelmRelease is left): nothing blocks the deletion")
		if err := r.removeLeftovers(ctx, s, access); err != nil {
			return step.Proceed, err
		}
		if res, err := r.Placement.Cleanup.RemoveWorkloadLeftovers(ctx, s, access); res != step.Proceed || err != nil {
			return res, err
		}
	}
	if released, err := r.ControlPlanes.Release(ctx, s.Kro); err != nil || !released {
		s.Obs.NotBlocked(v1alpha1.ReasonReleasingAccess, "kro is uninstalled; "+reach.WithdrawalPending(s.TenantNamespace))
		return step.Waiting, err
	}
	if err := r.removeTenantNamespace(ctx, s); err != nil {
		return step.Proceed, err
	}
	if err := r.removeFinalizer(ctx, s.Kro, &s.Writes); err != nil {
		return step.Proceed, err
	}
	return step.Finalized, nil
}

// releasingAccess tells whether an earlier reconcile of the deletion had everything
// removed and began to release the access (DeletionBlocked is False with
// ReleasingAccess).
func releasingAccess(before *v1alpha1.KroStatus) bool {
	if before == nil {
		return false
	}
	c := meta.FindStatusCondition(before.Conditions, v1alpha1.ConditionDeletionBlocked)
	return c != nil && c.Status == metav1.ConditionFalse && c.Reason == v1alpha1.ReasonReleasingAccess
}

// cleanupAccess returns the ControlPlane's access when it works, to remove the
// provider's objects there too, and nil when it does not and the deletion goes on
// without it (awaitControlPlane). It waits while a connection is being made, whose
// outcome brings the Kro back.
func (r *Remover) cleanupAccess(ctx context.Context, s *step.Scope) (*reach.ControlPlaneAccess, step.Result, error) {
	access, na, err := step.LookUpAccess(ctx, r.ControlPlanes, s)
	switch {
	case err != nil:
		return nil, step.Proceed, err
	case access != nil:
		return access, step.Proceed, nil
	case na.Connecting:
		return nil, step.Undecided, nil
	default:
		return nil, r.awaitControlPlane(s, na, time.Now()), nil
	}
}

// accessGone decides, during a deletion, whether a ControlPlane without access counts
// as gone for good: by an authoritative signal (na.Gone), or once its access has been
// missing for the grace period, counted from the first time it was seen missing (a
// kubeconfig secret replaced by delete-and-recreate is back long before). While the
// grace period runs, DeletionBlocked says until when, and the Kro comes back then.
func (r *Remover) accessGone(s *step.Scope, na *reach.NotAvailableError, now time.Time) (bool, string) {
	s.Obs.AccessMissing(s.Kro, na, now)
	switch {
	case na.Gone:
		return true, na.Message
	case !na.Missing:
		return false, ""
	}
	since := s.Obs.AccessMissingSince.Time
	grace := r.gracePeriod()
	deadline := since.Add(grace)
	if !now.Before(deadline) {
		return true, fmt.Sprintf("the ControlPlane's access has been missing since %s, longer than the grace period of %s (%s)",
			since.UTC().Format(time.RFC3339), grace, na.Message)
	}
	msg := fmt.Sprintf("the ControlPlane's access has been missing since %s; kro will be dropped without uninstalling at %s unless it comes back (%s)",
		since.UTC().Format(time.RFC3339), deadline.UTC().Format(time.RFC3339), na.Message)
	s.Obs.Blocked(v1alpha1.ReasonControlPlaneAccessMissing, msg)
	s.Requeue(deadline.Sub(now))
	return false, ""
}

// How often a deletion blocked by instances of kro's kinds looks again. Instances are not
// watched (a watch per generated kind and ControlPlane would cost on every ControlPlane
// all the time), so the last one deleted is seen within this: soon while the deletion is
// new, when someone is likely clearing up; less often the longer it stays blocked, as
// every look costs requests per kind kro generated (instancesOf). Changes of RGDs and of
// the access bring the Kro back at once, whatever the pause.
const (
	instanceRecheckMin = 2 * time.Second
	instanceRecheckMax = time.Minute
)

// InstanceRecheck is the pause before the next look: a tenth of the time the deletion
// has been blocked (since blockedSince, zero if not yet), between instanceRecheckMin and
// instanceRecheckMax.
func InstanceRecheck(blockedSince, now time.Time) time.Duration {
	if blockedSince.IsZero() {
		return instanceRecheckMin
	}
	return min(max(now.Sub(blockedSince)/10, instanceRecheckMin), instanceRecheckMax)
}

// deletionBlockedSince is when the Kro's deletion was last found blocked, as its status
// says, or zero.
func deletionBlockedSince(kro *v1alpha1.Kro) time.Time {
	c := meta.FindStatusCondition(kro.Status.Conditions, v1alpha1.ConditionDeletionBlocked)
	if c == nil || c.Status != metav1.ConditionTrue {
		return time.Time{}
	}
	return c.LastTransitionTime.Time
}

// guardDeletion lets the uninstall of an existing HelmRelease go ahead only when no
// ResourceGraphDefinitions and no instances of kinds kro generated are left on the
// ControlPlane. When the ControlPlane is gone for good there is nothing left to protect
// and Flux could never uninstall: the HelmRelease is abandoned.
func (r *Remover) guardDeletion(ctx context.Context, s *step.Scope, hr *helmv2.HelmRelease) (step.Result, error) {
	access, na, err := r.lookUpAccess(ctx, s)
	switch {
	case err != nil:
		return step.Proceed, err
	case access != nil:
		return r.guardUserResources(ctx, s, access)
	}
	if gone, why := r.accessGone(s, na, time.Now()); gone {
		return step.Proceed, r.abandonRelease(ctx, s, hr, why)
	}
	if na.Missing {
		return step.Waiting, nil // accessGone said until when
	}
	if na.Connecting {
		return step.Undecided, nil
	}
	s.Obs.Blocked(na.ConditionReason(), "cannot check the ControlPlane for ResourceGraphDefinitions: "+na.Message)
	return step.Waiting, nil
}

// guardUserResources blocks the deletion while the tenant's RGDs or instances of the
// kinds kro generated for them exist: uninstalling kro would orphan them, and instances
// that carry kro's finalizer could never finish deleting.
func (r *Remover) guardUserResources(ctx context.Context, s *step.Scope, access *reach.ControlPlaneAccess) (step.Result, error) {
	list, err := access.ResourceGraphDefinitions(ctx)
	if errors.Is(err, reach.ErrRGDsUnknown) {
		s.Obs.RgdsKeep = true
		s.Obs.Blocked(v1alpha1.ReasonReconciling, "cannot check the ControlPlane for ResourceGraphDefinitions yet: "+err.Error())
		return step.Waiting, nil
	}
	if err != nil {
		s.Obs.WaitingFor = "checking the ControlPlane for ResourceGraphDefinitions failed: " + step.Summarize(err)
		return step.Proceed, err
	}
	s.Obs.Rgds = guard.SummarizeRGDs(list)
	step.RgdCondition(&s.Obs, s.Obs.Rgds)
	instances, err := access.Instances(ctx)
	if err != nil {
		s.Obs.WaitingFor = "checking the ControlPlane for instances of kro's kinds failed: " + step.Summarize(err)
		return step.Proceed, err
	}
	if len(instances) > 0 {
		s.Requeue(InstanceRecheck(deletionBlockedSince(s.Kro), time.Now()))
	}
	rgds := rgdNames(list)
	switch {
	case len(rgds) > 0 && len(instances) > 0:
		s.Obs.Blocked(v1alpha1.ReasonUserResourcesPresent, fmt.Sprintf(
			"%d ResourceGraphDefinitions still exist on the ControlPlane: %s, and %d instances of their kinds: %s; delete the instances first, while their RGDs exist, then the RGDs, to let kro be removed",
			len(rgds), step.ListNames(rgds), guard.TotalInstances(instances), guard.ListInstances(instances)))
	case len(rgds) > 0:
		s.Obs.Blocked(v1alpha1.ReasonUserResourcesPresent, fmt.Sprintf(
			"%d ResourceGraphDefinitions still exist on the ControlPlane: %s; delete them to let kro be removed", len(rgds), step.ListNames(rgds)))
	case len(instances) > 0:
		s.Obs.Blocked(v1alpha1.ReasonInstancesPresent, fmt.Sprintf(
			"%d instances of kinds kro generated still exist on the ControlPlane although their ResourceGraphDefinitions are gone: %s; kro cannot finish deleting them without their RGD: recreate the RGD (%s) so that kro can finish them and delete the instances while it exists, then the RGD",
			guard.TotalInstances(instances), guard.ListInstances(instances), guard.RgdsOfInstances(instances)))
	default:
		s.Obs.NotBlocked(v1alpha1.ReasonReconcileSuccess,
			"no ResourceGraphDefinitions and no instances of kro's kinds block the deletion")
		return step.Proceed, nil
	}
	return step.Waiting, nil
}

// removeLeftovers deletes the OCIRepository and every secret copy, on the ControlPlane
// too while it can be reached.
func (r *Remover) removeLeftovers(ctx context.Context, s *step.Scope, access *reach.ControlPlaneAccess) error {
	repo := &sourcev1.OCIRepository{}
	key := client.ObjectKey{Namespace: s.TenantNamespace, Name: owned.FluxObjectName(r.ProviderName)}
	switch err := r.PlatformReader.Get(ctx, key, repo); {
	case apierrors.IsNotFound(err):
	case err != nil:
		return fmt.Errorf("reading OCIRepository %s: %w", key, err)
	case owned.MadeFor(s.Kro, r.ProviderName, repo):
		err := r.Platform.Delete(ctx, repo, client.Preconditions{UID: &repo.UID})
		if client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting OCIRepository %s: %w", key, err)
		}
	}
	if access != nil {
		if err := r.Secrets.RemoveImageSecretCopies(ctx, access.Client, s.Kro, owned.KroNamespace, nil); err != nil {
			return err
		}
	}
	if s.Earlier.Found() {
		if err := r.HandOver.RemoveEarlier(ctx, s); err != nil {
			return err
		}
	}
	return r.Secrets.RemoveChartSecretCopies(ctx, r.PlatformReader, s.Kro, s.TenantNamespace, "")
}

// rgdNames returns the names of RGDs, in their order.
func rgdNames(list []krov1alpha1.ResourceGraphDefinition) []string {
	names := make([]string, 0, len(list))
	for i := range list {
		names = append(names, list[i].Name)
	}
	return names
}

// removeTenantNamespace deletes the tenant namespace when the provider created it for
// this Kro (it carries the provider's labels of the Kro; a namespace openmcp or anyone
// else made never does) and nothing is left in it but what Kubernetes puts into every
// namespace and the provider's own objects already being deleted. A namespace that still
// holds something is kept, and an event names what.
func (r *Remover) removeTenantNamespace(ctx context.Context, s *step.Scope) error {
	ns := &corev1.Namespace{}
	if err := r.PlatformReader.Get(ctx, client.ObjectKey{Name: s.TenantNamespace}, ns); err != nil {
		return client.IgnoreNotFound(err)
	}
	if !ns.DeletionTimestamp.IsZero() || !owned.As(ns, flux.NewTenantNamespace(s.Kro, r.ProviderName, s.TenantNamespace)) {
		return nil
	}
	left, err := r.namespaceContents(ctx, s.TenantNamespace)
	if err != nil {
		return err
	}
	if len(left) > 0 {
		r.Recorder.Eventf(s.Kro, nil, corev1.EventTypeNormal, v1alpha1.ReasonTerminating, "Delete",
			"the tenant namespace %s on the platform cluster, created by the provider, is kept because it is not empty: %s; delete it once nobody needs it",
			s.TenantNamespace, step.ListNames(left))
		return nil
	}
	// The preconditions make sure it is still the namespace just checked, labels included;
	// a conflict fails this round and the next one decides again.
	err = r.Platform.Delete(ctx, ns, client.Preconditions{UID: &ns.UID, ResourceVersion: &ns.ResourceVersion})
	if client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting tenant namespace %s: %w", s.TenantNamespace, err)
	}
	return nil
}

// namespaceContents lists what a tenant namespace holds, as "Kind/name", besides what
// Kubernetes puts into every namespace (the ConfigMap kube-root-ca.crt, the
// ServiceAccount default) and the provider's objects that are being deleted. It reads
// the kinds that end up in a tenant namespace: secrets (the kubeconfig in standalone
// mode), ConfigMaps, ServiceAccounts and Flux's OCIRepositories and HelmReleases.
func (r *Remover) namespaceContents(ctx context.Context, namespace string) ([]string, error) {
	kinds := []struct {
		gvk  schema.GroupVersionKind
		skip string
	}{
		{corev1.SchemeGroupVersion.WithKind("Secret"), ""},
		{corev1.SchemeGroupVersion.WithKind("ConfigMap"), "kube-root-ca.crt"},
		{corev1.SchemeGroupVersion.WithKind("ServiceAccount"), "default"},
		{sourcev1.GroupVersion.WithKind(sourcev1.OCIRepositoryKind), ""},
		{helmv2.GroupVersion.WithKind(helmv2.HelmReleaseKind), ""},
	}
	var left []string
	for _, k := range kinds {
		list := &metav1.PartialObjectMetadataList{}
		list.SetGroupVersionKind(k.gvk.GroupVersion().WithKind(k.gvk.Kind + "List"))
		if err := r.PlatformReader.List(ctx, list, client.InNamespace(namespace)); err != nil {
			return nil, fmt.Errorf("listing %ss in tenant namespace %s: %w", k.gvk.Kind, namespace, err)
		}
		for _, o := range list.Items {
			ours := o.Labels[v1alpha1.LabelManagedBy] == v1alpha1.ManagedByValue && o.Labels[v1alpha1.LabelProvider] == foreign.LabelValue(r.ProviderName)
			if o.Name == k.skip || ours && !o.DeletionTimestamp.IsZero() {
				continue
			}
			left = append(left, k.gvk.Kind+"/"+o.Name)
		}
	}
	return left, nil
}

func (r *Remover) removeFinalizer(ctx context.Context, kro *v1alpha1.Kro, w *step.WriteTracker) error {
	orig := kro.DeepCopy()
	if !controllerutil.RemoveFinalizer(kro, v1alpha1.Finalizer) {
		return nil
	}
	w.Before(kro)
	return client.IgnoreNotFound(r.Onboarding.Patch(ctx, kro, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})))
}

func (r *Remover) gracePeriod() time.Duration {
	if r.AccessGracePeriod > 0 {
		return r.AccessGracePeriod
	}
	return DefaultAccessGracePeriod
}

// DefaultAccessGracePeriod is the default of KroReconciler.AccessGracePeriod: long
// enough for a kubeconfig secret to be replaced or relabelled, short enough that a
// destroyed ControlPlane does not hold its Kro for long.
const DefaultAccessGracePeriod = 5 * time.Minute

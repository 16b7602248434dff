package owned

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/clusters"
)

// EnsureNamespace creates a namespace on a cluster when it does not exist.
func EnsureNamespace(ctx context.Context, c client.Client, name string, labels map[string]string) error {
	ns := &corev1.Namespace{}
	err := c.Get(ctx, client.ObjectKey{Name: name}, ns)
	if err == nil {
		return nil
	}
	if !apierrors.IsNotFound(err) {
		return fmt.Errorf("reading namespace %s: %w", name, err)
	}
	ns = &corev1.Namespace{}
	ns.Name, ns.Labels = name, labels
	if err := c.Create(ctx, ns); client.IgnoreAlreadyExists(err) != nil {
		return fmt.Errorf("creating namespace %s: %w", name, err)
	}
	return nil
}

// Apply writes obj with server-side apply under the provider's field owner. An object
// that is already as desired is not written.
func Apply(ctx context.Context, c client.Client, obj client.Object) error {
	//nolint:staticcheck // client.Apply with typed objects is what controller-runtime v0.24 offers for Flux kinds.
	return c.Patch(ctx, obj, client.Apply, clusters.FieldOwner, client.ForceOwnership)
}

// CopySecret writes a secret copy unless the (cached) copy is already as desired (and
// holds nothing others wrote in its data, type or labels: that goes, see takeOver), so
// that a reconcile with nothing to change sends no request at all for it. It never takes
// over a secret of the same name that the provider did not create for this Kro: it
// returns false for such a secret and leaves it as it is. A copy the cache does not hold
// is created, not applied, so that a secret made in the meantime makes the creation
// fail instead of being taken over; reader (uncached) then tells whose it is. The one
// exception is an unlabelled secret with exactly the source's type and data, as the
// earlier provider copied them: it is adopted (adoptable).
func CopySecret(ctx context.Context, c client.Client, reader client.Reader, desired *corev1.Secret) (bool, error) {
	key := client.ObjectKeyFromObject(desired)
	current := &corev1.Secret{}
	err := c.Get(ctx, key, current)
	switch {
	case err == nil:
	case !apierrors.IsNotFound(err):
		return false, fmt.Errorf("reading secret %s: %w", key, err)
	default:
		err := c.Create(ctx, desired.DeepCopy(), clusters.FieldOwner)
		if !apierrors.IsAlreadyExists(err) {
			return err == nil, err
		}
		if err := reader.Get(ctx, key, current); err != nil {
			return false, fmt.Errorf("reading secret %s: %w", key, err)
		}
	}
	if !As(current, desired) {
		if !adoptable(current, desired) {
			return false, nil
		}
		// The earlier provider's copy: the apply below labels it as the provider's.
		return true, Apply(ctx, c, desired)
	}
	if secretUpToDate(current, desired) && !WrittenByOthers(current) {
		return true, nil
	}
	if WrittenByOthers(current) {
		// A key or a label someone added stays unless the provider owns it first.
		if err := takeOver(ctx, c, reader, desired); err != nil {
			return true, err
		}
	}
	return true, Apply(ctx, c, desired)
}

// As tells whether current carries the provider's ownership labels of desired, that
// is, whether the provider created it for the same Kro and purpose.
func As(current, desired client.Object) bool {
	for _, k := range []string{v1alpha1.LabelManagedBy, v1alpha1.LabelProvider, v1alpha1.LabelKroName, v1alpha1.LabelKroNamespace, v1alpha1.LabelRole} {
		if current.GetLabels()[k] != desired.GetLabels()[k] {
			return false
		}
	}
	return true
}

// ConflictMessage says which object is in the provider's way and what to do.
func ConflictMessage(kro *v1alpha1.Kro, kind, where string, obj client.Object, todo string) string {
	return fmt.Sprintf("%s %s/%s on %s was not created by the provider for Kro %s/%s (it lacks the labels %s=%s and %s=%s), so the provider neither overwrites nor deletes it: %s",
		kind, obj.GetNamespace(), obj.GetName(), where, kro.Namespace, kro.Name, v1alpha1.LabelManagedBy, v1alpha1.ManagedByValue, v1alpha1.LabelKroName, obj.GetLabels()[v1alpha1.LabelKroName], todo)
}

// secretUpToDate tells whether current carries everything desired sets. Of current's
// data it compares the digest: the ControlPlane's cache keeps no more (TrimSecretCopy).
func secretUpToDate(current, desired *corev1.Secret) bool {
	if current.Type != desired.Type || !current.DeletionTimestamp.IsZero() || digestOf(current) != dataDigest(desired.Data) {
		return false
	}
	for k, v := range desired.Labels {
		if current.Labels[k] != v {
			return false
		}
	}
	for k, v := range desired.Annotations {
		if current.Annotations[k] != v {
			return false
		}
	}
	return true
}

// DeleteProviders deletes the object at key when it carries the provider's managed-by
// label, and only the very object that reader read (its UID is a precondition).
func DeleteProviders(ctx context.Context, reader client.Reader, c client.Client, key types.NamespacedName, obj client.Object) error {
	if err := reader.Get(ctx, key, obj); err != nil {
		return client.IgnoreNotFound(err)
	}
	if obj.GetLabels()[v1alpha1.LabelManagedBy] != v1alpha1.ManagedByValue {
		return nil
	}
	uid := obj.GetUID()
	err := c.Delete(ctx, obj, client.Preconditions{UID: &uid})
	if apierrors.IsConflict(err) {
		// Replaced by an object of the same name since: not the provider's to delete.
		return nil
	}
	return client.IgnoreNotFound(err)
}

// adoptable tells whether an existing secret that the provider did not label may become
// its copy: the earlier provider copied pull secrets under their source's name, without
// labels, and such a copy holds exactly the source's type and data (desired carries them).
func adoptable(current, desired *corev1.Secret) bool {
	src := &corev1.Secret{Type: desired.Type, Data: desired.Data}
	return current.DeletionTimestamp.IsZero() && SameSecretAsSource(current, src)
}

// SameSecretAsSource is the rule by which a secret counts as an unlabelled copy of a
// source secret, to adopt or remove: no manager's label, and the source's type and data
// exactly. A tenant's own secret of the same name differs in data, or carries labels.
func SameSecretAsSource(cp, src *corev1.Secret) bool {
	return cp.Labels[v1alpha1.LabelManagedBy] == "" && cp.Type == src.Type && digestOf(cp) == dataDigest(src.Data)
}

package owned

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
)

// AnnotationAppliedHash records a hash of what the provider last applied to a Flux object.
const AnnotationAppliedHash = v1alpha1.LabelPrefix + "applied-hash"

// applyUnlessCurrent applies desired with server-side apply unless the cached object
// (read into current, of the same type) already holds it: the same applied hash, and no
// other field manager owns a field the provider takes over (someone's edit is drift to
// repair: takeOver first makes those fields the provider's, so that the apply removes
// what it does not send; reader reads past the cache). Either way desired ends up
// holding the object as the server has it, status included. This keeps a reconcile with
// nothing to change from sending any request, also after a restart of the provider.
func applyUnlessCurrent(ctx context.Context, c client.Client, reader client.Reader, desired, current client.Object) error {
	hash, err := StampHash(desired)
	if err != nil {
		return err
	}
	err = c.Get(ctx, client.ObjectKeyFromObject(desired), current)
	if err == nil && IsCurrent(current, hash) {
		return copyObject(current, desired)
	}
	if err == nil && WrittenByOthers(current) {
		if err := takeOver(ctx, c, reader, desired); err != nil {
			return err
		}
	}
	return Apply(ctx, c, desired)
}

// copyObject makes into a copy of from, status included.
func copyObject(from, into client.Object) error {
	data, err := json.Marshal(from)
	if err != nil {
		return err
	}
	return json.Unmarshal(data, into)
}

// prepareFunc sees an object as it is before it is applied (nil when there is none). It
// may complete desired from it, and returns false to leave the object as it is for now.
type prepareFunc func(current client.Object) (bool, error)

// ApplyOwned is applyUnlessCurrent for an object that only the provider may write. The
// cache selects the provider's labels, so an object of the same name that the provider
// did not make is not in it: when the cache has nothing, the API server is asked. An
// object that exists without the provider's labels for this Kro is neither changed nor
// taken over, and applyOwned returns false. prepare, when given, runs before the apply;
// when it leaves an object as it is, desired holds that object, as after an apply.
func ApplyOwned(ctx context.Context, c client.Client, reader client.Reader, desired, current client.Object, prepare prepareFunc) (bool, error) {
	key := client.ObjectKeyFromObject(desired)
	err := c.Get(ctx, key, current)
	if apierrors.IsNotFound(err) {
		err = reader.Get(ctx, key, current)
		if apierrors.IsNotFound(err) {
			return true, applyPrepared(ctx, c, reader, desired, nil, current, prepare)
		}
	}
	if err != nil {
		return false, fmt.Errorf("reading %s: %w", key, err)
	}
	if !As(current, desired) {
		return false, nil
	}
	return true, applyPrepared(ctx, c, reader, desired, current, current, prepare)
}

// applyPrepared runs prepare on found (nil: none) and applies desired unless prepare
// leaves found as it is. current is scratch space of desired's type.
func applyPrepared(ctx context.Context, c client.Client, reader client.Reader, desired, found, current client.Object, prepare prepareFunc) error {
	if prepare != nil {
		ok, err := prepare(found)
		if err != nil {
			return err
		}
		if !ok && found != nil {
			return copyObject(found, desired)
		}
	}
	return applyUnlessCurrent(ctx, c, reader, desired, current)
}

// StampHash records the hash of desired in its AnnotationAppliedHash.
func StampHash(desired client.Object) (string, error) {
	annotations := desired.GetAnnotations()
	delete(annotations, AnnotationAppliedHash)
	hash, err := appliedHash(desired)
	if err != nil {
		return "", err
	}
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[AnnotationAppliedHash] = hash
	desired.SetAnnotations(annotations)
	return hash, nil
}

func appliedHash(obj client.Object) (string, error) {
	data, err := json.Marshal(obj)
	if err != nil {
		return "", fmt.Errorf("hashing %s: %w", obj.GetName(), err)
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:16]), nil
}

// IsCurrent tells whether current carries the hash of what the provider would apply and
// nothing that others wrote in its place (WrittenByOthers).
func IsCurrent(current client.Object, hash string) bool {
	return current.GetAnnotations()[AnnotationAppliedHash] == hash && current.GetDeletionTimestamp().IsZero() &&
		!WrittenByOthers(current)
}

package owned

import (
	"encoding/json"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
)

// CompactManagedFields is a cache transform that keeps of an object's managedFields only
// what the provider reads (WrittenByOthers, SuspendedBy): which other managers own fields
// it takes over, and which one set spec.suspend. The provider's own entries, those of
// subresources (status) and those with nothing of the kind go; the rest keep their
// manager and those fields, cut after their second level (compactFields).
// managedFields are often the largest part of a cached object (every status writer's
// entry lists the fields it set), and every replica caches every Kro and its Flux objects.
//
// A cached object is never sent back whole, nor are its managedFields taken over (the
// provider applies fresh objects, patches with diffs, and takeOver reads the object from
// the API server), so the compacted entries never reach an API server.
func CompactManagedFields(obj any) (any, error) {
	o, ok := obj.(metav1.Object)
	if !ok {
		return obj, nil
	}
	mfs := o.GetManagedFields()
	if len(mfs) == 0 {
		return obj, nil
	}
	var kept []metav1.ManagedFieldsEntry
	for _, mf := range mfs {
		if !othersEntry(mf) {
			continue
		}
		set, err := parseFields(mf)
		if err != nil {
			continue
		}
		raw, ok := compactFields(set)
		if !ok {
			continue
		}
		kept = append(kept, metav1.ManagedFieldsEntry{Manager: mf.Manager, Operation: mf.Operation, APIVersion: mf.APIVersion,
			FieldsType: mf.FieldsType, FieldsV1: metav1.NewFieldsV1(string(raw))})
	}
	o.SetManagedFields(kept)
	return obj, nil
}

// compactFields is what the cache keeps of another manager's fields: those the provider
// takes over and spec.suspend, down to their second level (spec.values, a secret's data
// key, the labels); false when there is nothing of the kind. A field cut off keeps whether
// it had content (hasContent), so that the compacted entry tells the same.
func compactFields(set fieldSet) ([]byte, bool) {
	drift, rest := splitDrift(set)
	keep := fieldSet{}
	if hasContent(drift) {
		for k, v := range drift {
			sub, _ := v.(fieldSet)
			cut := fieldSet{}
			for k2, v2 := range sub {
				child, _ := v2.(fieldSet)
				if len(child) == 0 || hasContent(child) {
					cut[k2] = fieldSet{}
				} else {
					cut[k2] = fieldSet{fieldSelf: fieldSet{}}
				}
			}
			keep[k] = cut
		}
	}
	if spec, ok := rest[fieldSpec].(fieldSet); ok && spec[fieldSuspend] != nil {
		merge(keep, fieldSet{fieldSpec: fieldSet{fieldSuspend: fieldSet{}}})
	}
	if len(keep) == 0 {
		return nil, false
	}
	raw, err := json.Marshal(keep)
	return raw, err == nil
}

// OnboardingCacheOptions are the options of the onboarding cluster's cache: the Kros,
// with compacted managedFields.
func OnboardingCacheOptions() cache.Options {
	return cache.Options{DefaultTransform: CompactManagedFields}
}

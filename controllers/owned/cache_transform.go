package owned

import (
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/openmcp-project/service-provider-kro/clusters"
)

// specWrittenMarker is what a compacted managedFields entry keeps of the fields its
// manager owns: that they include the spec.
const specWrittenMarker = `{"f:spec":{}}`

// CompactManagedFields is a cache transform that keeps of an object's managedFields only
// what the provider reads (specWrittenByOthers): which other managers wrote its spec.
// The provider's own entries, those of subresources (status) and those without the spec
// go; the rest keep their manager and a one-field marker. managedFields are often the
// largest part of a cached object (every status writer's entry lists the fields it set),
// and every replica caches every Kro and its Flux objects.
//
// A cached object is never sent back whole (the provider applies fresh objects and
// patches with diffs), so the compacted entries never reach an API server.
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
		if mf.Manager == string(clusters.FieldOwner) || mf.Subresource != "" || mf.FieldsV1 == nil ||
			!strings.Contains(mf.FieldsV1.GetRawString(), `"f:spec"`) {
			continue
		}
		kept = append(kept, metav1.ManagedFieldsEntry{Manager: mf.Manager, Operation: mf.Operation, APIVersion: mf.APIVersion,
			FieldsType: mf.FieldsType, FieldsV1: metav1.NewFieldsV1(specWrittenMarker)})
	}
	o.SetManagedFields(kept)
	return obj, nil
}

// OnboardingCacheOptions are the options of the onboarding cluster's cache: the Kros,
// with compacted managedFields.
func OnboardingCacheOptions() cache.Options {
	return cache.Options{DefaultTransform: CompactManagedFields}
}

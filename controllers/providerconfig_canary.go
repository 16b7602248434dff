package controllers

import (
	"context"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

// namespaceLabels are the labels of every Namespace of the onboarding cluster, by name,
// read from the cache of their metadata.
func namespaceLabels(ctx context.Context, onboarding client.Reader) (map[string]map[string]string, error) {
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("NamespaceList"))
	if err := onboarding.List(ctx, list); err != nil {
		return nil, fmt.Errorf("listing Namespaces for spec.rollout.canary: %w", err)
	}
	out := make(map[string]map[string]string, len(list.Items))
	for i := range list.Items {
		out[list.Items[i].Name] = list.Items[i].Labels
	}
	return out, nil
}

// namespaceRelabelled lets through a change of a Namespace's labels: it may make Kros
// canaries or take them out. A Namespace that comes or goes brings its Kros' own events.
type namespaceRelabelled struct{ predicate.Funcs }

func (namespaceRelabelled) Update(e event.UpdateEvent) bool {
	return !maps.Equal(e.ObjectOld.GetLabels(), e.ObjectNew.GetLabels())
}

func (namespaceRelabelled) Create(event.CreateEvent) bool   { return false }
func (namespaceRelabelled) Delete(event.DeleteEvent) bool   { return false }
func (namespaceRelabelled) Generic(event.GenericEvent) bool { return false }

package controllers

import (
	"context"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
)

// A rollout's canaries (spec.rollout.canary) are chosen by the platform, never by a
// tenant. The selector matches the labels of the Kro's Namespace on the onboarding
// cluster: tenants write their Kros, labels included, but not their Namespace (under
// openmcp a workspace's members may only get it, and openmcp's own labels on it name
// the project and the workspace; standalone, a namespace's admin cannot update the
// Namespace either). A tenant can thus neither make its Kro a canary nor take it out of
// the canaries. The Namespaces' metadata is cached and watched: relabelling one brings
// the ProviderConfig back.

// canaryFunc tells whether a Kro is a canary of the rollout; nil: the policy names none.
type canaryFunc func(k *v1alpha1.Kro) bool

// canaries is the canary test of the policy's selector (nil: none) for the view's Kros.
func (v rolloutView) canaries(sel labels.Selector) canaryFunc {
	if sel == nil {
		return nil
	}
	return func(k *v1alpha1.Kro) bool { return sel.Matches(labels.Set(v.namespaceLabels[k.Namespace])) }
}

// selfLabelled are the Kros whose own labels match the canary selector while their
// Namespace's do not: a tenant's try, or a ProviderConfig written when the selector
// matched Kros' labels. They are named so that the platform team can label the
// Namespaces of the Kros it means.
func selfLabelled(sel labels.Selector, isCanary canaryFunc, kros []v1alpha1.Kro) []string {
	if sel == nil {
		return nil
	}
	var out []string
	for i := range kros {
		if k := &kros[i]; len(k.Labels) > 0 && sel.Matches(labels.Set(k.Labels)) && !isCanary(k) {
			out = append(out, kroKey(k))
		}
	}
	return out
}

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

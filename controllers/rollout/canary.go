package rollout

import (
	"k8s.io/apimachinery/pkg/labels"

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
func (v View) canaries(sel labels.Selector) canaryFunc {
	if sel == nil {
		return nil
	}
	return func(k *v1alpha1.Kro) bool { return sel.Matches(labels.Set(v.NamespaceLabels[k.Namespace])) }
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
			out = append(out, KroKey(k))
		}
	}
	return out
}

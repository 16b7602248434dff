package controlplane

import (
	"maps"
	"net/http"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// Kinds maps kinds to their scope.
type Kinds map[schema.GroupVersionKind]meta.RESTScope

// BuiltinKinds are the built-in kinds the provider uses on every ControlPlane, with
// their scope.
var BuiltinKinds = Kinds{
	corev1.SchemeGroupVersion.WithKind("Secret"):                            meta.RESTScopeNamespace,
	corev1.SchemeGroupVersion.WithKind("Namespace"):                         meta.RESTScopeRoot,
	apiextensionsv1.SchemeGroupVersion.WithKind("CustomResourceDefinition"): meta.RESTScopeRoot,
}

// NewRESTMapper returns a cluster.Options.MapperProvider for ControlPlanes: BuiltinKinds
// and the known kinds given are mapped without discovery, their REST mappings being
// fixed; any other kind by controller-runtime's lazy discovering mapper. Discovery for
// every engaged ControlPlane (the API groups document, decoded per ControlPlane and kept
// in its mapper) took a quarter of the provider's CPU while engaging many ControlPlanes
// at once.
func NewRESTMapper(known Kinds) func(cfg *rest.Config, httpClient *http.Client) (meta.RESTMapper, error) {
	all := Kinds{}
	maps.Copy(all, BuiltinKinds)
	maps.Copy(all, known)
	return func(cfg *rest.Config, httpClient *http.Client) (meta.RESTMapper, error) {
		var versions []schema.GroupVersion // the preferred versions, for requests without one
		for gvk := range all {
			if !slices.Contains(versions, gvk.GroupVersion()) {
				versions = append(versions, gvk.GroupVersion())
			}
		}
		fixed := meta.NewDefaultRESTMapper(versions)
		for gvk, scope := range all {
			fixed.Add(gvk, scope)
			// controller-runtime's cache asks for the list's kind, as discovery maps it.
			fixed.Add(gvk.GroupVersion().WithKind(gvk.Kind+"List"), scope)
		}
		discovering, err := apiutil.NewDynamicRESTMapper(cfg, httpClient)
		if err != nil {
			return nil, err
		}
		return firstMatch{known: fixed, fallback: discovering}, nil
	}
}

// firstMatch asks known first and fallback only when known has no match. Unlike
// meta.MultiRESTMapper, it does not ask fallback when known answers.
type firstMatch struct {
	known, fallback meta.RESTMapper
}

func (m firstMatch) KindFor(resource schema.GroupVersionResource) (schema.GroupVersionKind, error) {
	if k, err := m.known.KindFor(resource); !meta.IsNoMatchError(err) {
		return k, err
	}
	return m.fallback.KindFor(resource)
}

func (m firstMatch) KindsFor(resource schema.GroupVersionResource) ([]schema.GroupVersionKind, error) {
	if k, err := m.known.KindsFor(resource); !meta.IsNoMatchError(err) {
		return k, err
	}
	return m.fallback.KindsFor(resource)
}

func (m firstMatch) ResourceFor(input schema.GroupVersionResource) (schema.GroupVersionResource, error) {
	if r, err := m.known.ResourceFor(input); !meta.IsNoMatchError(err) {
		return r, err
	}
	return m.fallback.ResourceFor(input)
}

func (m firstMatch) ResourcesFor(input schema.GroupVersionResource) ([]schema.GroupVersionResource, error) {
	if r, err := m.known.ResourcesFor(input); !meta.IsNoMatchError(err) {
		return r, err
	}
	return m.fallback.ResourcesFor(input)
}

func (m firstMatch) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	if r, err := m.known.RESTMapping(gk, versions...); !meta.IsNoMatchError(err) {
		return r, err
	}
	return m.fallback.RESTMapping(gk, versions...)
}

func (m firstMatch) RESTMappings(gk schema.GroupKind, versions ...string) ([]*meta.RESTMapping, error) {
	if r, err := m.known.RESTMappings(gk, versions...); !meta.IsNoMatchError(err) {
		return r, err
	}
	return m.fallback.RESTMappings(gk, versions...)
}

func (m firstMatch) ResourceSingularizer(resource string) (string, error) {
	if s, err := m.known.ResourceSingularizer(resource); err == nil {
		return s, nil
	}
	return m.fallback.ResourceSingularizer(resource)
}

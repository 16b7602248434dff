package testenv

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
)

// ConfigMapRGD returns a small ResourceGraphDefinition (kro.run/v1alpha1) that gives
// tenants a kind named kind, each instance of which is one ConfigMap. The e2e suite, the
// sandbox and the environment's proof test apply it so that kro has something to accept.
func ConfigMapRGD(name, kind string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kro.run/v1alpha1",
		"kind":       "ResourceGraphDefinition",
		"metadata":   map[string]any{"name": name},
		"spec": map[string]any{
			"schema": map[string]any{
				"apiVersion": "v1alpha1",
				"kind":       kind,
				"spec":       map[string]any{"name": "string"},
			},
			"resources": []any{map[string]any{
				"id": "config",
				"template": map[string]any{
					"apiVersion": "v1",
					"kind":       "ConfigMap",
					"metadata":   map[string]any{"name": "${schema.spec.name}"},
					"data":       map[string]any{"app": "${schema.spec.name}"},
				},
			}},
		},
	}}
}

// SchemaRGD returns a ResourceGraphDefinition with a schema of the given kind and no
// resources: enough for the provider to count and for tests to create and delete
// without kro running.
func SchemaRGD(name, kind string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kro.run/v1alpha1",
		"kind":       "ResourceGraphDefinition",
		"metadata":   map[string]any{"name": name},
		"spec": map[string]any{"schema": map[string]any{
			"apiVersion": "v1alpha1", "kind": kind, "scope": "Namespaced",
		}},
	}}
}

// KroGeneratedCRD returns a CRD as kro generates one for the RGD of that name
// (kro.run/<plural>, labelled kro.run/owned and with the RGD's name, which kro keeps after
// the RGD is gone), accepting any instance, and an instance of it in namespace default,
// without a name yet.
func KroGeneratedCRD(plural, kind, rgd string) (*apiextensionsv1.CustomResourceDefinition, *unstructured.Unstructured) {
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: plural + ".kro.run", Labels: map[string]string{
			"kro.run/owned": "true", "kro.run/resource-graph-definition-name": rgd}},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "kro.run", Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: plural, Kind: kind, ListKind: kind + "List"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1alpha1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: ptr.To(true)}}}},
		},
	}
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("kro.run/v1alpha1")
	u.SetKind(kind)
	u.SetNamespace("default")
	return crd, u
}

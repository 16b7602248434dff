package testenv

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
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

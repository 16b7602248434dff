// Package crdschema checks an object of the provider's API against the schema its CRD is
// served with, as the API server does on a write: the OpenAPI schema (types, lengths,
// patterns, enums, item counts), the list types' uniqueness, and the CEL rules. Tests
// use it to check what the provider computes, without a write per case; the API
// server's own refusal is tested beside it.
package crdschema

import (
	"context"
	"fmt"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/listtype"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"

	"github.com/openmcp-project/service-provider-kro/config/crd"
)

// Validator validates objects of one kind against its CRD's served version.
type Validator struct {
	kind       string
	openAPI    validation.SchemaValidator
	structural *schema.Structural
	cel        *cel.Validator
}

// For is the validator of the provider's kind (Kro, ProviderConfig), built from the
// embedded CRD (config/crd), which is what the API server is given.
func For(kind string) (*Validator, error) {
	all, err := crd.All()
	if err != nil {
		return nil, fmt.Errorf("reading the CRDs: %w", err)
	}
	for _, c := range all {
		if c.Spec.Names.Kind != kind {
			continue
		}
		for _, v := range c.Spec.Versions {
			if v.Served && v.Schema != nil && v.Schema.OpenAPIV3Schema != nil {
				return newValidator(kind, v.Schema.OpenAPIV3Schema)
			}
		}
		return nil, fmt.Errorf("CRD %s serves no version with a schema", c.Name)
	}
	return nil, fmt.Errorf("no CRD of kind %s", kind)
}

func newValidator(kind string, v1 *apiextensionsv1.JSONSchemaProps) (*Validator, error) {
	internal := &apiextensions.JSONSchemaProps{}
	if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(v1, internal, nil); err != nil {
		return nil, fmt.Errorf("converting the schema of %s: %w", kind, err)
	}
	openAPI, _, err := validation.NewSchemaValidator(internal)
	if err != nil {
		return nil, fmt.Errorf("building the OpenAPI validator of %s: %w", kind, err)
	}
	structural, err := schema.NewStructural(internal)
	if err != nil {
		return nil, fmt.Errorf("building the structural schema of %s: %w", kind, err)
	}
	return &Validator{
		kind: kind, openAPI: openAPI, structural: structural,
		cel: cel.NewValidator(structural, true, celconfig.PerCallLimit),
	}, nil
}

// Validate returns what the API server would refuse of obj, by field; nothing when it
// accepts it. obj is a typed object of the validator's kind (its status included).
func (v *Validator) Validate(obj runtime.Object) field.ErrorList {
	// As the API server decodes JSON: integers as int64, which CEL's int-or-string needs.
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return field.ErrorList{field.InternalError(nil, fmt.Errorf("converting the %s: %w", v.kind, err))}
	}
	// The API server validates the object as JSON gives it: no apiVersion or kind is
	// checked here, but a missing one would be refused before the schema.
	errs := validation.ValidateCustomResource(nil, u, v.openAPI)
	errs = append(errs, listtype.ValidateListSetsAndMaps(nil, v.structural, u)...)
	celErrs, _ := v.cel.Validate(context.Background(), nil, v.structural, u, nil, celconfig.RuntimeCELCostBudget)
	return append(errs, celErrs...)
}

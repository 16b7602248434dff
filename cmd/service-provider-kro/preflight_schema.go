package main

import (
	"context"
	"fmt"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	structuralpruning "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
)

// crdSchema checks objects against a CRD version's schema the way the API server does
// for a create: pruning, defaults, the OpenAPI schema and the CEL rules. It lets
// preflight tell, before this release's CRDs replace the installed ones, which existing
// objects they would refuse.
type crdSchema struct {
	structural *structuralschema.Structural
	openAPI    validation.SchemaCreateValidator
	cel        *cel.Validator
}

// newCRDSchema reads the schema of the CRD's storage version.
func newCRDSchema(crd *apiextensionsv1.CustomResourceDefinition) (*crdSchema, error) {
	for _, v := range crd.Spec.Versions {
		if !v.Storage || v.Schema == nil {
			continue
		}
		internal := &apiextensions.CustomResourceValidation{}
		if err := apiextensionsv1.Convert_v1_CustomResourceValidation_To_apiextensions_CustomResourceValidation(v.Schema, internal, nil); err != nil {
			return nil, fmt.Errorf("reading the schema of %s: %w", crd.Name, err)
		}
		structural, err := structuralschema.NewStructural(internal.OpenAPIV3Schema)
		if err != nil {
			return nil, fmt.Errorf("reading the schema of %s: %w", crd.Name, err)
		}
		openAPI, _, err := validation.NewSchemaValidator(internal.OpenAPIV3Schema)
		if err != nil {
			return nil, fmt.Errorf("reading the schema of %s: %w", crd.Name, err)
		}
		return &crdSchema{structural: structural, openAPI: openAPI, cel: cel.NewValidator(structural, true, celconfig.PerCallLimit)}, nil
	}
	return nil, fmt.Errorf("CRD %s has no storage version with a schema", crd.Name)
}

// check returns what the schema refuses in obj (a copy is checked), and the fields it
// would drop as unknown.
func (s *crdSchema) check(ctx context.Context, obj map[string]any) (field.ErrorList, []string) {
	o := runtime.DeepCopyJSON(obj)
	delete(o, "status") // the status is the provider's to write anew
	dropped := structuralpruning.PruneWithOptions(o, s.structural, true, structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true})
	structuraldefaulting.Default(o, s.structural)
	errs := validation.ValidateCustomResource(nil, o, s.openAPI)
	celErrs, _ := s.cel.Validate(ctx, nil, s.structural, o, nil, celconfig.RuntimeCELCostBudget)
	return append(errs, celErrs...), dropped
}

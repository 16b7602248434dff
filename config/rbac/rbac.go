// Package rbac embeds the ClusterRoles that `task generate` writes from the markers in
// controllers/rbac, so that the binary can ask openmcp for exactly these rights when it
// requests access to the onboarding cluster itself.
package rbac

import (
	_ "embed"
	"fmt"

	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

//go:embed onboarding/role.yaml
var onboardingRole []byte

// OnboardingRules returns the rules of the generated onboarding ClusterRole: everything
// `run` does on the onboarding cluster.
func OnboardingRules() ([]rbacv1.PolicyRule, error) {
	role := &rbacv1.ClusterRole{}
	if err := yaml.UnmarshalStrict(onboardingRole, role); err != nil {
		return nil, fmt.Errorf("decoding the embedded onboarding ClusterRole: %w", err)
	}
	if len(role.Rules) == 0 {
		return nil, fmt.Errorf("the embedded onboarding ClusterRole has no rules")
	}
	return role.Rules, nil
}

// InitRules are the rights `init` needs on the onboarding cluster: reading, creating and
// applying CustomResourceDefinitions (server-side apply of an absent object needs create
// as well as patch; init waits for each CRD with get).
func InitRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{{
		APIGroups: []string{"apiextensions.k8s.io"},
		Resources: []string{"customresourcedefinitions"},
		Verbs:     []string{"get", "create", "patch"},
	}}
}

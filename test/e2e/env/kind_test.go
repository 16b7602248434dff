package env

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/kind/pkg/apis/config/defaults"
	"sigs.k8s.io/kind/pkg/apis/config/v1alpha4"
	"sigs.k8s.io/yaml"
)

// TestKindClustersRender checks the kind backend without Docker: the clusters it would
// create, one per role with valid distinct names, and their configs, which render as kind
// v1alpha4 and take kind's defaults (its node image). The backend itself has never run
// on the machines this project is developed on, which have no Docker engine.
func TestKindClustersRender(t *testing.T) {
	plan := kindClusters("kro-e2e-", DefaultControlPlanes)
	var roles []string
	seen := map[string]bool{}
	for _, kc := range plan {
		roles = append(roles, kc.role)
		if errs := validation.IsDNS1123Label(kc.name); len(errs) > 0 || seen[kc.name] {
			t.Errorf("kind cluster name %q: %v (seen before: %t)", kc.name, errs, seen[kc.name])
		}
		seen[kc.name] = true

		out, err := yaml.Marshal(kc.config)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"kind: Cluster", "apiVersion: kind.x-k8s.io/v1alpha4", "apiServerAddress: 127.0.0.1", "role: control-plane"} {
			if !strings.Contains(string(out), want) {
				t.Errorf("config of %s lacks %q:\n%s", kc.role, want, out)
			}
		}
		back := &v1alpha4.Cluster{}
		if err := yaml.UnmarshalStrict(out, back); err != nil {
			t.Errorf("config of %s does not read back strictly: %v", kc.role, err)
		}
		v1alpha4.SetDefaultsCluster(back)
		if len(back.Nodes) != 1 || back.Nodes[0].Image != defaults.Image {
			t.Errorf("config of %s after kind's defaults: nodes %+v, want one with image %s", kc.role, back.Nodes, defaults.Image)
		}
	}
	if strings.Join(roles, ",") != "onboarding,platform,cp-1,cp-2" {
		t.Errorf("roles %v", roles)
	}
}

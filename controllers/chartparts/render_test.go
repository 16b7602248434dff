package chartparts

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// tenantSA is deliberately not the chart's own ServiceAccount (kro in the release
// namespace), so that a binding left as rendered fails the tests.
var tenantSA = types.NamespacedName{Namespace: "tenant-a", Name: "kro-controller"}

func testOptions(values map[string]any) Options {
	return Options{ReleaseName: "kro", Namespace: "kro-system", Values: values, ServiceAccount: tenantSA}
}

func mustRender(t *testing.T, archive []byte, opts Options) *Parts {
	t.Helper()
	parts, err := Render(archive, opts)
	if err != nil {
		t.Fatalf("Render: %v", err)
	}
	return parts
}

func roleNames(p *Parts) []string    { return objectNames(p.ClusterRoles) }
func bindingNames(p *Parts) []string { return objectNames(p.ClusterRoleBindings) }

func findRole(t *testing.T, p *Parts, name string) *rbacv1.ClusterRole {
	t.Helper()
	for _, r := range p.ClusterRoles {
		if r.Name == name {
			return r
		}
	}
	t.Fatalf("no ClusterRole %q among %v", name, roleNames(p))
	return nil
}

func hasRule(role *rbacv1.ClusterRole, want rbacv1.PolicyRule) bool {
	return slices.ContainsFunc(role.Rules, func(r rbacv1.PolicyRule) bool { return reflect.DeepEqual(r, want) })
}

// checkSubjects asserts that every binding has exactly one subject, tenantSA.
func checkSubjects(t *testing.T, p *Parts) {
	t.Helper()
	want := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: tenantSA.Name, Namespace: tenantSA.Namespace}}
	for _, b := range p.ClusterRoleBindings {
		if !reflect.DeepEqual(b.Subjects, want) {
			t.Errorf("ClusterRoleBinding %s has subjects %+v, want %+v", b.Name, b.Subjects, want)
		}
	}
}

func TestRenderCRDs(t *testing.T) {
	parts := mustRender(t, kroChartArchive(t, false), testOptions(nil))
	if got, want := parts.CRDNames(), []string{"graphrevisions.internal.kro.run", "resourcegraphdefinitions.kro.run"}; !slices.Equal(got, want) {
		t.Fatalf("CRDNames() = %v, want %v", got, want)
	}
	for _, crd := range parts.CRDs {
		if crd.APIVersion != "apiextensions.k8s.io/v1" || crd.Kind != "CustomResourceDefinition" {
			t.Errorf("CRD %s has TypeMeta %+v", crd.Name, crd.TypeMeta)
		}
		if crd.Spec.Group == "" || len(crd.Spec.Versions) == 0 || crd.Spec.Versions[0].Schema == nil {
			t.Errorf("CRD %s was not decoded fully: group %q, %d versions", crd.Name, crd.Spec.Group, len(crd.Spec.Versions))
		}
	}
}

func TestRenderUnrestricted(t *testing.T) {
	for _, layout := range []struct {
		name       string
		dirEntries bool
	}{{"helm package", false}, {"source-controller artifact", true}} {
		t.Run(layout.name, func(t *testing.T) {
			parts := mustRender(t, kroChartArchive(t, layout.dirEntries), testOptions(nil))
			if got, want := roleNames(parts), []string{"kro-cluster-role", "kro-edit", "kro-view"}; !slices.Equal(got, want) {
				t.Fatalf("ClusterRoles %v, want %v", got, want)
			}
			all := rbacv1.PolicyRule{APIGroups: []string{"*"}, Resources: []string{"*"}, Verbs: []string{"*"}}
			if role := findRole(t, parts, "kro-cluster-role"); !hasRule(role, all) {
				t.Errorf("kro-cluster-role lacks the */*/* rule: %+v", role.Rules)
			}
			if got := findRole(t, parts, "kro-edit").Labels["rbac.authorization.k8s.io/aggregate-to-edit"]; got != "true" {
				t.Errorf("kro-edit is not aggregated into edit (label %q)", got)
			}
			if got := findRole(t, parts, "kro-view").Labels["rbac.authorization.k8s.io/aggregate-to-view"]; got != "true" {
				t.Errorf("kro-view is not aggregated into view (label %q)", got)
			}
			if got, want := bindingNames(parts), []string{"kro-cluster-role-binding"}; !slices.Equal(got, want) {
				t.Fatalf("ClusterRoleBindings %v, want %v", got, want)
			}
			if ref := parts.ClusterRoleBindings[0].RoleRef; ref.Kind != "ClusterRole" || ref.Name != "kro-cluster-role" {
				t.Errorf("binding refers to %+v", ref)
			}
			if got, want := parts.BoundClusterRoles(), []string{"kro-cluster-role"}; !slices.Equal(got, want) {
				t.Errorf("BoundClusterRoles %v, want %v", got, want)
			}
			checkSubjects(t, parts)
		})
	}
}

func TestRenderAggregation(t *testing.T) {
	parts := mustRender(t, kroChartArchive(t, false), testOptions(map[string]any{"rbac": map[string]any{"mode": "aggregation"}}))
	if got, want := roleNames(parts), []string{"kro-edit", "kro-view", "kro:controller", "kro:controller:static"}; !slices.Equal(got, want) {
		t.Fatalf("ClusterRoles %v, want %v", got, want)
	}
	aggregated := findRole(t, parts, "kro:controller")
	wantSelector := []metav1.LabelSelector{{MatchLabels: map[string]string{"rbac.kro.run/aggregate-to-controller": "true"}}}
	if aggregated.AggregationRule == nil || !reflect.DeepEqual(aggregated.AggregationRule.ClusterRoleSelectors, wantSelector) {
		t.Errorf("kro:controller has aggregation rule %+v, want selectors %+v", aggregated.AggregationRule, wantSelector)
	}
	static := findRole(t, parts, "kro:controller:static")
	rgds := rbacv1.PolicyRule{
		APIGroups: []string{"kro.run"}, Resources: []string{"resourcegraphdefinitions"},
		Verbs: []string{"create", "delete", "get", "list", "patch", "update", "watch"},
	}
	if !hasRule(static, rgds) {
		t.Errorf("kro:controller:static lacks %+v: %+v", rgds, static.Rules)
	}
	if got := static.Labels["rbac.kro.run/aggregate-to-controller"]; got != "true" {
		t.Errorf("kro:controller:static is not aggregated into kro:controller (label %q)", got)
	}
	for _, r := range parts.ClusterRoles {
		if hasRule(r, rbacv1.PolicyRule{APIGroups: []string{"*"}, Resources: []string{"*"}, Verbs: []string{"*"}}) {
			t.Errorf("ClusterRole %s grants everything in aggregation mode", r.Name)
		}
	}
	if got, want := bindingNames(parts), []string{"kro:controller"}; !slices.Equal(got, want) {
		t.Fatalf("ClusterRoleBindings %v, want %v", got, want)
	}
	// Bound is the aggregated role, so that roles aggregated into it later reach kro.
	if got, want := parts.BoundClusterRoles(), []string{"kro:controller"}; !slices.Equal(got, want) {
		t.Errorf("BoundClusterRoles %v, want %v", got, want)
	}
	checkSubjects(t, parts)
}

// TestRenderFollowsReleaseName shows that the options reach the templates: the names are
// derived from the release name.
func TestRenderFollowsReleaseName(t *testing.T) {
	opts := testOptions(nil)
	opts.ReleaseName = "tenant"
	parts := mustRender(t, kroChartArchive(t, false), opts)
	if got, want := roleNames(parts), []string{"tenant-kro-cluster-role", "tenant-kro-edit", "tenant-kro-view"}; !slices.Equal(got, want) {
		t.Errorf("ClusterRoles %v, want %v", got, want)
	}
	if got := parts.ClusterRoleBindings[0].RoleRef.Name; got != "tenant-kro-cluster-role" {
		t.Errorf("binding refers to %q", got)
	}
}

// TestRenderKeepsOnlyCRDsAndClusterRBAC turns on every optional template of the chart
// (metrics Service, ServiceMonitor, pprof Service) besides the Deployment and the
// ServiceAccount: none of them may appear among the Parts.
func TestRenderKeepsOnlyCRDsAndClusterRBAC(t *testing.T) {
	values := map[string]any{
		"metrics": map[string]any{"service": map[string]any{"create": true}, "serviceMonitor": map[string]any{"enabled": true}},
		"debug":   map[string]any{"pprof": map[string]any{"enabled": true, "service": map[string]any{"enabled": true}}},
	}
	parts := mustRender(t, kroChartArchive(t, false), testOptions(values))
	var kinds []string
	for _, o := range parts.Objects() {
		kinds = append(kinds, o.GetObjectKind().GroupVersionKind().Kind+"/"+o.GetName())
	}
	want := []string{
		"CustomResourceDefinition/graphrevisions.internal.kro.run",
		"CustomResourceDefinition/resourcegraphdefinitions.kro.run",
		"ClusterRole/kro-cluster-role", "ClusterRole/kro-edit", "ClusterRole/kro-view",
		"ClusterRoleBinding/kro-cluster-role-binding",
	}
	if !slices.Equal(kinds, want) {
		t.Errorf("Objects() = %v, want %v", kinds, want)
	}
}

func TestAddRBACSkipsOtherKindsAndEmptyDocuments(t *testing.T) {
	p := &Parts{}
	err := p.addRBAC(map[string]string{
		"c/templates/all.yaml": "---\n# only a comment\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: d\n" +
			"---\napiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: sa\n" +
			"---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: r\n---\n",
		"c/templates/NOTES.txt":    "kind: ClusterRole\nthis is not YAML: [",
		"c/templates/_helpers.tpl": "not: [yaml",
		"c/templates/empty.yaml":   "\n\n",
	})
	if err != nil {
		t.Fatalf("addRBAC: %v", err)
	}
	if got := roleNames(p); !slices.Equal(got, []string{"r"}) || len(p.ClusterRoleBindings) != 0 || len(p.CRDs) != 0 {
		t.Errorf("got roles %v, %d bindings, %d CRDs; want only role r", got, len(p.ClusterRoleBindings), len(p.CRDs))
	}
	if got := p.ClusterRoles[0].TypeMeta; got.APIVersion != "rbac.authorization.k8s.io/v1" || got.Kind != "ClusterRole" {
		t.Errorf("TypeMeta %+v", got)
	}
}

func TestRenderErrors(t *testing.T) {
	archive := kroChartArchive(t, false)
	for _, tc := range []struct {
		name    string
		archive []byte
		opts    Options
		want    []string
	}{
		{"no service account", archive, Options{ReleaseName: "kro", Namespace: "kro-system"}, []string{"lack ServiceAccount"}},
		{"no release", archive, Options{Namespace: "n", ServiceAccount: tenantSA}, []string{"lack ReleaseName"}},
		{"not an archive", []byte("hello"), testOptions(nil), []string{"loading the chart archive (5 bytes)"}},
		{"template fails", archive, testOptions(map[string]any{"rbac": map[string]any{"mode": 5}}),
			[]string{"rendering kro's chart " + kroVersion + ": rendering the templates:", "cluster-role"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Render(tc.archive, tc.opts)
			if err == nil {
				t.Fatal("Render succeeded")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestChartCRDsErrors(t *testing.T) {
	for _, tc := range []struct {
		name, data, want string
	}{
		{"not a CRD", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n", "crds/a.yaml: document 0: holds a /v1, Kind=ConfigMap"},
		{"no kind", "# first\n---\nmetadata:\n  name: x\n", "crds/a.yaml: document 1 has no apiVersion and kind"},
		{"no CRDs", "# nothing\n", "no CustomResourceDefinitions"},
		{"v1beta1", "apiVersion: apiextensions.k8s.io/v1beta1\nkind: CustomResourceDefinition\nmetadata:\n  name: x\n", "expected only apiextensions.k8s.io/v1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			chrt := &chart.Chart{Metadata: &chart.Metadata{Name: "c"}, Files: []*chart.File{{Name: "crds/a.yaml", Data: []byte(tc.data)}}}
			_, err := chartCRDs(chrt)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestRBACOfUnsupportedVersionFails(t *testing.T) {
	err := (&Parts{}).addRBAC(map[string]string{"c/templates/r.yaml": "apiVersion: rbac.authorization.k8s.io/v1beta1\nkind: ClusterRole\nmetadata:\n  name: r\n"})
	if err == nil || !strings.Contains(err.Error(), "only rbac.authorization.k8s.io/v1 is supported") {
		t.Errorf("error %v", err)
	}
}

func TestDuplicateNamesFail(t *testing.T) {
	p := &Parts{ClusterRoles: []*rbacv1.ClusterRole{{ObjectMeta: metav1.ObjectMeta{Name: "a"}}, {ObjectMeta: metav1.ObjectMeta{Name: "a"}}}}
	if err := p.checkUniqueNames(); err == nil || !strings.Contains(err.Error(), `two ClusterRoles named "a"`) {
		t.Errorf("error %v", err)
	}
}

func TestDeepCopySharesNothing(t *testing.T) {
	parts := mustRender(t, kroChartArchive(t, false), testOptions(nil))
	cp := parts.DeepCopy()
	cp.ClusterRoles[0].Name = "changed"
	cp.CRDs[0].Labels = map[string]string{"x": "y"}
	cp.ClusterRoleBindings[0].Subjects[0].Name = "other"
	if parts.ClusterRoles[0].Name == "changed" || parts.CRDs[0].Labels["x"] == "y" || parts.ClusterRoleBindings[0].Subjects[0].Name == "other" {
		t.Error("changing the copy changed the original")
	}
}

func TestDeploymentExtrasFollowTheChartsValues(t *testing.T) {
	parts := mustRender(t, kroChartArchive(t, false), testOptions(nil))
	if !parts.OffersDeploymentExtras() || !parts.DeepCopy().OffersDeploymentExtras() {
		t.Error("kro's chart 0.9.4 offers deployment.extraEnv, extraVolumes and extraVolumeMounts")
	}
	older := &chart.Chart{Values: map[string]any{"deployment": map[string]any{"extraEnv": []any{}, "replicaCount": 1}}}
	if hasDeploymentExtras(older) {
		t.Error("a chart without extraVolumes and extraVolumeMounts does not offer them")
	}
	if hasDeploymentExtras(&chart.Chart{}) || (*Parts)(nil).OffersDeploymentExtras() {
		t.Error("no values, no extras")
	}
}

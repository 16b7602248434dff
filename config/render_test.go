package config

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/config/crd"
)

// TestEveryKustomizationRenders renders every kustomization below config/ and checks
// what all of them must satisfy: no wildcard in any RBAC rule, no rule that lets the
// provider widen its own rights, and namespaced objects only in the provider's namespace.
func TestEveryKustomizationRenders(t *testing.T) {
	dirs, err := Kustomizations()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{OnboardingOverlay, PlatformOverlay, "samples/onboarding", "samples/platform", "manager", "crd/onboarding", "crd/platform", "rbac/onboarding", "rbac/platform"} {
		if !slices.Contains(dirs, want) {
			t.Errorf("config/%s has no kustomization.yaml (found %v)", want, dirs)
		}
	}
	for _, dir := range dirs {
		t.Run(dir, func(t *testing.T) {
			objs, err := Render(dir)
			if err != nil {
				t.Fatal(err)
			}
			if len(objs) == 0 {
				t.Fatal("renders nothing")
			}
			for _, o := range objs {
				checkRBAC(t, o)
				// Under openmcp the provider runs in openmcp-operator's namespace.
				want := Namespace
				if dir == "monitoring/openmcp" {
					want = "openmcp-system"
				}
				if !strings.HasPrefix(dir, "samples/") && o.GetNamespace() != "" && o.GetNamespace() != want {
					t.Errorf("%s %s is in namespace %q, not %s", o.GetKind(), o.GetName(), o.GetNamespace(), want)
				}
			}
		})
	}
}

func TestOnboardingOverlay(t *testing.T) {
	objs := render(t, OnboardingOverlay)
	wantKinds(t, objs, "Namespace", "CustomResourceDefinition", "ServiceAccount", "ClusterRole", "ClusterRoleBinding")
	crds := kindOf[apiextensionsv1.CustomResourceDefinition](t, objs, "CustomResourceDefinition")
	if len(crds) != 1 || crds[0].Name != "kroes.kro.services.open-control-plane.io" || crds[0].Labels[crd.ClusterLabel] != "onboarding" {
		t.Errorf("the onboarding overlay must install exactly the Kro CRD, labelled for the onboarding cluster: %v", names(crds))
	}
	checkBindings(t, objs)
}

func TestPlatformOverlay(t *testing.T) {
	objs := render(t, PlatformOverlay)
	wantKinds(t, objs, "Namespace", "CustomResourceDefinition", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Deployment", "Service")
	crds := kindOf[apiextensionsv1.CustomResourceDefinition](t, objs, "CustomResourceDefinition")
	if len(crds) != 1 || crds[0].Name != "providerconfigs.kro.services.open-control-plane.io" || crds[0].Labels[crd.ClusterLabel] != "platform" {
		t.Errorf("the platform overlay must install exactly the ProviderConfig CRD, labelled for the platform cluster: %v", names(crds))
	}
	checkBindings(t, objs)

	deps := kindOf[appsv1.Deployment](t, objs, "Deployment")
	if len(deps) != 1 {
		t.Fatalf("want one Deployment, got %d", len(deps))
	}
	pod := deps[0].Spec.Template.Spec
	if pod.ServiceAccountName != ServiceAccount {
		t.Errorf("serviceAccountName %q, want %q", pod.ServiceAccountName, ServiceAccount)
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("want one container, got %d", len(pod.Containers))
	}
	checkSecurity(t, pod.SecurityContext, pod.Containers[0].SecurityContext)
	checkManager(t, pod.Containers[0])
	checkService(t, kindOf[corev1.Service](t, objs, "Service"), deps[0])
}

// checkService: one Service selects the Deployment's pods and reaches the container's
// metrics and probes ports by name.
func checkService(t *testing.T, svcs []*corev1.Service, dep *appsv1.Deployment) {
	t.Helper()
	if len(svcs) != 1 {
		t.Fatalf("want one Service, got %d", len(svcs))
	}
	svc := svcs[0]
	for k, v := range svc.Spec.Selector {
		if dep.Spec.Template.Labels[k] != v {
			t.Errorf("the Service selects %s=%s, which the Deployment's pods do not carry: %v", k, v, dep.Spec.Template.Labels)
		}
	}
	ports := map[string]bool{}
	for _, p := range dep.Spec.Template.Spec.Containers[0].Ports {
		ports[p.Name] = true
	}
	var names []string
	for _, p := range svc.Spec.Ports {
		names = append(names, p.TargetPort.String())
		if !ports[p.TargetPort.String()] {
			t.Errorf("the Service's port %s targets %q, which the container does not name", p.Name, p.TargetPort.String())
		}
	}
	if !slices.Equal(names, []string{"metrics", "probes"}) {
		t.Errorf("the Service's target ports are %v, want metrics and probes", names)
	}
}

// checkSecurity: non-root, seccomp RuntimeDefault, read-only root filesystem, no
// privilege escalation, every capability dropped.
func checkSecurity(t *testing.T, psc *corev1.PodSecurityContext, sc *corev1.SecurityContext) {
	t.Helper()
	isTrue := func(b *bool) bool { return b != nil && *b }
	runtimeDefault := func(p *corev1.SeccompProfile) bool {
		return p != nil && p.Type == corev1.SeccompProfileTypeRuntimeDefault
	}
	if psc == nil || !isTrue(psc.RunAsNonRoot) || !runtimeDefault(psc.SeccompProfile) {
		t.Errorf("pod securityContext must run as non-root with seccomp RuntimeDefault: %+v", psc)
	}
	if sc == nil {
		t.Fatal("the container has no securityContext")
	}
	checks := map[string]bool{
		"runAsNonRoot: true":               isTrue(sc.RunAsNonRoot),
		"readOnlyRootFilesystem: true":     isTrue(sc.ReadOnlyRootFilesystem),
		"allowPrivilegeEscalation: false":  sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation,
		"capabilities: drop ALL, add none": sc.Capabilities != nil && slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) && len(sc.Capabilities.Add) == 0,
		"seccompProfile: RuntimeDefault":   runtimeDefault(sc.SeccompProfile),
		"privileged: not set or false":     sc.Privileged == nil || !*sc.Privileged,
	}
	for want, ok := range checks {
		if !ok {
			t.Errorf("container securityContext: want %s", want)
		}
	}
}

// checkManager: probes, resources, arguments, POD_NAMESPACE and the image of VERSION.
func checkManager(t *testing.T, c corev1.Container) {
	t.Helper()
	probe := func(p *corev1.Probe, path string) bool {
		return p != nil && p.HTTPGet != nil && p.HTTPGet.Path == path
	}
	if !probe(c.LivenessProbe, "/healthz") || !probe(c.ReadinessProbe, "/readyz") {
		t.Errorf("liveness must GET /healthz and readiness /readyz: %+v, %+v", c.LivenessProbe, c.ReadinessProbe)
	}
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if _, ok := c.Resources.Requests[r]; !ok {
			t.Errorf("no %s request", r)
		}
	}
	if _, ok := c.Resources.Limits[corev1.ResourceMemory]; !ok {
		t.Error("no memory limit")
	}
	for _, arg := range []string{"run", "--leader-elect", "--onboarding-kubeconfig=/etc/service-provider-kro/onboarding/kubeconfig"} {
		if !slices.Contains(c.Args, arg) {
			t.Errorf("args %v lack %q", c.Args, arg)
		}
	}
	if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
		return e.Name == "POD_NAMESPACE" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace"
	}) {
		t.Error("POD_NAMESPACE must come from metadata.namespace")
	}
	version, err := os.ReadFile(filepath.Join(Dir(), "..", "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "ghcr.io/openmcp-project/images/service-provider-kro:" + strings.TrimSpace(string(version)); c.Image != want {
		t.Errorf("image %q, want %q (VERSION and config/manager/kustomization.yaml disagree)", c.Image, want)
	}
}

// TestCRDFoldersMatchTheirLabel keeps the folders that task generate fills and the
// openmcp.cloud/cluster label, which crd.ForCluster goes by, in agreement, and makes sure
// each folder's kustomization lists every CRD in it.
func TestCRDFoldersMatchTheirLabel(t *testing.T) {
	all, err := crd.All()
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, role := range []string{"onboarding", "platform"} {
		files, err := filepath.Glob(filepath.Join(Dir(), "crd", role, "kro.services.open-control-plane.io_*.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			c := &apiextensionsv1.CustomResourceDefinition{}
			if err := yaml.UnmarshalStrict(data, c); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if c.Labels[crd.ClusterLabel] != role {
				t.Errorf("%s is in crd/%s but labelled %q", filepath.Base(f), role, c.Labels[crd.ClusterLabel])
			}
		}
		objs := render(t, "crd/"+role)
		if len(objs) != len(files) {
			t.Errorf("crd/%s holds %d CRDs but its kustomization renders %d", role, len(files), len(objs))
		}
		forCluster, err := crd.ForCluster(role)
		if err != nil {
			t.Fatal(err)
		}
		if len(forCluster) != len(files) {
			t.Errorf("crd.ForCluster(%q) returns %d CRDs, the folder holds %d", role, len(forCluster), len(files))
		}
		total += len(files)
	}
	if len(all) != total || total == 0 {
		t.Errorf("crd.All returns %d CRDs, the folders hold %d", len(all), total)
	}
}

// TestSamplesAreValidObjects decodes every sample strictly into the API types, so that a
// renamed or removed field fails here. Each folder holds the objects of one cluster, so
// that it applies there as it is.
func TestSamplesAreValidObjects(t *testing.T) {
	onboarding, platform := render(t, "samples/onboarding"), render(t, "samples/platform")
	wantKinds(t, onboarding, "Namespace", "Kro")
	wantKinds(t, platform, "ProviderConfig")
	for _, o := range platform {
		if o.GetKind() == "ProviderConfig" && !strings.Contains(fmt.Sprint(o.Object["spec"]), v1alpha1.DefaultChartURL) {
			t.Errorf("the sample ProviderConfig must write kro's chart URL %s out: %v", v1alpha1.DefaultChartURL, o.Object["spec"])
		}
	}
	for _, o := range append(onboarding, platform...) {
		if o.GetKind() == "Namespace" {
			continue
		}
		data, err := yaml.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		var into any
		switch o.GetKind() {
		case "ProviderConfig":
			into = &v1alpha1.ProviderConfig{}
		case "Kro":
			into = &v1alpha1.Kro{}
		default:
			t.Errorf("unexpected sample %s", o.GetKind())
			continue
		}
		if err := yaml.UnmarshalStrict(data, into); err != nil {
			t.Errorf("sample %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
}

// --- helpers ---------------------------------------------------------------

func render(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	objs, err := Render(dir)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

func wantKinds(t *testing.T, objs []*unstructured.Unstructured, kinds ...string) {
	t.Helper()
	var got []string
	for _, o := range objs {
		if !slices.Contains(got, o.GetKind()) {
			got = append(got, o.GetKind())
		}
	}
	slices.Sort(got)
	want := slices.Clone(kinds)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("kinds %v, want %v", got, want)
	}
}

func kindOf[T any](t *testing.T, objs []*unstructured.Unstructured, kind string) []*T {
	t.Helper()
	var out []*T
	for _, o := range objs {
		if o.GetKind() != kind {
			continue
		}
		v := new(T)
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, v); err != nil {
			t.Fatalf("%s %s: %v", kind, o.GetName(), err)
		}
		out = append(out, v)
	}
	return out
}

func names(crds []*apiextensionsv1.CustomResourceDefinition) []string {
	var out []string
	for _, c := range crds {
		out = append(out, c.Name)
	}
	return out
}

// forbiddenVerbs would let the provider grant itself more than it holds.
var forbiddenVerbs = []string{"escalate", "bind", "impersonate"}

// checkRBAC fails on wildcards and self-escalation in a ClusterRole or Role.
func checkRBAC(t *testing.T, o *unstructured.Unstructured) {
	t.Helper()
	if o.GetKind() != "ClusterRole" && o.GetKind() != "Role" {
		return
	}
	role := &rbacv1.ClusterRole{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, role); err != nil {
		t.Fatal(err)
	}
	if role.AggregationRule != nil {
		t.Errorf("%s %s aggregates other roles", o.GetKind(), o.GetName())
	}
	if len(role.Rules) == 0 {
		t.Errorf("%s %s has no rules", o.GetKind(), o.GetName())
	}
	for i, r := range role.Rules {
		for _, field := range [][]string{r.APIGroups, r.Resources, r.Verbs, r.ResourceNames, r.NonResourceURLs} {
			for _, v := range field {
				if strings.Contains(v, "*") {
					t.Errorf("%s %s rule %d has a wildcard: %+v", o.GetKind(), o.GetName(), i, r)
				}
			}
		}
		for _, v := range r.Verbs {
			if slices.Contains(forbiddenVerbs, v) {
				t.Errorf("%s %s rule %d grants %s: %+v", o.GetKind(), o.GetName(), i, v, r)
			}
		}
		if len(r.NonResourceURLs) > 0 && (o.GetName() != MetricsReaderRole || !slices.Equal(r.NonResourceURLs, []string{"/metrics"}) || !slices.Equal(r.Verbs, []string{"get"})) {
			t.Errorf("%s %s rule %d grants non-resource URLs: %+v", o.GetKind(), o.GetName(), i, r)
		}
	}
}

// checkBindings makes sure every binding points at a role of the same overlay and at
// the provider's ServiceAccount in the provider's namespace.
func checkBindings(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	roles := map[string]bool{}
	for _, o := range objs {
		// The metrics reader is for Prometheus, which the platform team binds it to.
		if (o.GetKind() == "ClusterRole" && o.GetName() != MetricsReaderRole) || o.GetKind() == "Role" {
			roles[o.GetKind()+"/"+o.GetName()] = false
		}
	}
	for _, o := range objs {
		if o.GetKind() != "ClusterRoleBinding" && o.GetKind() != "RoleBinding" {
			continue
		}
		b := &rbacv1.RoleBinding{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, b); err != nil {
			t.Fatal(err)
		}
		key := b.RoleRef.Kind + "/" + b.RoleRef.Name
		if _, ok := roles[key]; !ok {
			t.Errorf("%s %s refers to %s, which the overlay does not define", o.GetKind(), o.GetName(), key)
		}
		roles[key] = true
		want := rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: ServiceAccount, Namespace: Namespace}
		if len(b.Subjects) != 1 || b.Subjects[0] != want {
			t.Errorf("%s %s binds %+v, want only %+v", o.GetKind(), o.GetName(), b.Subjects, want)
		}
	}
	for role, bound := range roles {
		if !bound {
			t.Errorf("%s is bound to nobody", role)
		}
	}
}

package chartparts

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// Options say how to render the chart. They must be what Flux installs the chart with
// (release name, namespace and values of the HelmRelease), since the names and the rules
// of the RBAC depend on them.
type Options struct {
	// ReleaseName is the Helm release name; the chart derives its object names from it.
	ReleaseName string
	// Namespace is the release namespace.
	Namespace string
	// Values are the values the release is installed with, over the chart's values.yaml.
	Values map[string]any
	// ServiceAccount is the identity kro's controller acts as on the cluster that gets the
	// Parts: every ServiceAccount subject of the chart's ClusterRoleBindings names it, as
	// the chart's own ServiceAccount lives where the controller runs, not there.
	ServiceAccount types.NamespacedName
}

// Parts are the chart's objects that the cluster kro reconciles needs besides kro's
// workload.
type Parts struct {
	// CRDs are the chart's crds/, ordered by file name, documents in file order.
	CRDs []*apiextensionsv1.CustomResourceDefinition
	// ClusterRoles are all the ClusterRoles the templates render (kro's own and the roles
	// aggregated into admin, edit and view), ordered by name.
	ClusterRoles []*rbacv1.ClusterRole
	// ClusterRoleBindings are all the ClusterRoleBindings the templates render, ordered by
	// name, with every ServiceAccount subject set to Options.ServiceAccount.
	ClusterRoleBindings []*rbacv1.ClusterRoleBinding
	// DeploymentExtras tells whether the chart's values.yaml offers
	// deployment.extraEnv, extraVolumes and extraVolumeMounts (kro's chart from 0.9.4 on),
	// so that what kro's pod needs can be set by values rather than by a post-renderer.
	DeploymentExtras bool
}

// OffersDeploymentExtras tells whether the chart has the deployment.extraEnv,
// extraVolumes and extraVolumeMounts values; false for nil Parts.
func (p *Parts) OffersDeploymentExtras() bool {
	return p != nil && p.DeploymentExtras
}

// hasDeploymentExtras looks for the values in the chart's own values.yaml.
func hasDeploymentExtras(chrt *chart.Chart) bool {
	dep, ok := chrt.Values["deployment"].(map[string]any)
	if !ok {
		return false
	}
	for _, k := range []string{"extraEnv", "extraVolumes", "extraVolumeMounts"} {
		if _, ok := dep[k]; !ok {
			return false
		}
	}
	return true
}

// renderKubeVersion is the Kubernetes version templates see as .Capabilities.KubeVersion.
// There is no cluster to ask while rendering; this is the version of the k8s.io modules
// the provider is built with. kro's chart does not look at it.
var renderKubeVersion = chartutil.KubeVersion{Version: "v1.36.0", Major: "1", Minor: "36"}

var (
	crdGVK                = apiextensionsv1.SchemeGroupVersion.WithKind("CustomResourceDefinition")
	clusterRoleGVK        = rbacv1.SchemeGroupVersion.WithKind("ClusterRole")
	clusterRoleBindingGVK = rbacv1.SchemeGroupVersion.WithKind("ClusterRoleBinding")
)

// Render loads a chart archive (a Flux artifact of the chart's folder or a chart packaged
// by helm: both are a .tar.gz with one top folder) and renders it as Helm would install it
// with opts, without asking any cluster (lookup finds nothing). It returns the CRDs and
// the cluster-wide RBAC and leaves out everything else (Deployment, ServiceAccount,
// Services...), which runs elsewhere.
func Render(archive []byte, opts Options) (*Parts, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	chrt, err := loader.LoadArchive(bytes.NewReader(archive))
	if err != nil {
		return nil, fmt.Errorf("loading the chart archive (%d bytes): %w", len(archive), err)
	}
	parts, err := renderChart(chrt, opts)
	if err != nil {
		return nil, fmt.Errorf("rendering %s's chart %s: %w", chrt.Name(), chrt.Metadata.Version, err)
	}
	return parts, nil
}

// validate refuses options that would render objects naming nothing real: the names of
// the RBAC and of the bindings' subjects come from them.
func (o Options) validate() error {
	var missing []string
	if o.ReleaseName == "" {
		missing = append(missing, "ReleaseName")
	}
	if o.Namespace == "" {
		missing = append(missing, "Namespace")
	}
	if o.ServiceAccount.Name == "" || o.ServiceAccount.Namespace == "" {
		missing = append(missing, "ServiceAccount (name and namespace)")
	}
	if len(missing) > 0 {
		return fmt.Errorf("chart render options lack %s", strings.Join(missing, ", "))
	}
	return nil
}

// renderChart takes the CRDs and the rendered RBAC from a loaded chart.
func renderChart(chrt *chart.Chart, opts Options) (*Parts, error) {
	crds, err := chartCRDs(chrt)
	if err != nil {
		return nil, err
	}
	manifests, err := renderTemplates(chrt, opts)
	if err != nil {
		return nil, err
	}
	parts := &Parts{CRDs: crds, DeploymentExtras: hasDeploymentExtras(chrt)}
	if err := parts.addRBAC(manifests); err != nil {
		return nil, err
	}
	parts.setSubjects(opts.ServiceAccount)
	slices.SortFunc(parts.ClusterRoles, func(a, b *rbacv1.ClusterRole) int { return strings.Compare(a.Name, b.Name) })
	slices.SortFunc(parts.ClusterRoleBindings, func(a, b *rbacv1.ClusterRoleBinding) int { return strings.Compare(a.Name, b.Name) })
	if err := parts.checkUniqueNames(); err != nil {
		return nil, err
	}
	return parts, nil
}

// chartCRDs decodes the chart's crds/ (those of its subcharts too). Helm installs them
// as they are, without templating; so do we. Files are taken in name order so the result
// does not depend on the order of the archive's entries.
func chartCRDs(chrt *chart.Chart) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	files := chrt.CRDObjects()
	slices.SortStableFunc(files, func(a, b chart.CRD) int { return strings.Compare(a.Filename, b.Filename) })
	var crds []*apiextensionsv1.CustomResourceDefinition
	for _, f := range files {
		err := eachDocument(f.Filename, f.File.Data, func(gvk schema.GroupVersionKind, doc []byte) error {
			if gvk != crdGVK {
				return fmt.Errorf("holds a %s, expected only %s", gvk, crdGVK)
			}
			crd := &apiextensionsv1.CustomResourceDefinition{}
			if err := yaml.Unmarshal(doc, crd); err != nil {
				return fmt.Errorf("decoding the CustomResourceDefinition: %w", err)
			}
			crd.TypeMeta = typeMeta(crdGVK)
			crds = append(crds, crd)
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	if len(crds) == 0 {
		return nil, errors.New("the chart has no CustomResourceDefinitions in crds/")
	}
	return crds, nil
}

// renderTemplates renders the chart's templates as a Helm install of release
// opts.ReleaseName in opts.Namespace would, and returns the manifests by template path.
func renderTemplates(chrt *chart.Chart, opts Options) (map[string]string, error) {
	caps := chartutil.DefaultCapabilities.Copy()
	caps.KubeVersion = renderKubeVersion
	release := chartutil.ReleaseOptions{Name: opts.ReleaseName, Namespace: opts.Namespace, Revision: 1, IsInstall: true}
	values, err := chartutil.ToRenderValues(chrt, opts.Values, release, caps)
	if err != nil {
		return nil, fmt.Errorf("merging the values: %w", err)
	}
	// The zero Engine has no cluster client: lookup returns nothing, as in `helm template`.
	manifests, err := engine.Engine{}.Render(chrt, values)
	if err != nil {
		return nil, fmt.Errorf("rendering the templates: %w", err)
	}
	return manifests, nil
}

// addRBAC decodes the ClusterRoles and ClusterRoleBindings among the rendered manifests
// and skips all other kinds. Like Helm, it skips partials (_*.tpl), NOTES.txt and empty
// documents.
func (p *Parts) addRBAC(manifests map[string]string) error {
	names := make([]string, 0, len(manifests))
	for name := range manifests {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if strings.HasSuffix(name, "NOTES.txt") || strings.HasPrefix(path.Base(name), "_") {
			continue
		}
		if err := eachDocument(name, []byte(manifests[name]), p.addRBACObject); err != nil {
			return err
		}
	}
	return nil
}

// addRBACObject adds doc to p when it is a ClusterRole or a ClusterRoleBinding, and
// refuses one of an RBAC version it could not decode rather than leave it out unseen.
func (p *Parts) addRBACObject(gvk schema.GroupVersionKind, doc []byte) error {
	switch gvk {
	case clusterRoleGVK:
		role := &rbacv1.ClusterRole{}
		if err := yaml.Unmarshal(doc, role); err != nil {
			return fmt.Errorf("decoding the ClusterRole: %w", err)
		}
		role.TypeMeta = typeMeta(gvk)
		p.ClusterRoles = append(p.ClusterRoles, role)
	case clusterRoleBindingGVK:
		binding := &rbacv1.ClusterRoleBinding{}
		if err := yaml.Unmarshal(doc, binding); err != nil {
			return fmt.Errorf("decoding the ClusterRoleBinding: %w", err)
		}
		binding.TypeMeta = typeMeta(gvk)
		p.ClusterRoleBindings = append(p.ClusterRoleBindings, binding)
	default:
		if gvk.Group == rbacv1.GroupName && (gvk.Kind == clusterRoleGVK.Kind || gvk.Kind == clusterRoleBindingGVK.Kind) {
			return fmt.Errorf("holds a %s, only %s is supported", gvk, rbacv1.SchemeGroupVersion)
		}
	}
	return nil
}

// setSubjects points every ServiceAccount subject at sa: the chart's ServiceAccount
// exists where kro's controller runs, while the bindings go to the cluster it reconciles.
func (p *Parts) setSubjects(sa types.NamespacedName) {
	for _, b := range p.ClusterRoleBindings {
		for i := range b.Subjects {
			if b.Subjects[i].Kind == rbacv1.ServiceAccountKind {
				b.Subjects[i].APIGroup = ""
				b.Subjects[i].Name = sa.Name
				b.Subjects[i].Namespace = sa.Namespace
			}
		}
	}
}

// checkUniqueNames refuses two objects of a kind with one name: applying both would
// leave only the last, whichever that is.
func (p *Parts) checkUniqueNames() error {
	for _, dup := range []struct {
		kind  string
		names []string
	}{
		{"CustomResourceDefinition", p.CRDNames()},
		{"ClusterRole", objectNames(p.ClusterRoles)},
		{"ClusterRoleBinding", objectNames(p.ClusterRoleBindings)},
	} {
		sorted := slices.Sorted(slices.Values(dup.names))
		for i := 1; i < len(sorted); i++ {
			if sorted[i] == sorted[i-1] {
				return fmt.Errorf("the chart has two %ss named %q", dup.kind, sorted[i])
			}
		}
	}
	return nil
}

// eachDocument calls fn with the type and the bytes of each non-empty YAML document of a
// manifest file, wrapping fn's errors with the file and the document's index.
func eachDocument(file string, data []byte, fn func(schema.GroupVersionKind, []byte) error) error {
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for index := 0; ; index++ {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: reading document %d: %w", file, index, err)
		}
		var fields map[string]any
		if err := yaml.Unmarshal(doc, &fields); err != nil {
			return fmt.Errorf("%s: document %d is not a YAML mapping: %w", file, index, err)
		}
		if len(fields) == 0 {
			continue // empty, or only comments: Helm skips these too
		}
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &meta); err != nil || meta.Kind == "" || meta.APIVersion == "" {
			return fmt.Errorf("%s: document %d has no apiVersion and kind", file, index)
		}
		if err := fn(meta.GroupVersionKind(), doc); err != nil {
			return fmt.Errorf("%s: document %d: %w", file, index, err)
		}
	}
}

// typeMeta is the TypeMeta of gvk. Typed clients leave TypeMeta empty; it is set so
// callers can log, compare and apply the objects without a scheme.
func typeMeta(gvk schema.GroupVersionKind) metav1.TypeMeta {
	apiVersion, kind := gvk.ToAPIVersionAndKind()
	return metav1.TypeMeta{APIVersion: apiVersion, Kind: kind}
}

// Objects returns the parts in the order to apply them: CRDs first, then ClusterRoles,
// then the ClusterRoleBindings that refer to them. They are p's own objects, not copies.
func (p *Parts) Objects() []client.Object {
	objs := make([]client.Object, 0, len(p.CRDs)+len(p.ClusterRoles)+len(p.ClusterRoleBindings))
	for _, o := range p.CRDs {
		objs = append(objs, o)
	}
	for _, o := range p.ClusterRoles {
		objs = append(objs, o)
	}
	for _, o := range p.ClusterRoleBindings {
		objs = append(objs, o)
	}
	return objs
}

// BoundClusterRoles returns the names of the ClusterRoles that the ClusterRoleBindings
// bind to a ServiceAccount (kro's), sorted and each once: what kro holds on the cluster
// it reconciles.
func (p *Parts) BoundClusterRoles() []string {
	var names []string
	for _, b := range p.ClusterRoleBindings {
		if b.RoleRef.Kind != "ClusterRole" || !slices.ContainsFunc(b.Subjects, func(s rbacv1.Subject) bool { return s.Kind == rbacv1.ServiceAccountKind }) {
			continue
		}
		names = append(names, b.RoleRef.Name)
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// CRDNames returns the names of the CRDs, in the order of p.CRDs, e.g. to wait for them
// to be established.
func (p *Parts) CRDNames() []string {
	return objectNames(p.CRDs)
}

// DeepCopy returns a copy of p that shares nothing with it, so that a caller may change
// (or apply, which writes the server's answer into) the objects of a shared result.
func (p *Parts) DeepCopy() *Parts {
	if p == nil {
		return nil
	}
	out := &Parts{DeploymentExtras: p.DeploymentExtras}
	for _, o := range p.CRDs {
		out.CRDs = append(out.CRDs, o.DeepCopy())
	}
	for _, o := range p.ClusterRoles {
		out.ClusterRoles = append(out.ClusterRoles, o.DeepCopy())
	}
	for _, o := range p.ClusterRoleBindings {
		out.ClusterRoleBindings = append(out.ClusterRoleBindings, o.DeepCopy())
	}
	return out
}

// objectNames returns the names of objs in their order.
func objectNames[T client.Object](objs []T) []string {
	names := make([]string, 0, len(objs))
	for _, o := range objs {
		names = append(names, o.GetName())
	}
	return names
}

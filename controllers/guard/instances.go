// Package guard reads what holds a deletion up and what a rollout's gate judges on a
// ControlPlane: the ResourceGraphDefinitions, the instances kro generated from them, and kro's
// health (its Deployment and the instances' readiness).
package guard

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/metadata"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"

	"github.com/openmcp-project/service-provider-kro/controllers/foreign"
)

// kro's labels on the CRDs it generates for ResourceGraphDefinitions (kro v0.9.x,
// pkg/metadata): owned marks them, the RGD's name says which definition made them.
const (
	kroOwnedLabel   = "kro.run/owned"
	kroRGDNameLabel = "kro.run/resource-graph-definition-name"
)

// InstanceCount is how many objects of a kind that kro generated exist on a ControlPlane.
type InstanceCount struct {
	// Kind and Resource (plural.group) of the generated CRD.
	Kind, Resource string
	// RGD is the name of the ResourceGraphDefinition that generated it.
	RGD string
	// Count of its instances, those being deleted included.
	Count int
}

// String reads "3 WebApp (webapps.kro.run, RGD webapp)".
func (c InstanceCount) String() string {
	return fmt.Sprintf("%d %s (%s, RGD %s)", c.Count, c.Kind, c.Resource, c.RGD)
}

// listPageSize bounds the objects of one list request to a ControlPlane, for the kinds
// kro generated and their instances: a tenant decides how many there are and how large.
const listPageSize = 100

// InstancesOf counts the instances of every CRD kro generated on the cluster, reading
// the API server directly: this runs only while a Kro is being deleted, so it costs
// nothing otherwise. Each kind costs one metadata-only request of one object, whatever
// its instances weigh (countObjects). Kinds without instances are left out; the result
// is sorted by resource.
func InstancesOf(ctx context.Context, cl cluster.Cluster) ([]InstanceCount, error) {
	kinds, err := generatedKinds(ctx, cl)
	if err != nil {
		return nil, err
	}
	md, err := metadata.NewForConfigAndClient(cl.GetConfig(), cl.GetHTTPClient())
	if err != nil {
		return nil, err
	}
	var out []InstanceCount
	for _, k := range kinds {
		n, err := countObjects(ctx, md.Resource(k.gvr))
		if apierrors.IsNotFound(err) {
			continue // not served (any more): nothing there for kro to finish
		}
		if err != nil {
			return nil, fmt.Errorf("listing %s: %w", k.name, err)
		}
		if n > 0 {
			out = append(out, InstanceCount{Kind: k.kind, Resource: k.name, RGD: k.rgd, Count: n})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Resource < out[j].Resource })
	return out, nil
}

// countObjects counts the objects of a resource with a metadata-only list of one object:
// the API server says how many remain. Whether there are none is exact; the count of a
// large collection is the server's (etcd's) count at the list's revision. A server that
// does not say pages through, listPageSize objects at a time.
func countObjects(ctx context.Context, ri metadata.ResourceInterface) (int, error) {
	opts := metav1.ListOptions{Limit: 1}
	n := 0
	for {
		list, err := ri.List(ctx, opts)
		if err != nil {
			return 0, err
		}
		n += len(list.Items)
		switch {
		case list.Continue == "":
			return n, nil
		case list.RemainingItemCount != nil:
			return n + int(*list.RemainingItemCount), nil
		}
		opts.Continue, opts.Limit = list.Continue, listPageSize
	}
}

// generatedKind is a kind kro generated from an RGD: its CRD's name (plural.group), its
// kind, the RGD that generated it, and the resource to list.
type generatedKind struct {
	name, kind, rgd string
	gvr             schema.GroupVersionResource
}

// generatedKinds are the kinds kro generated on the cluster that serve a version, in
// the order of their CRDs' names. The CRDs are listed by their metadata, a page at a
// time: a CRD's schema (tenant-sized, often hundreds of kilobytes) is never read, except
// of a CRD that discovery does not show yet. The CRD's name gives its resource and group,
// discovery of the group its kind and a served version (discoverGroup).
func generatedKinds(ctx context.Context, cl cluster.Cluster) ([]generatedKind, error) {
	md, err := metadata.NewForConfigAndClient(cl.GetConfig(), cl.GetHTTPClient())
	if err != nil {
		return nil, err
	}
	dc, err := discovery.NewDiscoveryClientForConfigAndClient(cl.GetConfig(), cl.GetHTTPClient())
	if err != nil {
		return nil, err
	}
	crds := md.Resource(apiextensionsv1.SchemeGroupVersion.WithResource("customresourcedefinitions"))
	opts := metav1.ListOptions{LabelSelector: kroOwnedLabel + "=true", Limit: listPageSize}
	groups := map[string]map[string]servedKind{}
	var out []generatedKind
	for {
		list, err := crds.List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("listing the CRDs kro generated: %w", err)
		}
		for i := range list.Items {
			k, ok, err := resolveKind(ctx, cl.GetAPIReader(), dc, groups, &list.Items[i])
			if err != nil {
				return nil, err
			}
			if ok {
				out = append(out, k)
			}
		}
		if list.Continue == "" {
			break
		}
		opts.Continue = list.Continue
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out, nil
}

// servedKind is what discovery says of a resource: its kind and a version it serves.
type servedKind struct{ kind, version string }

// resolveKind finds the kind and a served version of a CRD known by its metadata, from
// the discovery of its group (read once per group into groups), or from the CRD itself
// when discovery does not show it (yet). ok is false for a CRD that serves no version or
// is not established.
func resolveKind(ctx context.Context, reader client.Reader, dc discovery.DiscoveryInterface, groups map[string]map[string]servedKind,
	crd *metav1.PartialObjectMetadata) (generatedKind, bool, error) {
	plural, group, found := strings.Cut(crd.Name, ".")
	if !found {
		return generatedKind{}, false, nil
	}
	k := generatedKind{name: crd.Name, rgd: crd.Labels[kroRGDNameLabel]}
	served, known := groups[group]
	if !known {
		var err error
		if served, err = discoverGroup(ctx, dc, group); err != nil {
			return k, false, err
		}
		groups[group] = served
	}
	if s, ok := served[plural]; ok {
		k.kind, k.gvr = s.kind, schema.GroupVersionResource{Group: group, Version: s.version, Resource: plural}
		return k, true, nil
	}
	full := &apiextensionsv1.CustomResourceDefinition{}
	switch err := reader.Get(ctx, client.ObjectKey{Name: crd.Name}, full); {
	case apierrors.IsNotFound(err):
		return k, false, nil
	case err != nil:
		return k, false, fmt.Errorf("reading CRD %s: %w", crd.Name, err)
	}
	version := servedVersion(full)
	k.kind, k.gvr = full.Spec.Names.Kind, schema.GroupVersionResource{Group: full.Spec.Group, Version: version, Resource: full.Spec.Names.Plural}
	return k, version != "" && crdEstablished(full), nil
}

// discoverGroup reads the resources a group serves, by plural: the group's preferred
// version first, then the others. Its size grows with the kinds, not with their schemas.
func discoverGroup(ctx context.Context, dc discovery.DiscoveryInterface, group string) (map[string]servedKind, error) {
	out := map[string]servedKind{}
	raw, err := dc.RESTClient().Get().AbsPath("/apis", group).Do(ctx).Raw()
	if apierrors.IsNotFound(err) {
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("discovering API group %s: %w", group, err)
	}
	g := &metav1.APIGroup{}
	if err := json.Unmarshal(raw, g); err != nil {
		return nil, fmt.Errorf("discovering API group %s: %w", group, err)
	}
	versions := []metav1.GroupVersionForDiscovery{g.PreferredVersion}
	for _, v := range g.Versions {
		if v != g.PreferredVersion {
			versions = append(versions, v)
		}
	}
	for _, v := range versions {
		if v.GroupVersion == "" {
			continue
		}
		rl, err := dc.ServerResourcesForGroupVersion(v.GroupVersion)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("discovering %s: %w", v.GroupVersion, err)
		}
		for _, r := range rl.APIResources {
			if _, seen := out[r.Name]; !seen && !strings.Contains(r.Name, "/") {
				out[r.Name] = servedKind{kind: r.Kind, version: v.Version}
			}
		}
	}
	return out, nil
}

// crdEstablished tells whether the API server serves the CRD's kind: a CRD it never
// established (its names conflict with another's, say) has no instances.
func crdEstablished(crd *apiextensionsv1.CustomResourceDefinition) bool {
	for _, c := range crd.Status.Conditions {
		if c.Type == apiextensionsv1.Established {
			return c.Status == apiextensionsv1.ConditionTrue
		}
	}
	return false
}

// servedVersion is the CRD's storage version, or any served one.
func servedVersion(crd *apiextensionsv1.CustomResourceDefinition) string {
	served := ""
	for _, v := range crd.Spec.Versions {
		if v.Storage && v.Served {
			return v.Name
		}
		if v.Served && served == "" {
			served = v.Name
		}
	}
	return served
}

// ListInstances joins instance counts for a message.
func ListInstances(counts []InstanceCount) string {
	parts := make([]string, 0, len(counts))
	for _, c := range counts {
		parts = append(parts, c.String())
	}
	return foreign.List(parts, foreign.StatusNamesMax)
}

// TotalInstances adds the counts up.
func TotalInstances(counts []InstanceCount) int {
	n := 0
	for _, c := range counts {
		n += c.Count
	}
	return n
}

// RgdsOfInstances names the RGDs behind the counts, for the advice in a message.
func RgdsOfInstances(counts []InstanceCount) string {
	seen := map[string]bool{}
	var names []string
	for _, c := range counts {
		if c.RGD != "" && !seen[c.RGD] {
			seen[c.RGD] = true
			names = append(names, c.RGD)
		}
	}
	return strings.Join(names, ", ")
}

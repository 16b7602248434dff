package controllers

import (
	"context"
	"fmt"
	"sort"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/metadata"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
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

// instancesOf counts the instances of every CRD kro generated on the cluster, reading
// the API server directly: this runs only while a Kro is being deleted, so it costs
// nothing otherwise. Kinds without instances are left out; the result is sorted by
// resource.
func instancesOf(ctx context.Context, cl cluster.Cluster) ([]InstanceCount, error) {
	kinds, err := generatedKinds(ctx, cl.GetAPIReader())
	if err != nil {
		return nil, err
	}
	md, err := metadata.NewForConfigAndClient(cl.GetConfig(), cl.GetHTTPClient())
	if err != nil {
		return nil, err
	}
	var out []InstanceCount
	for _, k := range kinds {
		list, err := md.Resource(k.gvr).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, fmt.Errorf("listing %s: %w", k.crd.Name, err)
		}
		if n := len(list.Items); n > 0 {
			out = append(out, InstanceCount{Kind: k.crd.Spec.Names.Kind, Resource: k.crd.Name, RGD: k.crd.Labels[kroRGDNameLabel], Count: n})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Resource < out[j].Resource })
	return out, nil
}

// generatedKind is a kind kro generated from an RGD: its CRD, and the resource to list.
type generatedKind struct {
	crd *apiextensionsv1.CustomResourceDefinition
	gvr schema.GroupVersionResource
}

// generatedKinds are the kinds kro generated on the cluster that serve a version, in
// the order of their CRDs' names.
func generatedKinds(ctx context.Context, reader client.Reader) ([]generatedKind, error) {
	crds := &apiextensionsv1.CustomResourceDefinitionList{}
	if err := reader.List(ctx, crds, client.MatchingLabels{kroOwnedLabel: "true"}); err != nil {
		return nil, fmt.Errorf("listing the CRDs kro generated: %w", err)
	}
	sort.Slice(crds.Items, func(i, j int) bool { return crds.Items[i].Name < crds.Items[j].Name })
	var out []generatedKind
	for i := range crds.Items {
		crd := &crds.Items[i]
		if version := servedVersion(crd); version != "" {
			out = append(out, generatedKind{crd: crd, gvr: schema.GroupVersionResource{Group: crd.Spec.Group, Version: version, Resource: crd.Spec.Names.Plural}})
		}
	}
	return out, nil
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

// listInstances joins instance counts for a message.
func listInstances(counts []InstanceCount) string {
	parts := make([]string, 0, len(counts))
	for _, c := range counts {
		parts = append(parts, c.String())
	}
	return listNames(parts)
}

// totalInstances adds the counts up.
func totalInstances(counts []InstanceCount) int {
	n := 0
	for _, c := range counts {
		n += c.Count
	}
	return n
}

// rgdsOfInstances names the RGDs behind the counts, for the advice in a message.
func rgdsOfInstances(counts []InstanceCount) string {
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

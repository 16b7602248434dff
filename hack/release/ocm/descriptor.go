package ocm

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"sigs.k8s.io/yaml"

	"github.com/openmcp-project/service-provider-kro/hack/image/ociimage"
)

// The media types of OCM's OCI repository mapping: a component version is an OCI manifest
// whose config names the layer holding the component descriptor, a tar with one file.
const (
	ConfigMediaType     types.MediaType = "application/vnd.ocm.software.component.config.v1+json"
	DescriptorMediaType types.MediaType = "application/vnd.ocm.software.component-descriptor.v2+yaml+tar"
	// DescriptorFile is the descriptor's name inside the layer's tar.
	DescriptorFile = "component-descriptor.yaml"
)

// Component is a component version as OCM names it.
type Component struct {
	Name, Version string
}

// Repository is where OCM's mapping keeps the component's versions below baseURL (an OCI
// registry and a path prefix, e.g. ghcr.io/openmcp-project): the versions are its tags.
func (c Component) Repository(baseURL string) string {
	return strings.TrimSuffix(baseURL, "/") + "/component-descriptors/" + c.Name
}

// Tag is the version as an OCI tag: OCM writes a semantic version's "+" as ".build-".
func (c Component) Tag() string { return strings.ReplaceAll(c.Version, "+", ".build-") }

// Descriptor turns a rendered component constructor into the component descriptor (schema
// v2) of its one component, as `ocm add componentversions` would: the ociImage resource
// named image gets imageReference (repository:tag@digest), every resource without a
// relation is external, and the repository context is baseURL.
func Descriptor(rendered []byte, imageResource, imageReference, baseURL string) ([]byte, Component, error) {
	var c struct {
		Components []map[string]any `json:"components"`
	}
	if err := yaml.Unmarshal(rendered, &c); err != nil {
		return nil, Component{}, fmt.Errorf("the constructor is no valid YAML: %w", err)
	}
	if len(c.Components) != 1 {
		return nil, Component{}, fmt.Errorf("expected one component, found %d", len(c.Components))
	}
	in := c.Components[0]
	comp := Component{}
	comp.Name, _ = in["name"].(string)
	comp.Version, _ = in["version"].(string)
	provider, _ := in["provider"].(map[string]any)
	providerName, _ := provider["name"].(string)
	if comp.Name == "" || comp.Version == "" || providerName == "" {
		return nil, Component{}, fmt.Errorf("the component needs a name, a version and a provider name, got %q %q %q", comp.Name, comp.Version, providerName)
	}
	resources, _ := in["resources"].([]any)
	found := false
	for _, r := range resources {
		res, ok := r.(map[string]any)
		if !ok {
			return nil, Component{}, fmt.Errorf("resource %v is not an object", r)
		}
		if _, ok := res["relation"]; !ok {
			res["relation"] = "external"
		}
		if res["name"] == imageResource && res["type"] == "ociImage" {
			access, _ := res["access"].(map[string]any)
			if access == nil {
				return nil, Component{}, fmt.Errorf("resource %s has no access", imageResource)
			}
			access["imageReference"] = imageReference
			found = true
		}
	}
	if !found {
		return nil, Component{}, fmt.Errorf("the component has no ociImage resource %s", imageResource)
	}
	component := map[string]any{
		"name":                comp.Name,
		"version":             comp.Version,
		"provider":            providerName,
		"repositoryContexts":  []any{map[string]any{"type": "OCIRegistry", "baseUrl": baseURL, "componentNameMapping": "urlPath"}},
		"resources":           resources,
		"sources":             orEmpty(in["sources"]),
		"componentReferences": orEmpty(in["componentReferences"]),
	}
	if labels, ok := in["labels"]; ok {
		component["labels"] = labels
	}
	out, err := yaml.Marshal(map[string]any{"meta": map[string]any{"schemaVersion": "v2"}, "component": component})
	return out, comp, err
}

func orEmpty(v any) any {
	if v == nil {
		return []any{}
	}
	return v
}

// Push stores a component descriptor under baseURL the way OCM's OCI mapping does and
// returns the manifest's digest.
func Push(ctx context.Context, descriptor []byte, comp Component, baseURL string, opts ociimage.RegistryOptions) (v1.Hash, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: DescriptorFile, Mode: 0o644, Size: int64(len(descriptor)), Typeflag: tar.TypeReg}); err != nil {
		return v1.Hash{}, err
	}
	if _, err := tw.Write(descriptor); err != nil {
		return v1.Hash{}, err
	}
	if err := tw.Close(); err != nil {
		return v1.Hash{}, err
	}
	layer := static.NewLayer(buf.Bytes(), DescriptorMediaType)
	layerDesc, err := describe(layer, DescriptorMediaType)
	if err != nil {
		return v1.Hash{}, err
	}
	cfgJSON, err := json.Marshal(map[string]any{"componentDescriptorLayer": layerDesc})
	if err != nil {
		return v1.Hash{}, err
	}
	cfg := static.NewLayer(cfgJSON, ConfigMediaType)
	cfgDesc, err := describe(cfg, ConfigMediaType)
	if err != nil {
		return v1.Hash{}, err
	}
	ref, ropts, err := opts.Parse(comp.Repository(baseURL) + ":" + comp.Tag())
	if err != nil {
		return v1.Hash{}, err
	}
	ropts = append(ropts, remote.WithContext(ctx))
	for _, l := range []v1.Layer{layer, cfg} {
		if err := remote.WriteLayer(ref.Context(), l, ropts...); err != nil {
			return v1.Hash{}, err
		}
	}
	manifest, err := json.Marshal(v1.Manifest{SchemaVersion: 2, MediaType: types.OCIManifestSchema1, Config: cfgDesc, Layers: []v1.Descriptor{layerDesc}})
	if err != nil {
		return v1.Hash{}, err
	}
	if err := remote.Put(ref, rawManifest(manifest), ropts...); err != nil {
		return v1.Hash{}, err
	}
	h, _, err := v1.SHA256(bytes.NewReader(manifest))
	return h, err
}

func describe(l v1.Layer, mt types.MediaType) (v1.Descriptor, error) {
	d, err := l.Digest()
	if err != nil {
		return v1.Descriptor{}, err
	}
	size, err := l.Size()
	return v1.Descriptor{MediaType: mt, Digest: d, Size: size}, err
}

// rawManifest is an OCI image manifest as bytes, for remote.Put.
type rawManifest []byte

func (m rawManifest) RawManifest() ([]byte, error)        { return m, nil }
func (m rawManifest) MediaType() (types.MediaType, error) { return types.OCIManifestSchema1, nil }

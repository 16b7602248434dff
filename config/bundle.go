package config

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// ManagerImage is the name config/manager's Deployment gives the provider's image, which
// its kustomization's images entry replaces.
const ManagerImage = "service-provider-kro"

// Image says which image a bundle runs: Repository with Digest ("sha256:...") pins it;
// with Tag only it follows the tag.
type Image struct {
	Repository, Tag, Digest string
}

// Reference is the image as a container runtime pulls it: repository@digest when the
// digest is known, else repository:tag.
func (i Image) Reference() string {
	if i.Digest != "" {
		return i.Repository + "@" + i.Digest
	}
	return i.Repository + ":" + i.Tag
}

// Bundle renders an overlay (e.g. PlatformOverlay) from a copy of the config folder alone,
// in memory, with the provider's image set to image, and returns it as one YAML stream, as
// `kubectl kustomize` would print it. Rendering from the folder alone is what a remote
// base does (`kubectl apply -k <repo>//config/platform?ref=<tag>`): a file outside config/
// would fail here as it fails there.
func Bundle(overlay string, image Image) ([]byte, error) {
	mem := filesys.MakeFsInMemory()
	root := Dir()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		dst := path.Join("/config", filepath.ToSlash(rel))
		if d.IsDir() {
			return mem.MkdirAll(dst)
		}
		if !strings.HasSuffix(p, ".yaml") {
			return nil // the Go files and the README are not part of the kustomizations
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return mem.WriteFile(dst, data)
	})
	if err != nil {
		return nil, err
	}
	if err := setManagerImage(mem, "/config/manager/kustomization.yaml", image); err != nil {
		return nil, err
	}
	resMap, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(mem, path.Join("/config", overlay))
	if err != nil {
		return nil, fmt.Errorf("rendering config/%s: %w", overlay, err)
	}
	return resMap.AsYaml()
}

// setManagerImage replaces the images entry of the manager's kustomization, as
// `kustomize edit set image` does.
func setManagerImage(mem filesys.FileSystem, file string, image Image) error {
	if image.Repository == "" || (image.Tag == "" && image.Digest == "") {
		return fmt.Errorf("the provider's image needs a repository and a tag or digest, got %+v", image)
	}
	if image.Digest != "" && !strings.HasPrefix(image.Digest, "sha256:") {
		return fmt.Errorf("the provider's image digest %q is not sha256:<hex>", image.Digest)
	}
	data, err := mem.ReadFile(file)
	if err != nil {
		return err
	}
	var k types.Kustomization
	if err := yaml.Unmarshal(data, &k); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	found := false
	for i := range k.Images {
		if k.Images[i].Name == ManagerImage {
			k.Images[i] = types.Image{Name: ManagerImage, NewName: image.Repository, NewTag: image.Tag, Digest: image.Digest}
			if image.Digest != "" {
				k.Images[i].NewTag = "" // kustomize writes repository@digest, the tag would only mislead
			}
			found = true
		}
	}
	if !found {
		return fmt.Errorf("%s has no images entry named %s", file, ManagerImage)
	}
	out, err := yaml.Marshal(k)
	if err != nil {
		return err
	}
	return mem.WriteFile(file, out)
}

package kind

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/openmcp-project/service-provider-kro/hack/image/ociimage"
)

// Image is an image of one static binary, as the kind e2e pushes them to the registry its
// nodes pull from: Flux's controllers and kro's, built from their modules.
type Image struct {
	// Tags the image answers to in the nodes, e.g. registry.k8s.io/kro/kro:0.9.4.
	Tags []string
	// Binary on the host, and Path, its absolute path in the image; the entrypoint.
	Binary, Path string
	// User is "uid:gid", or "" for root.
	User string
}

// WriteArchive writes img for this machine's platform as a Docker image archive (what
// `kind load image-archive` reads) to file.
func (img Image) WriteArchive(file string) error {
	return writeComponent(component{tags: img.Tags, binary: img.Binary, inImage: img.Path, entrypoint: []string{img.Path}, user: img.User}, file)
}

// Push pushes img for this machine's platform to each of its tags in a registry, as a
// platform team mirrors an image into the registry its nodes pull from.
func (img Image) Push(ctx context.Context, opts ociimage.RegistryOptions) error {
	idx, err := component{tags: img.Tags, binary: img.Binary, inImage: img.Path, entrypoint: []string{img.Path}, user: img.User}.index()
	if err != nil {
		return err
	}
	for _, t := range img.Tags {
		if _, err := ociimage.Push(ctx, idx, t, opts); err != nil {
			return fmt.Errorf("pushing %s: %w", t, err)
		}
	}
	return nil
}

// LayoutArchive picks this machine's platform from the OCI image layout in dir (what
// `go tool task image` writes) and writes it as a Docker image archive tagged ref.
func LayoutArchive(dir, ref, file string) error {
	idx, err := ociimage.ReadLayout(dir)
	if err != nil {
		return err
	}
	img, err := ociimage.ImageForPlatform(idx, v1.Platform{OS: "linux", Architecture: runtime.GOARCH})
	if err != nil {
		return fmt.Errorf("%s: %w", dir, err)
	}
	tag, err := name.NewTag(ref)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	return tarball.MultiRefWriteToFile(file, map[name.Reference]v1.Image{tag: img})
}

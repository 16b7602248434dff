package kind

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/openmcp-project/service-provider-kro/hack/image/ociimage"
	"github.com/openmcp-project/service-provider-kro/hack/image/rootfs"
)

// component is one image kubeadm's control plane runs: which binary it holds, where, and
// the tags it answers to.
type component struct {
	tags    []string
	binary  string // path of the static binary on the host
	inImage string // absolute path in the image
	// entrypoint is set for images whose pods give only args (CoreDNS, pause); kubeadm's
	// static pods and kube-proxy's DaemonSet give the command, found on PATH.
	entrypoint []string
	// base is a root file system tar below the binary: kube-proxy runs iptables.
	base string
	// user is the image's user, "" for root.
	user string
}

// kubeadmImages asks kubeadm which images the control plane of KubernetesVersion uses,
// so that the tags are kubeadm's own and never drift from it.
func kubeadmImages(ctx context.Context, kubeadm string) ([]string, error) {
	out, err := exec.CommandContext(ctx, kubeadm, "config", "images", "list",
		"--kubernetes-version", KubernetesVersion).Output()
	if err != nil {
		return nil, fmt.Errorf("kubeadm config images list: %w", err)
	}
	return strings.Fields(string(out)), nil
}

// components maps kubeadm's images to the binaries built for them. bins holds the tools
// by name; proxyBase is the Debian root file system for kube-proxy's image.
func components(images []string, bins map[string]string, proxyBase string) ([]component, error) {
	var out []component
	for _, ref := range images {
		repo, _, ok := strings.Cut(ref[strings.LastIndex(ref, "/")+1:], ":")
		if !ok {
			return nil, fmt.Errorf("kubeadm names the image %q without a tag", ref)
		}
		c := component{tags: []string{ref}}
		switch repo {
		case "kube-apiserver", "kube-controller-manager", "kube-scheduler", "etcd":
			c.binary, c.inImage = bins[repo], "/usr/local/bin/"+repo
		case "kube-proxy":
			c.binary, c.inImage, c.base = bins[repo], "/usr/local/bin/kube-proxy", proxyBase
		case "coredns":
			c.binary, c.inImage, c.entrypoint = bins["coredns"], "/coredns", []string{"/coredns"}
		case "pause":
			c.binary, c.inImage, c.entrypoint = bins["pause"], "/pause", []string{"/pause"}
			// kind's containerd config names its own sandbox image.
			c.tags = append(c.tags, SandboxImage)
		default:
			return nil, fmt.Errorf("kubeadm names the image %q, which the node image does not build", ref)
		}
		if c.binary == "" {
			return nil, fmt.Errorf("no binary built for the image %s", ref)
		}
		out = append(out, c)
	}
	return out, nil
}

// writeComponent writes c as a Docker image archive (what `ctr images import` and
// `docker load` read), tagged with all of c.tags, for this machine's platform.
func writeComponent(c component, file string) error {
	idx, err := c.index()
	if err != nil {
		return err
	}
	img, err := ociimage.ImageForPlatform(idx, v1.Platform{OS: "linux", Architecture: runtime.GOARCH})
	if err != nil {
		return err
	}
	refs := map[name.Reference]v1.Image{}
	for _, t := range c.tags {
		tag, err := name.NewTag(t)
		if err != nil {
			return err
		}
		refs[tag] = img
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	return tarball.MultiRefWriteToFile(file, refs)
}

// index builds c as an image index of this machine's platform.
func (c component) index() (v1.ImageIndex, error) {
	platform := "linux/" + runtime.GOARCH
	spec := ociimage.Spec{
		Platforms:  []string{platform},
		BinaryPath: c.inImage,
		Entrypoint: c.entrypoint,
		User:       c.user,
		Env:        []string{"PATH=" + ociimage.DefaultPATH},
		Labels:     map[string]string{ociimage.LabelSource: ociimage.Source, ociimage.LabelTitle: path.Base(c.inImage)},
		RootFS:     rootfs.FS,
		Dirs:       []ociimage.Dir{{Path: "/tmp", Mode: 0o777 | fs.ModeSticky}},
		Created:    time.Unix(0, 0).UTC(),
		Base:       c.base,
	}
	return ociimage.Build(spec, map[string]string{platform: c.binary})
}

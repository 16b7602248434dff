// Command release publishes a release of the provider from the image layout `go tool task
// image` writes and the binaries of `go tool task cross-build`, without Docker:
//
//   - pushes the multi-platform image to -image-repository, tagged with the version;
//   - writes one install bundle per cluster (service-provider-kro-onboarding.yaml,
//     service-provider-kro-platform.yaml) with the image pinned by digest;
//   - renders the OCM component with the same digest and pushes it below -ocm-repository
//     the way OCM stores component versions in an OCI registry;
//   - writes the binaries, a CycloneDX SBOM of each, release.json and SHA256SUMS.
//
// The registry's password comes from $RELEASE_REGISTRY_PASSWORD, never from the command
// line; -ca-file adds a CA to trust. -push=false writes everything and pushes nothing
// (the digest is the layout's, which is what a push would store).
//
//	go run ./hack/release -version v1.5.0 -image-repository REGISTRY/images/service-provider-kro -ocm-repository REGISTRY [-username USER] [-ca-file CA] [-out bin/release]
package main

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"

	"github.com/openmcp-project/service-provider-kro/config"
	"github.com/openmcp-project/service-provider-kro/hack/image/ociimage"
	"github.com/openmcp-project/service-provider-kro/hack/release/ocm"
)

// PasswordVariable holds the registry's password.
const PasswordVariable = "RELEASE_REGISTRY_PASSWORD"

// imageResource is the OCM resource of the provider's image in ocm/component-constructor.yaml.
const imageResource = "service-provider-kro-image"

// Options say what to release and where.
type Options struct {
	Version         string
	ImageRepository string // e.g. ghcr.io/openmcp-project/images/service-provider-kro
	OCMRepository   string // e.g. ghcr.io/openmcp-project
	Registry        ociimage.RegistryOptions
	Push            bool
	Bin             string // holds <os>-<arch>/service-provider-kro
	Layout          string // the OCI image layout of hack/image
	Constructor     string // ocm/component-constructor.yaml
	Commit          string
	Out             string
}

// Manifest is release.json: what a release published, for scripts and for the tests.
type Manifest struct {
	Version string `json:"version"`
	Commit  string `json:"commit"`
	// Image is repository:tag@digest, as the bundles and the OCM component name it.
	Image     string            `json:"image"`
	Digest    string            `json:"digest"`
	Bundles   map[string]string `json:"bundles"` // by overlay: the file
	Component struct {
		Name       string `json:"name"`
		Version    string `json:"version"`
		Repository string `json:"repository"`
		Digest     string `json:"digest,omitempty"`
	} `json:"component"`
	Pushed bool `json:"pushed"`
}

// Platforms are the platforms of the image and of the released binaries.
var Platforms = []string{"linux/amd64", "linux/arm64"}

func main() {
	var o Options
	var caFile string
	flag.StringVar(&o.Version, "version", "", "the release's version (default: the content of VERSION)")
	flag.StringVar(&o.ImageRepository, "image-repository", ocm.Image, "repository to push the image to")
	flag.StringVar(&o.OCMRepository, "ocm-repository", "ghcr.io/openmcp-project", "OCI registry and path prefix of the OCM repository")
	flag.StringVar(&o.Registry.Username, "username", "", "user for the registries; the password is read from $"+PasswordVariable)
	flag.StringVar(&caFile, "ca-file", "", "PEM file of CAs to trust for the registries, besides the system's")
	flag.BoolVar(&o.Push, "push", true, "push the image and the OCM component; false only writes the files")
	flag.StringVar(&o.Bin, "bin", "bin", "folder holding <os>-<arch>/service-provider-kro (go tool task cross-build)")
	flag.StringVar(&o.Layout, "image", "bin/image", "the image's OCI layout (go tool task image)")
	flag.StringVar(&o.Constructor, "ocm-constructor", "ocm/component-constructor.yaml", "the OCM component constructor")
	flag.StringVar(&o.Commit, "commit", "", "commit of the release (default: git rev-parse HEAD)")
	flag.StringVar(&o.Out, "out", "bin/release", "folder to write the release into (replaced)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	err := func() error {
		o.Registry.Password = os.Getenv(PasswordVariable)
		if caFile != "" {
			pem, err := os.ReadFile(caFile)
			if err != nil {
				return err
			}
			pool, err := x509.SystemCertPool()
			if err != nil {
				pool = x509.NewCertPool()
			}
			if !pool.AppendCertsFromPEM(pem) {
				return fmt.Errorf("%s holds no PEM certificate", caFile)
			}
			o.Registry.RootCAs = pool
		}
		m, err := Release(ctx, o)
		if err != nil {
			return err
		}
		fmt.Printf("released %s: %s\n  bundles and files in %s\n  OCM component %s:%s in %s\n", m.Version, m.Image, o.Out, m.Component.Name, m.Component.Version, m.Component.Repository)
		return nil
	}()
	if err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

// Release publishes the release o describes and returns what it published.
func Release(ctx context.Context, o Options) (*Manifest, error) {
	if err := o.defaults(ctx); err != nil {
		return nil, err
	}
	tmpl, err := os.ReadFile(o.Constructor)
	if err != nil {
		return nil, err
	}
	rendered, err := ocm.Render(tmpl, o.Version, o.Commit) // checks the version and the commit
	if err != nil {
		return nil, err
	}
	if err := os.RemoveAll(o.Out); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return nil, err
	}
	m := &Manifest{Version: o.Version, Commit: o.Commit, Pushed: o.Push, Bundles: map[string]string{}}
	for _, step := range []func(context.Context, Options, *Manifest) error{pushImage, writeBundles} {
		if err := step(ctx, o, m); err != nil {
			return nil, err
		}
	}
	if err := pushComponent(ctx, o, m, rendered); err != nil {
		return nil, err
	}
	if err := writeBinaries(o); err != nil {
		return nil, err
	}
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(o.Out, "release.json"), append(data, '\n'), 0o644); err != nil {
		return nil, err
	}
	return m, writeChecksums(o.Out)
}

// defaults fills in the version from VERSION and the commit from git.
func (o *Options) defaults(ctx context.Context) error {
	if o.Version == "" {
		v, err := os.ReadFile("VERSION")
		if err != nil {
			return fmt.Errorf("no -version and no VERSION file: %w", err)
		}
		o.Version = strings.TrimSpace(string(v))
	}
	if o.Commit == "" {
		head, err := exec.CommandContext(ctx, "git", "rev-parse", "HEAD").Output()
		if err != nil {
			return fmt.Errorf("finding the commit (pass -commit): %w", err)
		}
		o.Commit = strings.TrimSpace(string(head))
	}
	return nil
}

// pushImage pushes the layout's image under the version and records its digest.
func pushImage(ctx context.Context, o Options, m *Manifest) error {
	idx, tag, err := ociimage.ReadLayoutRef(o.Layout)
	if err != nil {
		return err
	}
	if tag != o.Version {
		return fmt.Errorf("the image in %s is tagged %q, not the release's version %q: build it with that version", o.Layout, tag, o.Version)
	}
	digest, err := idx.Digest()
	if err != nil {
		return err
	}
	m.Digest = digest.String()
	m.Image = o.ImageRepository + ":" + o.Version + "@" + m.Digest
	if !o.Push {
		return nil
	}
	pushed, err := ociimage.Push(ctx, idx, o.ImageRepository+":"+o.Version, o.Registry)
	if err != nil {
		return fmt.Errorf("pushing the image: %w", err)
	}
	if pushed != digest {
		return fmt.Errorf("the registry stored the image as %s, the layout has %s", pushed, digest)
	}
	return nil
}

// writeBundles writes one install bundle per cluster with the image pinned by digest.
func writeBundles(_ context.Context, o Options, m *Manifest) error {
	image := config.Image{Repository: o.ImageRepository, Tag: o.Version, Digest: m.Digest}
	for _, overlay := range []string{config.OnboardingOverlay, config.PlatformOverlay} {
		data, err := config.Bundle(overlay, image)
		if err != nil {
			return err
		}
		file := "service-provider-kro-" + overlay + ".yaml"
		if err := os.WriteFile(filepath.Join(o.Out, file), data, 0o644); err != nil {
			return err
		}
		m.Bundles[overlay] = file
	}
	return nil
}

// pushComponent writes the OCM component descriptor naming the pushed image and pushes it.
func pushComponent(ctx context.Context, o Options, m *Manifest, rendered []byte) error {
	descriptor, comp, err := ocm.Descriptor(rendered, imageResource, m.Image, o.OCMRepository)
	if err != nil {
		return err
	}
	m.Component.Name, m.Component.Version, m.Component.Repository = comp.Name, comp.Version, comp.Repository(o.OCMRepository)
	if err := os.WriteFile(filepath.Join(o.Out, ocm.DescriptorFile), descriptor, 0o644); err != nil {
		return err
	}
	if !o.Push {
		return nil
	}
	d, err := ocm.Push(ctx, descriptor, comp, o.OCMRepository, o.Registry)
	if err != nil {
		return fmt.Errorf("pushing the OCM component: %w", err)
	}
	m.Component.Digest = d.String()
	return nil
}

// writeBinaries copies each platform's binary into the release, with its SBOM beside it.
func writeBinaries(o Options) error {
	created, err := ociimage.CreatedFromEnv()
	if err != nil {
		return err
	}
	for _, p := range Platforms {
		src := filepath.Join(o.Bin, strings.ReplaceAll(p, "/", "-"), ociimage.Title)
		name := ociimage.Title + "_" + strings.ReplaceAll(p, "/", "_")
		if err := copyFile(src, filepath.Join(o.Out, name), 0o755); err != nil {
			return err
		}
		sbom, err := SBOM(src, o.Version, p, created)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(o.Out, name+".cdx.json"), sbom, 0o644); err != nil {
			return err
		}
	}
	return nil
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer func() { _ = in.Close() }()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		_ = out.Close()
		return err
	}
	return out.Close()
}

// ChecksumsFile lists the SHA-256 of every other file of the release, as sha256sum does.
const ChecksumsFile = "SHA256SUMS"

func writeChecksums(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var lines []string
	for _, e := range entries {
		if e.IsDir() || e.Name() == ChecksumsFile {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return err
		}
		sum := sha256.Sum256(data)
		lines = append(lines, hex.EncodeToString(sum[:])+"  "+e.Name())
	}
	if len(lines) == 0 {
		return errors.New("the release holds no file")
	}
	sort.Slice(lines, func(i, j int) bool { return lines[i][66:] < lines[j][66:] })
	return os.WriteFile(filepath.Join(dir, ChecksumsFile), []byte(strings.Join(lines, "\n")+"\n"), 0o644)
}

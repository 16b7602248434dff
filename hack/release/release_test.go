package main

import (
	"archive/tar"
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"sigs.k8s.io/yaml"

	"github.com/openmcp-project/service-provider-kro/hack/image/ociimage"
	"github.com/openmcp-project/service-provider-kro/hack/release/ocm"
	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

const testCommit = "0123456789abcdef0123456789abcdef01234567"

// TestRelease publishes a release into a registry that serves TLS with its own CA and asks
// for a password, as a platform team's registry does, and checks each artifact from the
// registry's side: the image by the digest the bundle names, the OCM component by OCM's
// mapping, the SBOM against the binary, the checksums against the files.
func TestRelease(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	reg, err := testenv.StartRegistry(ctx, io.Discard, filepath.Join(dir, "registry"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reg.Stop() })
	const version = "v1.2.3-test.1"
	bin := filepath.Join(dir, "bin")
	layout := filepath.Join(dir, "image")
	buildLayout(t, bin, layout, version)

	auth := ociimage.RegistryOptions{Username: reg.Username, Password: reg.Password, RootCAs: reg.CA.CertPool()}
	o := Options{
		Version: version, ImageRepository: reg.Host + "/images/service-provider-kro", OCMRepository: reg.Host + "/ocm",
		Registry: auth, Push: true, Bin: bin, Layout: layout, Constructor: "../../ocm/component-constructor.yaml",
		Commit: testCommit, Out: filepath.Join(dir, "release"),
	}
	// Without the password the registry refuses the push, and the release says so.
	anonymous := o
	anonymous.Registry = ociimage.RegistryOptions{RootCAs: reg.CA.CertPool()}
	if _, err := Release(ctx, anonymous); err == nil || !strings.Contains(err.Error(), "pushing the image") {
		t.Fatalf("a release without credentials: %v, want a refused push", err)
	}
	m, err := Release(ctx, o)
	if err != nil {
		t.Fatal(err)
	}

	// The image: pushed under the version, the digest the bundle pins, pullable by digest
	// for each platform with the credentials only.
	idx, err := ociimage.PullIndex(ctx, o.ImageRepository+":"+version, auth)
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := idx.Digest(); d.String() != m.Digest {
		t.Errorf("the registry has %s under the version, the release says %s", d, m.Digest)
	}
	platformBundle, err := os.ReadFile(filepath.Join(o.Out, m.Bundles["platform"]))
	if err != nil {
		t.Fatal(err)
	}
	pinned := o.ImageRepository + "@" + m.Digest
	if !strings.Contains(string(platformBundle), "image: "+pinned+"\n") {
		t.Errorf("the platform bundle does not run %s", pinned)
	}
	for _, p := range Platforms {
		if _, err := ociimage.Pull(ctx, pinned, platformOf(p), auth); err != nil {
			t.Errorf("pulling %s for %s: %v", pinned, p, err)
		}
	}
	if _, err := ociimage.PullIndex(ctx, pinned, anonymous.Registry); err == nil {
		t.Error("the image could be pulled without credentials")
	}

	checkComponent(t, ctx, o, m, auth)
	checkSBOM(t, filepath.Join(o.Out, "service-provider-kro_linux_arm64.cdx.json"), version)
	checkSums(t, o.Out, 1+2+2+2+1) // descriptor, two bundles, two binaries, two SBOMs, release.json
}

// buildLayout cross-compiles testdata/hello for each platform and writes the provider's
// image layout of it, as task cross-build and task image do for the provider.
func buildLayout(t *testing.T, bin, layout, version string) {
	t.Helper()
	binaries := map[string]string{}
	for _, p := range Platforms {
		out := filepath.Join(bin, strings.ReplaceAll(p, "/", "-"), ociimage.Title)
		goos, goarch, _ := strings.Cut(p, "/")
		cmd := exec.Command("go", "build", "-trimpath", "-o", out, "./testdata/hello")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+goos, "GOARCH="+goarch)
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build for %s: %v\n%s", p, err, b)
		}
		binaries[p] = out
	}
	idx, err := ociimage.Build(ociimage.ProviderSpec(version, time.Unix(0, 0)), binaries)
	if err != nil {
		t.Fatal(err)
	}
	if err := ociimage.WriteLayout(layout, idx, version); err != nil {
		t.Fatal(err)
	}
}

// checkComponent reads the OCM component back as OCM would: the manifest at
// component-descriptors/<name>:<version>, its config naming the descriptor's layer, the
// descriptor in that layer's tar naming the image by digest.
func checkComponent(t *testing.T, ctx context.Context, o Options, m *Manifest, auth ociimage.RegistryOptions) {
	t.Helper()
	ref, ropts, err := auth.Parse(m.Component.Repository + ":" + m.Component.Version)
	if err != nil {
		t.Fatal(err)
	}
	img, err := remote.Image(ref, append(ropts, remote.WithContext(ctx))...)
	if err != nil {
		t.Fatal(err)
	}
	mf, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	if mf.Config.MediaType != ocm.ConfigMediaType || len(mf.Layers) != 1 || mf.Layers[0].MediaType != ocm.DescriptorMediaType {
		t.Fatalf("the component's manifest: %+v", mf)
	}
	var cfg struct {
		Layer struct {
			Digest string `json:"digest"`
		} `json:"componentDescriptorLayer"`
	}
	raw, err := img.RawConfigFile()
	if err != nil || json.Unmarshal(raw, &cfg) != nil || cfg.Layer.Digest != mf.Layers[0].Digest.String() {
		t.Fatalf("the component's config %s does not name its layer %s: %v", raw, mf.Layers[0].Digest, err)
	}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rc.Close() }()
	tr := tar.NewReader(rc)
	h, err := tr.Next()
	if err != nil || h.Name != ocm.DescriptorFile {
		t.Fatalf("the layer's first file: %v %v", h, err)
	}
	data, err := io.ReadAll(tr)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Meta      struct{ SchemaVersion string } `json:"meta"`
		Component struct {
			Name, Version string
			Resources     []struct {
				Name   string
				Access struct{ ImageReference string } `json:"access"`
			}
		} `json:"component"`
	}
	if err := yaml.Unmarshal(data, &d); err != nil {
		t.Fatal(err)
	}
	if d.Meta.SchemaVersion != "v2" || d.Component.Version != o.Version || len(d.Component.Resources) != 1 ||
		d.Component.Resources[0].Access.ImageReference != m.Image {
		t.Errorf("the pushed descriptor:\n%s\nwant version %s naming %s", data, o.Version, m.Image)
	}
}

func checkSBOM(t *testing.T, file, version string) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var bom struct {
		BOMFormat string `json:"bomFormat"`
		Metadata  struct {
			Component struct{ Name, Version string } `json:"component"`
		} `json:"metadata"`
		Components []struct{ Name, Version, Purl string } `json:"components"`
	}
	if err := json.Unmarshal(data, &bom); err != nil {
		t.Fatal(err)
	}
	if bom.BOMFormat != "CycloneDX" || bom.Metadata.Component.Version != version ||
		bom.Metadata.Component.Name != "github.com/openmcp-project/service-provider-kro" {
		t.Errorf("the SBOM's metadata: %+v", bom)
	}
	found := false
	for _, c := range bom.Components {
		found = found || (c.Name == "sigs.k8s.io/yaml" && strings.HasPrefix(c.Purl, "pkg:golang/sigs.k8s.io/yaml@v"))
	}
	if !found {
		t.Errorf("the SBOM does not list sigs.k8s.io/yaml, which the binary links: %+v", bom.Components)
	}
}

// checkSums checks SHA256SUMS against every file it lists, and that it lists want files.
func checkSums(t *testing.T, dir string, want int) {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, ChecksumsFile))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	n := 0
	for s := bufio.NewScanner(f); s.Scan(); n++ {
		sum, name, ok := strings.Cut(s.Text(), "  ")
		data, err := os.ReadFile(filepath.Join(dir, name))
		got := sha256.Sum256(data)
		if !ok || err != nil || hex.EncodeToString(got[:]) != sum {
			t.Errorf("%s: %q does not match (%v)", ChecksumsFile, s.Text(), err)
		}
	}
	if n != want {
		t.Errorf("%s lists %d files, want %d", ChecksumsFile, n, want)
	}
}

func platformOf(p string) v1.Platform {
	os, arch, _ := strings.Cut(p, "/")
	return v1.Platform{OS: os, Architecture: arch}
}

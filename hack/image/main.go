// Command image builds the provider's multi-platform, non-root image without Docker, from
// the static binaries `go tool task cross-build` writes to <bin>/<os>-<arch>/service-provider-kro,
// and writes it as an OCI image layout (an image index, tagged with the version) to -out.
// Timestamps are SOURCE_DATE_EPOCH or the Unix epoch, so the same binaries give the same
// digest. The Dockerfile builds the same image with Docker (see dockerfile_test.go).
//
//	go run ./hack/image [-bin bin] [-version-file VERSION | -version V] [-out bin/image]
//	go run ./hack/image -verify [-out bin/image]   # check a written layout, build nothing
//
// Push the layout with any OCI tool, e.g. crane push bin/image REF, or with
// ociimage.PushLayout.
package main

import (
	"bytes"
	"debug/elf"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/openmcp-project/service-provider-kro/hack/image/ociimage"
)

func main() {
	bin := flag.String("bin", "bin", "directory holding <os>-<arch>/"+ociimage.Title+" for each platform")
	versionFile := flag.String("version-file", "VERSION", "file holding the version (label and tag)")
	versionFlag := flag.String("version", "", "the version (label and tag); overrides -version-file, e.g. for a release from a tag")
	out := flag.String("out", "bin/image", "OCI image layout directory to write (replaced) or, with -verify, to check")
	verify := flag.Bool("verify", false, "only check the layout in -out: the platforms, the config, the files and that each binary is an ELF file for its platform")
	flag.Parse()
	if err := run(*bin, *versionFile, *versionFlag, *out, *verify); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(bin, versionFile, version, out string, verifyOnly bool) error {
	if version == "" {
		v, err := os.ReadFile(versionFile)
		if err != nil {
			return err
		}
		version = strings.TrimSpace(string(v))
	}
	created, err := ociimage.CreatedFromEnv()
	if err != nil {
		return err
	}
	spec := ociimage.ProviderSpec(version, created)
	if !verifyOnly {
		binaries := map[string]string{}
		for _, p := range spec.Platforms {
			binaries[p] = filepath.Join(bin, strings.ReplaceAll(p, "/", "-"), ociimage.Title)
		}
		idx, err := ociimage.Build(spec, binaries)
		if err != nil {
			return err
		}
		if err := ociimage.WriteLayout(out, idx, version); err != nil {
			return err
		}
	}
	return check(out, spec, version)
}

// check verifies the layout in dir against spec and prints what it holds.
func check(dir string, spec ociimage.Spec, version string) error {
	idx, ref, err := ociimage.ReadLayoutRef(dir)
	if err != nil {
		return err
	}
	if ref != version {
		return fmt.Errorf("%s is tagged %q, want the version %q", dir, ref, version)
	}
	if err := ociimage.Verify(idx, spec); err != nil {
		return fmt.Errorf("%s: %w", dir, err)
	}
	digest, err := idx.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("%s: image index %s, tag %s\n", dir, digest, ref)
	m, err := idx.IndexManifest()
	if err != nil {
		return err
	}
	for _, d := range m.Manifests {
		if err := checkBinary(idx, *d.Platform); err != nil {
			return fmt.Errorf("%s: %s: %w", dir, d.Platform, err)
		}
		fmt.Printf("  %s %s\n", d.Platform, d.Digest)
	}
	return nil
}

// elfMachines are the ELF machines of the architectures the image is built for.
var elfMachines = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

// checkBinary checks that the binary of platform's image is a static ELF executable for it.
func checkBinary(idx v1.ImageIndex, platform v1.Platform) error {
	img, err := ociimage.ImageForPlatform(idx, platform)
	if err != nil {
		return err
	}
	data, _, err := ociimage.ReadFile(img, ociimage.BinaryPath)
	if err != nil {
		return err
	}
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("%s: %w", ociimage.BinaryPath, err)
	}
	want, ok := elfMachines[platform.Architecture]
	if !ok {
		return fmt.Errorf("no ELF machine known for %s", platform.Architecture)
	}
	if f.Machine != want {
		return fmt.Errorf("%s is for %s, want %s", ociimage.BinaryPath, f.Machine, want)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked: the image has no libc", ociimage.BinaryPath)
		}
	}
	return nil
}

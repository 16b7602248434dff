// Package ociimage builds the provider's multi-platform OCI image without Docker: from the
// static binaries `go tool task cross-build` writes, one per platform, and a small root file
// system (package rootfs), it makes an OCI image index with one image per platform. It writes
// the index as an OCI image layout directory and reads it back, pushes it to a registry and
// pulls it again, and reads an image's run configuration and files, as a container runtime
// would (see inspect.go and registry.go).
//
// The image is deterministic: every timestamp is Spec.Created, files belong to root and have
// fixed modes, so two builds from the same binaries have the same digest.
//
// The Dockerfile builds the same image with Docker; the test in hack/image checks that its
// final stage matches ProviderSpec.
package ociimage

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/openmcp-project/service-provider-kro/hack/image/rootfs"
)

// The provider image's fixed parts. The Dockerfile's final stage uses the same values.
const (
	// Title is the image's title label and the binary's name.
	Title = "service-provider-kro"
	// BinaryPath is where the binary lies in the image; it is the whole ENTRYPOINT.
	BinaryPath = "/service-provider-kro"
	// User is the non-root user and group the provider runs as (nonroot in rootfs/etc/passwd).
	User = "65532:65532"
	// Source is the repository the image is built from (label org.opencontainers.image.source).
	Source = "https://github.com/openmcp-project/service-provider-kro"
	// DefaultPATH is the image's PATH, the one Docker sets for images without a base.
	DefaultPATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
)

// OCI annotation and label keys the image uses.
const (
	LabelSource  = "org.opencontainers.image.source"
	LabelVersion = "org.opencontainers.image.version"
	LabelTitle   = "org.opencontainers.image.title"
	// AnnotationRefName names the image index in the layout's index.json (its tag).
	AnnotationRefName = "org.opencontainers.image.ref.name"
)

// Platforms are the platforms the provider image is built for, as os/arch; the Taskfile's
// cross-build builds a binary for each.
var Platforms = []string{"linux/amd64", "linux/arm64"}

// Dir is an empty directory of the image, such as /tmp.
type Dir struct {
	Path string      // absolute path in the image
	Mode fs.FileMode // permission bits and fs.ModeSticky, e.g. 0o777|fs.ModeSticky
}

// Spec describes an image: what its config says and which files it holds besides the binary.
type Spec struct {
	// Platforms to build, as os/arch[/variant]; Build needs a binary for each.
	Platforms []string
	// BinaryPath is the absolute path of the binary in the image (mode 0755).
	BinaryPath string
	// Entrypoint, Cmd, User, Env and WorkingDir go into the image config as they are.
	Entrypoint []string
	Cmd        []string
	User       string
	Env        []string
	WorkingDir string
	// Labels go into the image config and, as annotations, onto the index.
	Labels map[string]string
	// RootFS is copied to / (files 0644, directories 0755, all owned by root).
	RootFS fs.FS
	// Dirs are empty directories added to the root file system.
	Dirs []Dir
	// Created is every timestamp of the image: config, history and file times.
	Created time.Time
	// Base, if set, is a tar file of a root file system (such as a Debian bootstrap) that
	// becomes the image's first layer, below RootFS, Dirs and the binary.
	Base string
}

// ProviderSpec is the spec of the provider image of the given version, with all timestamps
// at created (see CreatedFromEnv): ENTRYPOINT ["/service-provider-kro"] without CMD, so
// that a container's args reach the binary; user 65532:65532; rootfs.FS and a world-writable
// sticky /tmp besides the binary.
func ProviderSpec(version string, created time.Time) Spec {
	return Spec{
		Platforms:  slices.Clone(Platforms),
		BinaryPath: BinaryPath,
		Entrypoint: []string{BinaryPath},
		User:       User,
		Env:        []string{"PATH=" + DefaultPATH},
		Labels: map[string]string{
			LabelSource:  Source,
			LabelVersion: version,
			LabelTitle:   Title,
		},
		RootFS:  rootfs.FS,
		Dirs:    []Dir{{Path: "/tmp", Mode: 0o777 | fs.ModeSticky}},
		Created: created,
	}
}

// CreatedFromEnv returns the time in SOURCE_DATE_EPOCH (seconds since 1970) if it is set,
// else the Unix epoch, so that builds are reproducible either way.
func CreatedFromEnv() (time.Time, error) {
	s := os.Getenv("SOURCE_DATE_EPOCH")
	if s == "" {
		return time.Unix(0, 0).UTC(), nil
	}
	sec, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH %q: %w", s, err)
	}
	return time.Unix(sec, 0).UTC(), nil
}

// Build makes the image index of spec: one image per platform of spec.Platforms, in that
// order, each with two layers (the root file system, the same for every platform, and the
// binary). binaries maps each platform (os/arch as in spec.Platforms) to the binary file to
// put at spec.BinaryPath; the files are read when the layers are first used, and must not
// change until the index is written.
func Build(spec Spec, binaries map[string]string) (v1.ImageIndex, error) {
	if !path.IsAbs(spec.BinaryPath) {
		return nil, fmt.Errorf("binary path %q is not absolute", spec.BinaryPath)
	}
	if len(spec.Platforms) == 0 {
		return nil, errors.New("no platforms")
	}
	for p := range binaries {
		if !slices.Contains(spec.Platforms, p) {
			return nil, fmt.Errorf("a binary for %s, which is not one of the platforms %v", p, spec.Platforms)
		}
	}
	created := spec.Created.UTC().Truncate(time.Second)

	base, err := rootLayer(spec, created)
	if err != nil {
		return nil, err
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, ps := range spec.Platforms {
		platform, err := v1.ParsePlatform(ps)
		if err != nil {
			return nil, err
		}
		bin, ok := binaries[ps]
		if !ok {
			return nil, fmt.Errorf("no binary for %s", ps)
		}
		if _, err := os.Stat(bin); err != nil {
			return nil, fmt.Errorf("binary for %s: %w", ps, err)
		}
		binLayer, err := layer(tarFiles(created, []entry{{name: spec.BinaryPath, mode: 0o755, file: bin}}))
		if err != nil {
			return nil, err
		}
		img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
		img, err = mutate.ConfigFile(img, &v1.ConfigFile{
			Created:      v1.Time{Time: created},
			Architecture: platform.Architecture,
			OS:           platform.OS,
			Variant:      platform.Variant,
			Config: v1.Config{
				Entrypoint: slices.Clone(spec.Entrypoint),
				Cmd:        slices.Clone(spec.Cmd),
				User:       spec.User,
				Env:        slices.Clone(spec.Env),
				WorkingDir: spec.WorkingDir,
				Labels:     spec.Labels,
			},
			RootFS: v1.RootFS{Type: "layers"},
		})
		if err != nil {
			return nil, err
		}
		if spec.Base != "" {
			under, err := tarball.LayerFromFile(spec.Base, tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
			if err != nil {
				return nil, err
			}
			if img, err = mutate.Append(img, mutate.Addendum{Layer: under, History: v1.History{Created: v1.Time{Time: created}, CreatedBy: "base " + filepath.Base(spec.Base)}}); err != nil {
				return nil, err
			}
		}
		img, err = mutate.Append(img,
			mutate.Addendum{Layer: base, History: v1.History{Created: v1.Time{Time: created}, CreatedBy: "root file system (hack/image/rootfs)"}},
			mutate.Addendum{Layer: binLayer, History: v1.History{Created: v1.Time{Time: created}, CreatedBy: "binary " + spec.BinaryPath}},
		)
		if err != nil {
			return nil, err
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{Platform: platform},
		})
	}
	if len(spec.Labels) > 0 {
		idx = mutate.Annotations(idx, spec.Labels).(v1.ImageIndex)
	}
	return idx, nil
}

// WriteLayout writes idx as an OCI image layout into dir: index.json names idx (annotated
// with org.opencontainers.image.ref.name refName unless that is empty), blobs/ holds the
// index, the manifests, configs and layers. A dir that exists must be an OCI layout (it
// holds oci-layout) or empty, and is replaced.
func WriteLayout(dir string, idx v1.ImageIndex, refName string) error {
	if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
		if _, err := os.Stat(path.Join(dir, "oci-layout")); err != nil {
			return fmt.Errorf("%s exists and is no OCI image layout: not replacing it", dir)
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	var opts []layout.Option
	if refName != "" {
		opts = append(opts, layout.WithAnnotations(map[string]string{AnnotationRefName: refName}))
	}
	return p.AppendIndex(idx, opts...)
}

// ReadLayout reads the image index that WriteLayout wrote into dir: the one image index
// index.json names.
func ReadLayout(dir string) (v1.ImageIndex, error) {
	idx, _, err := ReadLayoutRef(dir)
	return idx, err
}

// ReadLayoutRef is ReadLayout that also returns the index's ref name ("" if it has none).
func ReadLayoutRef(dir string) (v1.ImageIndex, string, error) {
	p, err := layout.FromPath(dir)
	if err != nil {
		return nil, "", err
	}
	top, err := p.ImageIndex()
	if err != nil {
		return nil, "", err
	}
	m, err := top.IndexManifest()
	if err != nil {
		return nil, "", err
	}
	if len(m.Manifests) != 1 || !m.Manifests[0].MediaType.IsIndex() {
		return nil, "", fmt.Errorf("%s/index.json names %d manifests, want exactly one image index", dir, len(m.Manifests))
	}
	idx, err := top.ImageIndex(m.Manifests[0].Digest)
	if err != nil {
		return nil, "", err
	}
	return idx, m.Manifests[0].Annotations[AnnotationRefName], nil
}

// Verify checks that idx is an image index made by Build from spec: one image per platform
// in spec.Platforms order, each with the spec's config, the binary at spec.BinaryPath (a
// regular file, mode 0755), every file of spec.RootFS with its content and every dir of
// spec.Dirs with its mode. It does not look at what the binaries are.
func Verify(idx v1.ImageIndex, spec Spec) error {
	m, err := idx.IndexManifest()
	if err != nil {
		return err
	}
	if m.MediaType != types.OCIImageIndex {
		return fmt.Errorf("index media type %s, want %s", m.MediaType, types.OCIImageIndex)
	}
	var got []string
	for _, d := range m.Manifests {
		if d.Platform == nil {
			return fmt.Errorf("manifest %s has no platform", d.Digest)
		}
		got = append(got, d.Platform.String())
	}
	if !slices.Equal(got, spec.Platforms) {
		return fmt.Errorf("platforms %v, want %v", got, spec.Platforms)
	}
	want := RunConfig{Entrypoint: spec.Entrypoint, Cmd: spec.Cmd, User: spec.User, Env: spec.Env, WorkingDir: spec.WorkingDir, Labels: spec.Labels}
	for _, d := range m.Manifests {
		if err := verifyImage(idx, *d.Platform, spec, want); err != nil {
			return fmt.Errorf("%s: %w", d.Platform, err)
		}
	}
	return nil
}

func verifyImage(idx v1.ImageIndex, platform v1.Platform, spec Spec, want RunConfig) error {
	img, err := ImageForPlatform(idx, platform)
	if err != nil {
		return err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	if cf.OS != platform.OS || cf.Architecture != platform.Architecture || cf.Variant != platform.Variant {
		return fmt.Errorf("config is for %s/%s/%s", cf.OS, cf.Architecture, cf.Variant)
	}
	rc, err := ReadRunConfig(img)
	if err != nil {
		return err
	}
	if !rc.Equal(want) {
		return fmt.Errorf("config %+v, want %+v", rc, want)
	}
	return verifyFiles(img, spec)
}

// verifyFiles checks img's binary, root file system and directories against spec, in one
// pass over its layers.
func verifyFiles(img v1.Image, spec Spec) error {
	rootFiles := map[string][]byte{}
	if spec.RootFS != nil {
		err := fs.WalkDir(spec.RootFS, ".", func(p string, de fs.DirEntry, err error) error {
			if err != nil || de.IsDir() {
				return err
			}
			rootFiles["/"+p], err = fs.ReadFile(spec.RootFS, p)
			return err
		})
		if err != nil {
			return err
		}
	}
	modes := map[string]fs.FileMode{}
	err := walk(img, func(hdr *tar.Header, r io.Reader) (bool, error) {
		p := "/" + strings.TrimSuffix(path.Clean(hdr.Name), "/")
		modes[p] = hdr.FileInfo().Mode()
		if want, ok := rootFiles[p]; ok {
			data, err := io.ReadAll(r)
			if err != nil {
				return true, err
			}
			if !bytes.Equal(data, want) || modes[p] != 0o644 {
				return true, fmt.Errorf("%s (mode %v) differs from the root file system's", p, modes[p])
			}
		}
		return false, nil
	})
	if err != nil {
		return err
	}
	for p := range rootFiles {
		if _, ok := modes[p]; !ok {
			return fmt.Errorf("%s of the root file system is missing", p)
		}
	}
	if m, ok := modes[spec.BinaryPath]; !ok || m != 0o755 {
		return fmt.Errorf("binary %s: mode %v (there: %t), want a regular file with mode 0755", spec.BinaryPath, m, ok)
	}
	for _, d := range spec.Dirs {
		if m := modes[path.Clean(d.Path)]; m != d.Mode|fs.ModeDir {
			return fmt.Errorf("directory %s: mode %v, want %v", d.Path, m, d.Mode|fs.ModeDir)
		}
	}
	return nil
}

// entry is a file or directory of a layer.
type entry struct {
	name string      // absolute path in the image
	mode fs.FileMode // permission bits, fs.ModeSticky and fs.ModeDir
	data []byte      // content of a file, unless file is set
	file string      // file on disk with the content
}

// rootLayer is the layer of spec.RootFS and spec.Dirs.
func rootLayer(spec Spec, created time.Time) (v1.Layer, error) {
	var entries []entry
	if spec.RootFS != nil {
		err := fs.WalkDir(spec.RootFS, ".", func(p string, d fs.DirEntry, err error) error {
			if err != nil || p == "." {
				return err
			}
			if d.IsDir() {
				entries = append(entries, entry{name: "/" + p, mode: fs.ModeDir | 0o755})
				return nil
			}
			if !d.Type().IsRegular() {
				return fmt.Errorf("root file system: %s is not a regular file", p)
			}
			data, err := fs.ReadFile(spec.RootFS, p)
			entries = append(entries, entry{name: "/" + p, mode: 0o644, data: data})
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	for _, d := range spec.Dirs {
		if !path.IsAbs(d.Path) {
			return nil, fmt.Errorf("directory %q is not absolute", d.Path)
		}
		entries = append(entries, entry{name: path.Clean(d.Path), mode: fs.ModeDir | d.Mode})
	}
	return layer(tarFiles(created, entries))
}

// tarFiles returns what writes entries, their missing parent directories (0755) added and
// all sorted by path, into a tar stream.
func tarFiles(created time.Time, entries []entry) func(*tar.Writer) error {
	have := map[string]bool{}
	for _, e := range entries {
		have[path.Clean(e.name)] = true
	}
	for _, e := range slices.Clone(entries) {
		for dir := path.Dir(path.Clean(e.name)); dir != "/" && !have[dir]; dir = path.Dir(dir) {
			have[dir] = true
			entries = append(entries, entry{name: dir, mode: fs.ModeDir | 0o755})
		}
	}
	sort.Slice(entries, func(i, j int) bool { return path.Clean(entries[i].name) < path.Clean(entries[j].name) })
	return func(tw *tar.Writer) error {
		for _, e := range entries {
			if err := writeEntry(tw, created, e); err != nil {
				return err
			}
		}
		return nil
	}
}

func writeEntry(tw *tar.Writer, created time.Time, e entry) error {
	name := strings.TrimPrefix(path.Clean(e.name), "/")
	mode := int64(e.mode.Perm())
	if e.mode&fs.ModeSticky != 0 {
		mode |= 0o1000
	}
	hdr := &tar.Header{Name: name, Mode: mode, ModTime: created, Format: tar.FormatPAX}
	if e.mode.IsDir() {
		hdr.Typeflag = tar.TypeDir
		hdr.Name += "/"
		return tw.WriteHeader(hdr)
	}
	hdr.Typeflag = tar.TypeReg
	if e.file == "" {
		hdr.Size = int64(len(e.data))
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		_, err := tw.Write(e.data)
		return err
	}
	f, err := os.Open(e.file)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", e.file)
	}
	hdr.Size = st.Size()
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	n, err := io.Copy(tw, f)
	if err == nil && n != hdr.Size {
		err = fmt.Errorf("%s changed while it was read", e.file)
	}
	return err
}

// layer is a gzip-compressed OCI layer of the tar stream write writes, compressed once.
func layer(write func(*tar.Writer) error) (v1.Layer, error) {
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		pr, pw := io.Pipe()
		go func() {
			tw := tar.NewWriter(pw)
			err := write(tw)
			if err == nil {
				err = tw.Close()
			}
			pw.CloseWithError(err)
		}()
		return pr, nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
}

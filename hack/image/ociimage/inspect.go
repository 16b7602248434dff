package ociimage

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// RunConfig is what an image's config tells a container runtime about running it.
type RunConfig struct {
	Entrypoint []string
	Cmd        []string
	User       string // "uid:gid", "uid", a name or "" (root)
	Env        []string
	WorkingDir string // "" means /
	Labels     map[string]string
}

// ReadRunConfig returns the run configuration of img's config.
func ReadRunConfig(img v1.Image) (RunConfig, error) {
	cf, err := img.ConfigFile()
	if err != nil {
		return RunConfig{}, err
	}
	c := cf.Config
	return RunConfig{Entrypoint: c.Entrypoint, Cmd: c.Cmd, User: c.User, Env: c.Env, WorkingDir: c.WorkingDir, Labels: c.Labels}, nil
}

// Equal tells whether c and o are the same, nil and empty slices and maps alike.
func (c RunConfig) Equal(o RunConfig) bool {
	return slices.Equal(c.Entrypoint, o.Entrypoint) && slices.Equal(c.Cmd, o.Cmd) && c.User == o.User &&
		slices.Equal(c.Env, o.Env) && c.WorkingDir == o.WorkingDir && maps.Equal(c.Labels, o.Labels)
}

// Argv is the command line a container of this image runs, given the container's command
// and args as in a Kubernetes Pod (without $(VAR) expansion): the command replaces the
// ENTRYPOINT and drops the CMD; args replace the CMD.
func (c RunConfig) Argv(command, args []string) []string {
	argv := slices.Clone(c.Entrypoint)
	if len(command) > 0 {
		argv = slices.Clone(command)
	}
	switch {
	case len(args) > 0:
		return append(argv, args...)
	case len(command) == 0:
		return append(argv, c.Cmd...)
	}
	return argv
}

// UIDGID returns the numeric user and group of User ("uid:gid" or "uid", whose group is
// then 0; "" is root). Names are not looked up: they give an error.
func (c RunConfig) UIDGID() (uid, gid int, err error) {
	if c.User == "" {
		return 0, 0, nil
	}
	u, g, hasGroup := strings.Cut(c.User, ":")
	if uid, err = strconv.Atoi(u); err != nil {
		return 0, 0, fmt.Errorf("user %q is not numeric", c.User)
	}
	if hasGroup {
		if gid, err = strconv.Atoi(g); err != nil {
			return 0, 0, fmt.Errorf("group in %q is not numeric", c.User)
		}
	}
	return uid, gid, nil
}

// ImageForPlatform returns the image of idx for platform (os, architecture and, when
// platform names one, variant).
func ImageForPlatform(idx v1.ImageIndex, platform v1.Platform) (v1.Image, error) {
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	for _, d := range m.Manifests {
		if d.Platform != nil && d.Platform.Satisfies(platform) && d.MediaType.IsImage() {
			return idx.Image(d.Digest)
		}
	}
	return nil, fmt.Errorf("no image for %s in the index", platform)
}

// File is an entry of an image's file system.
type File struct {
	Path     string      // absolute
	Mode     fs.FileMode // permission bits, setuid/setgid/sticky, and the type (fs.ModeDir, fs.ModeSymlink)
	UID, GID int
	Size     int64
	Linkname string // target of a symlink or hard link
}

// Files lists the file system of img, its layers applied in order (whiteouts remove
// files), sorted by path.
func Files(img v1.Image) ([]File, error) {
	var files []File
	err := walk(img, func(hdr *tar.Header, _ io.Reader) (bool, error) {
		files = append(files, File{
			Path: "/" + strings.TrimSuffix(path.Clean(hdr.Name), "/"), Mode: hdr.FileInfo().Mode(),
			UID: hdr.Uid, GID: hdr.Gid, Size: hdr.Size, Linkname: hdr.Linkname,
		})
		return false, nil
	})
	slices.SortFunc(files, func(a, b File) int { return strings.Compare(a.Path, b.Path) })
	return files, err
}

// ErrNotExist is returned (wrapped) when an image lacks the file asked for.
var ErrNotExist = fs.ErrNotExist

// ReadFile returns the content and permission bits of the regular file at the absolute
// path name in img's file system (layers applied in order). Symlinks are not followed.
func ReadFile(img v1.Image, name string) ([]byte, fs.FileMode, error) {
	var data []byte
	var mode fs.FileMode
	err := openFile(img, name, func(hdr *tar.Header, r io.Reader) error {
		var err error
		data, err = io.ReadAll(r)
		mode = hdr.FileInfo().Mode().Perm()
		return err
	})
	return data, mode, err
}

// ExtractFile writes the regular file at the absolute path name in img's file system to
// dst on disk, with the file's permission bits (an executable stays executable). dst is
// written through a temporary file beside it and renamed, so it is never half there.
func ExtractFile(img v1.Image, name, dst string) error {
	return openFile(img, name, func(hdr *tar.Header, r io.Reader) (err error) {
		tmp, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".*")
		if err != nil {
			return err
		}
		defer func() {
			if err != nil {
				tmp.Close()
				os.Remove(tmp.Name())
			}
		}()
		if _, err = io.Copy(tmp, r); err != nil {
			return err
		}
		if err = tmp.Chmod(hdr.FileInfo().Mode().Perm()); err != nil {
			return err
		}
		if err = tmp.Close(); err != nil {
			return err
		}
		return os.Rename(tmp.Name(), dst)
	})
}

// openFile calls fn with the regular file at name in img.
func openFile(img v1.Image, name string, fn func(*tar.Header, io.Reader) error) error {
	if !path.IsAbs(name) {
		return fmt.Errorf("%q is not an absolute path", name)
	}
	want := strings.TrimPrefix(path.Clean(name), "/")
	found := false
	err := walk(img, func(hdr *tar.Header, r io.Reader) (bool, error) {
		if strings.TrimSuffix(path.Clean(hdr.Name), "/") != want {
			return false, nil
		}
		found = true
		if hdr.Typeflag != tar.TypeReg {
			return true, fmt.Errorf("%s is no regular file in the image (tar type %q)", name, hdr.Typeflag)
		}
		return true, fn(hdr, r)
	})
	if err == nil && !found {
		err = fmt.Errorf("%s: %w in the image", name, ErrNotExist)
	}
	return err
}

// walk calls fn for each entry of img's flattened file system until fn returns true.
func walk(img v1.Image, fn func(*tar.Header, io.Reader) (stop bool, err error)) error {
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if path.Clean(hdr.Name) == "." {
			continue
		}
		stop, err := fn(hdr, tr)
		if err != nil {
			return err
		}
		if stop {
			return nil
		}
	}
}

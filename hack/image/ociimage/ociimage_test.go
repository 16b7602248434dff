package ociimage

import (
	"context"
	"crypto/x509"
	"errors"
	"io"
	"io/fs"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// fakeBinaries writes a small fake "binary" per platform into a temp dir.
func fakeBinaries(t *testing.T) map[string]string {
	t.Helper()
	dir := t.TempDir()
	bins := map[string]string{}
	for _, p := range Platforms {
		f := filepath.Join(dir, strings.ReplaceAll(p, "/", "-"))
		if err := os.WriteFile(f, []byte("\x7fELF fake binary for "+p), 0o600); err != nil {
			t.Fatal(err)
		}
		bins[p] = f
	}
	return bins
}

func buildLayout(t *testing.T, spec Spec, bins map[string]string) (string, v1.Hash) {
	t.Helper()
	idx, err := Build(spec, bins)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "image")
	if err := WriteLayout(dir, idx, "v1.2.3"); err != nil {
		t.Fatal(err)
	}
	d, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return dir, d
}

func TestBuildWriteReadLayout(t *testing.T) {
	bins := fakeBinaries(t)
	spec := ProviderSpec("v1.2.3", time.Unix(0, 0))
	dir, digest := buildLayout(t, spec, bins)

	idx, ref, err := ReadLayoutRef(dir)
	if err != nil {
		t.Fatal(err)
	}
	if ref != "v1.2.3" {
		t.Errorf("ref name %q, want v1.2.3", ref)
	}
	if d, _ := idx.Digest(); d != digest {
		t.Errorf("digest read back %s, built %s", d, digest)
	}
	if err := Verify(idx, spec); err != nil {
		t.Errorf("Verify: %v", err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if m.MediaType != types.OCIImageIndex || len(m.Manifests) != 2 {
		t.Fatalf("index %s with %d manifests, want an OCI index with 2", m.MediaType, len(m.Manifests))
	}
	if m.Annotations[LabelVersion] != "v1.2.3" || m.Annotations[LabelSource] != Source {
		t.Errorf("index annotations %v", m.Annotations)
	}
	for i, want := range []v1.Platform{{OS: "linux", Architecture: "amd64"}, {OS: "linux", Architecture: "arm64"}} {
		d := m.Manifests[i]
		if d.Platform == nil || !d.Platform.Equals(want) || d.MediaType != types.OCIManifestSchema1 {
			t.Fatalf("manifest %d: %s for %v, want an OCI manifest for %v", i, d.MediaType, d.Platform, want)
		}
		img, err := ImageForPlatform(idx, want)
		if err != nil {
			t.Fatal(err)
		}
		checkConfig(t, img, want)
		checkFiles(t, img, want, bins[want.String()])
	}

	// The same inputs give the same digest; other content or another time a different one.
	if _, again := buildLayout(t, spec, bins); again != digest {
		t.Errorf("a second build has digest %s, the first %s", again, digest)
	}
	later := spec
	later.Created = time.Unix(1700000000, 0)
	if _, d := buildLayout(t, later, bins); d == digest {
		t.Error("another Created gives the same digest")
	}
	if err := os.WriteFile(bins["linux/arm64"], []byte("other"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, d := buildLayout(t, spec, bins); d == digest {
		t.Error("another binary gives the same digest")
	}
}

func TestVerifyFails(t *testing.T) {
	bins := fakeBinaries(t)
	spec := ProviderSpec("v1.2.3", time.Unix(0, 0))
	for name, change := range map[string]func(*Spec){
		"entrypoint": func(s *Spec) { s.Entrypoint = []string{"/bin/sh"} },
		"cmd":        func(s *Spec) { s.Cmd = []string{"run"} },
		"user":       func(s *Spec) { s.User = "0" },
		"platforms":  func(s *Spec) { s.Platforms = []string{"linux/arm64", "linux/amd64"} },
		"binary":     func(s *Spec) { s.BinaryPath = "/manager" },
		"labels":     func(s *Spec) { s.Labels = map[string]string{LabelVersion: "v9"} },
		"no tmp":     func(s *Spec) { s.Dirs = nil },
		"tmp mode":   func(s *Spec) { s.Dirs = []Dir{{Path: "/tmp", Mode: 0o777}} },
		"rootfs":     func(s *Spec) { s.RootFS = fstest.MapFS{"etc/passwd": {Data: []byte("root:x:0:0::/:/bin/sh\n")}} },
	} {
		other := spec
		other.Platforms = slices.Clone(spec.Platforms)
		change(&other)
		idx, err := Build(other, bins)
		if err != nil {
			t.Fatal(name, err)
		}
		if err := Verify(idx, spec); err == nil {
			t.Errorf("%s: Verify accepted an image built from another spec", name)
		}
	}
	if _, err := Build(spec, map[string]string{"linux/amd64": bins["linux/amd64"]}); err == nil {
		t.Error("Build without an arm64 binary succeeded")
	}
	notLayout := t.TempDir()
	if err := os.WriteFile(filepath.Join(notLayout, "keep"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := WriteLayout(notLayout, nil, ""); err == nil {
		t.Error("WriteLayout replaced a directory that is no OCI layout")
	}
	if _, err := os.Stat(filepath.Join(notLayout, "keep")); err != nil {
		t.Errorf("WriteLayout removed a file of a directory that is no OCI layout: %v", err)
	}
}

func TestArgv(t *testing.T) {
	c := RunConfig{Entrypoint: []string{"/e"}, Cmd: []string{"c"}}
	for _, tc := range []struct{ command, args, want []string }{
		{nil, nil, []string{"/e", "c"}},
		{nil, []string{"a"}, []string{"/e", "a"}},
		{[]string{"/x"}, nil, []string{"/x"}},
		{[]string{"/x"}, []string{"a"}, []string{"/x", "a"}},
	} {
		if got := c.Argv(tc.command, tc.args); !slices.Equal(got, tc.want) {
			t.Errorf("Argv(%q, %q) = %q, want %q", tc.command, tc.args, got, tc.want)
		}
	}
}

// TestPushPull pushes to an in-process TLS registry with basic auth and pulls each platform.
func TestPushPull(t *testing.T) {
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	const user, password = "pusher", "s3cret"
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != user || p != password {
			w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		reg.ServeHTTP(w, r)
	}))
	defer srv.Close()
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	ref := strings.TrimPrefix(srv.URL, "https://") + "/openmcp/service-provider-kro:v1.2.3"
	ctx := context.Background()

	dir, digest := buildLayout(t, ProviderSpec("v1.2.3", time.Unix(0, 0)), fakeBinaries(t))
	opts := RegistryOptions{Username: user, Password: password, RootCAs: pool}
	if _, err := PushLayout(ctx, dir, ref, RegistryOptions{Username: user, Password: "wrong", RootCAs: pool}); err == nil {
		t.Fatal("push with a wrong password succeeded")
	}
	if _, err := PushLayout(ctx, dir, ref, RegistryOptions{Username: user, Password: password}); err == nil {
		t.Fatal("push without the registry's CA succeeded")
	}
	pushed, err := PushLayout(ctx, dir, ref, opts)
	if err != nil {
		t.Fatal(err)
	}
	if pushed != digest {
		t.Errorf("pushed %s, built %s", pushed, digest)
	}
	idx, err := PullIndex(ctx, ref, opts)
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := idx.Digest(); d != digest {
		t.Errorf("pulled index %s, pushed %s", d, digest)
	}
	for _, p := range []v1.Platform{{OS: "linux", Architecture: "arm64"}, {OS: "linux", Architecture: "amd64"}} {
		img, err := Pull(ctx, ref, p, opts)
		if err != nil {
			t.Fatal(err)
		}
		data, _, err := ReadFile(img, BinaryPath)
		if err != nil {
			t.Fatal(err)
		}
		if want := "\x7fELF fake binary for " + p.String(); string(data) != want {
			t.Errorf("%v: pulled binary %q, want %q", p, data, want)
		}
	}
	if _, err := Pull(ctx, ref, v1.Platform{OS: "linux", Architecture: "s390x"}, opts); err == nil {
		t.Error("pulled an image for a platform the index lacks")
	}
}

func TestUIDGID(t *testing.T) {
	for user, want := range map[string][2]int{"": {0, 0}, "1000": {1000, 0}, "65532:65532": {65532, 65532}} {
		uid, gid, err := RunConfig{User: user}.UIDGID()
		if err != nil || uid != want[0] || gid != want[1] {
			t.Errorf("UIDGID(%q) = %d, %d, %v, want %v", user, uid, gid, err, want)
		}
	}
	for _, user := range []string{"nonroot", "1000:staff"} {
		if _, _, err := (RunConfig{User: user}).UIDGID(); err == nil {
			t.Errorf("UIDGID(%q) succeeded", user)
		}
	}
}

// checkConfig checks the config of the provider image for platform want.
func checkConfig(t *testing.T, img v1.Image, want v1.Platform) {
	t.Helper()
	rc, err := ReadRunConfig(img)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rc.Entrypoint, []string{"/service-provider-kro"}) || len(rc.Cmd) != 0 || rc.User != "65532:65532" {
		t.Errorf("%v: config %+v, want ENTRYPOINT [/service-provider-kro], no CMD, user 65532:65532", want, rc)
	}
	if rc.Labels[LabelTitle] != "service-provider-kro" || rc.Labels[LabelVersion] != "v1.2.3" || rc.Labels[LabelSource] != Source {
		t.Errorf("%v: labels %v", want, rc.Labels)
	}
	if uid, gid, err := rc.UIDGID(); err != nil || uid != 65532 || gid != 65532 {
		t.Errorf("%v: UIDGID() = %d, %d, %v", want, uid, gid, err)
	}
	if got := rc.Argv(nil, []string{"init", "--environment=x"}); !slices.Equal(got, []string{"/service-provider-kro", "init", "--environment=x"}) {
		t.Errorf("%v: a container's args give %q", want, got)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != want.OS || cf.Architecture != want.Architecture || !cf.Created.Equal(time.Unix(0, 0)) {
		t.Errorf("%v: config for %s/%s created %v", want, cf.OS, cf.Architecture, cf.Created)
	}
}

// checkFiles checks the files of the provider image for platform want, built from bin.
func checkFiles(t *testing.T, img v1.Image, want v1.Platform, bin string) {
	t.Helper()
	data, mode, err := ReadFile(img, "/service-provider-kro")
	if err != nil {
		t.Fatal(err)
	}
	wantData, _ := os.ReadFile(bin)
	if string(data) != string(wantData) || mode != 0o755 {
		t.Errorf("%v: /service-provider-kro is %q mode %v, want %q mode 0755", want, data, mode, wantData)
	}
	dst := filepath.Join(t.TempDir(), "provider")
	if err := ExtractFile(img, "/service-provider-kro", dst); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(dst); err != nil || st.Mode().Perm() != 0o755 || st.Size() != int64(len(wantData)) {
		t.Errorf("%v: extracted binary: %v %v", want, st, err)
	}
	passwd, _, err := ReadFile(img, "/etc/passwd")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(passwd), "\nnonroot:x:65532:65532:") {
		t.Errorf("%v: /etc/passwd names no nonroot 65532:\n%s", want, passwd)
	}
	group, _, err := ReadFile(img, "/etc/group")
	if err != nil || !strings.Contains(string(group), "\nnonroot:x:65532:") {
		t.Errorf("%v: /etc/group names no nonroot 65532 (%v):\n%s", want, err, group)
	}
	files, err := Files(img)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, f := range files {
		paths = append(paths, f.Path)
		if f.UID != 0 || f.GID != 0 {
			t.Errorf("%v: %s is owned by %d:%d, want root", want, f.Path, f.UID, f.GID)
		}
		if f.Path == "/tmp" && f.Mode != fs.ModeDir|fs.ModeSticky|0o777 {
			t.Errorf("%v: /tmp has mode %v, want drwxrwxrwt", want, f.Mode)
		}
	}
	if wantPaths := []string{"/etc", "/etc/group", "/etc/passwd", "/service-provider-kro", "/tmp"}; !slices.Equal(paths, wantPaths) {
		t.Errorf("%v: files %v, want %v", want, paths, wantPaths)
	}
	if _, _, err := ReadFile(img, "/bin/sh"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%v: /bin/sh: %v, want not found", want, err)
	}
}

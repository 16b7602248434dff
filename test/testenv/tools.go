// Package testenv gives tests real clusters: it provides the binaries (kube-apiserver,
// etcd, and later Flux and friends) and starts several API servers at once.
//
// Binaries come from, in order: KUBEBUILDER_ASSETS; binaries this package built before
// (cached under .cache/ at the repository root, keyed by a hash of the wrapper module
// that builds them); setup-envtest, where it can download; and finally a build from the
// Go module proxy through the wrapper modules under hack/tools/.
package testenv

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// ModulePath is the main module's path; RepoRoot looks for its go.mod.
const ModulePath = "github.com/openmcp-project/service-provider-kro"

// KubernetesVersion is the kube-apiserver release the tests run against. Its minor
// matches the k8s.io client libraries in go.mod.
const KubernetesVersion = "v1.36.3"

// Tool is a command built from a wrapper module under hack/tools.
type Tool struct {
	// Name of the binary.
	Name string
	// ModuleDir is the wrapper module, relative to the repository root.
	ModuleDir string
	// Package is the main package to build.
	Package string
	// LDFlags are passed to the linker.
	LDFlags string
}

// KubeAPIServer is kube-apiserver at KubernetesVersion, with its version stamped so
// clients see the real version instead of v0.0.0.
var KubeAPIServer = Tool{
	Name:      "kube-apiserver",
	ModuleDir: "hack/tools/kube",
	Package:   "k8s.io/kubernetes/cmd/kube-apiserver",
	LDFlags:   versionLDFlags(KubernetesVersion),
}

// Etcd is the etcd server kube-apiserver of KubernetesVersion is tested with.
var Etcd = Tool{Name: "etcd", ModuleDir: "hack/tools/etcd", Package: "go.etcd.io/etcd/server/v3"}

func versionLDFlags(v string) string {
	major, minor, _ := strings.Cut(strings.TrimPrefix(v, "v"), ".")
	minor, _, _ = strings.Cut(minor, ".")
	pkg := "k8s.io/component-base/version"
	return strings.Join([]string{
		"-X " + pkg + ".gitVersion=" + v,
		"-X " + pkg + ".gitMajor=" + major,
		"-X " + pkg + ".gitMinor=" + minor,
		"-X " + pkg + ".gitTreeState=clean",
	}, " ")
}

// RepoRoot finds the repository root from the working directory upwards.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.HasPrefix(string(data), "module "+ModulePath+"\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod of %s above the working directory", ModulePath)
		}
		dir = parent
	}
}

// CacheDir is the git-ignored folder where built binaries are kept.
func CacheDir() (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, ".cache"), nil
}

// key hashes everything that decides the binary: the wrapper module's go.mod, go.sum and Go
// files (a few wrappers hold a main package), the package, the flags, the platform and the
// Go version. Every tool is built static (CGO_ENABLED=0), so that the binaries the tests run
// as processes also go into the kind node's images (test/kind) without a libc.
func (t Tool) key(root string) (string, error) {
	h := sha256.New()
	files, err := filepath.Glob(filepath.Join(root, t.ModuleDir, "*.go"))
	if err != nil {
		return "", err
	}
	for _, f := range append([]string{filepath.Join(root, t.ModuleDir, "go.mod"), filepath.Join(root, t.ModuleDir, "go.sum")}, files...) {
		data, err := os.ReadFile(f)
		noSum := errors.Is(err, os.ErrNotExist) && filepath.Base(f) == "go.sum" // a module without dependencies
		if err != nil && !noSum {
			return "", fmt.Errorf("reading wrapper module of %s: %w", t.Name, err)
		}
		fmt.Fprintf(h, "%s %d\n", filepath.Base(f), len(data))
		h.Write(data)
	}
	fmt.Fprintln(h, t.Package, t.LDFlags, "CGO_ENABLED=0", runtime.GOOS, runtime.GOARCH, runtime.Version())
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// Path returns the tool's binary, building it once; later calls find it in the cache.
// Concurrent callers (parallel test packages) wait for one build through a file lock.
func (t Tool) Path(ctx context.Context, log io.Writer) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	key, err := t.key(root)
	if err != nil {
		return "", err
	}
	dir := filepath.Join(root, ".cache", "bin", t.Name+"-"+key)
	bin := filepath.Join(dir, t.Name)
	if isExecutable(bin) {
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	unlock, err := lockFile(filepath.Join(dir, ".lock"))
	if err != nil {
		return "", err
	}
	defer unlock()
	if isExecutable(bin) { // built by whoever held the lock before us
		return bin, nil
	}

	start := time.Now()
	fmt.Fprintf(log, "testenv: building %s from %s (once; cached in %s)\n", t.Name, t.ModuleDir, dir)
	tmp := bin + ".tmp"
	cmd := exec.CommandContext(ctx, "go", "build", "-o", tmp, "-ldflags", t.LDFlags, t.Package)
	cmd.Dir = filepath.Join(root, t.ModuleDir)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("building %s: %w\n%s", t.Name, err, out)
	}
	if err := os.Rename(tmp, bin); err != nil {
		return "", err
	}
	fmt.Fprintf(log, "testenv: built %s in %s\n", t.Name, time.Since(start).Round(time.Second))
	return bin, nil
}

func isExecutable(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}

func lockFile(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := lockExclusive(f); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	return func() {
		_ = unlock(f)
		_ = f.Close()
	}, nil
}

// EnvtestAssets returns a folder holding kube-apiserver and etcd, the layout envtest
// expects in KUBEBUILDER_ASSETS.
func EnvtestAssets(ctx context.Context, log io.Writer) (string, error) {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return dir, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	apiKey, err := KubeAPIServer.key(root)
	if err != nil {
		return "", err
	}
	etcdKey, err := Etcd.key(root)
	if err != nil {
		return "", err
	}
	dir := filepath.Join(root, ".cache", "envtest", apiKey+"-"+etcdKey)
	if isExecutable(filepath.Join(dir, "kube-apiserver")) && isExecutable(filepath.Join(dir, "etcd")) {
		return dir, nil
	}
	if os.Getenv("TESTENV_NO_DOWNLOAD") == "" {
		d, err := setupEnvtest(ctx, root)
		if err == nil {
			return d, nil
		}
		fmt.Fprintf(log, "testenv: setup-envtest could not provide binaries (%v); building them from Go modules\n", firstLine(err.Error()))
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	for _, t := range []Tool{KubeAPIServer, Etcd} {
		bin, err := t.Path(ctx, log)
		if err != nil {
			return "", err
		}
		link := filepath.Join(dir, t.Name)
		_ = os.Remove(link)
		if err := os.Symlink(bin, link); err != nil {
			return "", err
		}
	}
	return dir, nil
}

// setupEnvtest asks setup-envtest (pinned in hack/tools/dev) for the release's binaries.
// It fails fast where nothing can be downloaded.
func setupEnvtest(ctx context.Context, root string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	minor := strings.Join(strings.SplitN(strings.TrimPrefix(KubernetesVersion, "v"), ".", 3)[:2], ".")
	cmd := exec.CommandContext(ctx, "go", "tool", "-modfile=hack/tools/dev/go.mod", "setup-envtest",
		"use", minor+".x", "--bin-dir", filepath.Join(root, ".cache", "setup-envtest"), "-p", "path")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && len(ee.Stderr) > 0 {
			return "", fmt.Errorf("%s", strings.TrimSpace(string(ee.Stderr)))
		}
		return "", err
	}
	dir := strings.TrimSpace(string(out))
	if !isExecutable(filepath.Join(dir, "kube-apiserver")) {
		return "", fmt.Errorf("setup-envtest returned %q without kube-apiserver", dir)
	}
	return dir, nil
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

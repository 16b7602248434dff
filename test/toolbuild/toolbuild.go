// Package toolbuild provides the binaries the tests and the sandbox run (kube-apiserver,
// etcd, Flux's controllers, kro, ...): built once from the Go module proxy through the
// wrapper modules under hack/tools/ and cached in ToolsDir (the user's cache folder, so
// that every checkout on a machine shares them), keyed by a hash of the wrapper module. It uses the standard library only, so that a
// command can start the builds (and their downloads) at once, beside the compilation of
// everything else (Taskfile.yaml, task up). test/testenv re-exports it.
//
// kube-apiserver and etcd for envtest (EnvtestAssets) come from, in order:
// KUBEBUILDER_ASSETS; binaries built before; setup-envtest, where it can download; and
// finally a build from the Go module proxy.
package toolbuild

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ModulePath is the main module's path; RepoRoot looks for its go.mod.
const ModulePath = "github.com/openmcp-project/service-provider-kro"

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
	// Tags are build tags (comma-separated); the tools of one wrapper module build in one
	// go build, so a tag applies to all of them that are built together.
	Tags string
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

// ToolsDirEnv names the variable that overrides ToolsDir.
const ToolsDirEnv = "TESTENV_TOOLS_DIR"

// ToolsDir is the folder where built tools are kept: TESTENV_TOOLS_DIR, or
// service-provider-kro/tools in the user's cache folder (~/.cache on Linux), or .cache/tools
// in the repository where there is none. It is shared by every checkout on the machine: a
// tool's key names everything that decides its binary, so a fresh clone (CI's, a second
// worktree) finds the tools an earlier one built instead of linking them again. The locks
// that keep two processes from building the same module, or kwokctl from picking the same
// ports twice, live there too, so they hold across checkouts.
func ToolsDir() (string, error) {
	if dir := os.Getenv(ToolsDirEnv); dir != "" {
		return filepath.Abs(dir)
	}
	if base, err := os.UserCacheDir(); err == nil {
		return filepath.Join(base, "service-provider-kro", "tools"), nil
	}
	cache, err := CacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(cache, "tools"), nil
}

// buildFlags are the linker flags of every tool besides its own: no symbol table and no
// DWARF, which the tests never read and which cost the linker a quarter of its time on
// the largest binaries (docs/measurements/builds.md).
const buildFlags = "-s -w"

// key hashes everything that decides the binary: the wrapper module's go.mod, go.sum and Go
// files (a few wrappers hold a main package), the package, the flags, the platform and the
// Go version. Every tool is built static (CGO_ENABLED=0), so that the binaries the tests run
// as processes also go into the kind node's images (test/kind) without a libc; CGOEnv
// builds them with cgo instead, to measure the difference.
func (t Tool) key(root string) (string, error) {
	h := sha256.New()
	files, err := filepath.Glob(filepath.Join(root, t.ModuleDir, "*.go"))
	if err != nil {
		return "", err
	}
	if strings.HasPrefix(t.Package, "./") { // a main package of the wrapper module's own
		own, err := filepath.Glob(filepath.Join(root, t.ModuleDir, t.Package, "*.go"))
		if err != nil {
			return "", err
		}
		files = append(files, own...)
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
	fmt.Fprintln(h, t.Package, t.LDFlags, buildFlags, cgoSetting(), runtime.GOOS, runtime.GOARCH, runtime.Version())
	if t.Tags != "" { // after the line above, so that the keys of the tools without tags stay as they were
		fmt.Fprintln(h, "tags", t.Tags)
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// buildArgs is the go build command line that builds todo, tools of one wrapper module,
// into the folder out: their packages, their linker flags and their build tags.
func buildArgs(out string, todo []Tool) []string {
	ldflags := []string{buildFlags}
	var tags, packages []string
	for _, t := range todo {
		if t.LDFlags != "" && !slices.Contains(ldflags, t.LDFlags) {
			ldflags = append(ldflags, t.LDFlags) // an -X flag only touches the package it names
		}
		if t.Tags != "" && !slices.Contains(tags, t.Tags) {
			tags = append(tags, t.Tags)
		}
		packages = append(packages, t.Package)
	}
	args := []string{"build", "-o", out + string(os.PathSeparator), "-ldflags", strings.Join(ldflags, " ")}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	return append(args, packages...)
}

// cached is where the tool's binary is kept once built.
func (t Tool) cached(root string) (string, error) {
	key, err := t.key(root)
	if err != nil {
		return "", err
	}
	dir, err := ToolsDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "bin", t.Name+"-"+key, t.Name), nil
}

// Path returns the tool's binary, building it once; later calls find it in the cache.
func (t Tool) Path(ctx context.Context, log io.Writer) (string, error) {
	paths, err := buildModule(ctx, log, []Tool{t})
	if err != nil {
		return "", err
	}
	return paths[t.Name], nil
}

// buildModule returns the binaries of tools, which come from one wrapper module, and
// builds the missing ones in one `go build`: their shared packages compile once, and the
// go command keeps every core busy across all of them, the linkers included. Concurrent
// callers (parallel test packages, ToolPaths' lanes) wait for one build through a file
// lock on the module.
func buildModule(ctx context.Context, log io.Writer, tools []Tool) (map[string]string, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	paths := make(map[string]string, len(tools))
	missing := func() ([]Tool, error) {
		var out []Tool
		for _, t := range tools {
			bin, err := t.cached(root)
			if err != nil {
				return nil, err
			}
			paths[t.Name] = bin
			if !IsExecutable(bin) {
				out = append(out, t)
			}
		}
		return out, nil
	}
	todo, err := missing()
	if err != nil || len(todo) == 0 {
		return paths, err
	}
	moduleDir := tools[0].ModuleDir
	binDir, err := toolsBinDir()
	if err != nil {
		return nil, err
	}
	unlock, err := LockFile(filepath.Join(binDir, "."+filepath.Base(moduleDir)+".lock"))
	if err != nil {
		return nil, err
	}
	defer unlock()
	if todo, err = missing(); err != nil || len(todo) == 0 { // built by whoever held the lock before us
		return paths, err
	}

	start := time.Now()
	names := make([]string, len(todo))
	for i, t := range todo {
		names[i] = t.Name
	}
	fmt.Fprintf(log, "testenv: building %s from %s (once; cached in %s)\n", strings.Join(names, ", "), moduleDir, binDir)
	out, err := os.MkdirTemp(binDir, ".build-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(out)
	cmd := exec.CommandContext(ctx, "go", buildArgs(out, todo)...)
	cmd.Dir = filepath.Join(root, moduleDir)
	cmd.Env = append(os.Environ(), cgoSetting())
	if msg, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("building %s: %w\n%s", strings.Join(names, ", "), err, msg)
	}
	for _, t := range todo {
		bin := paths[t.Name]
		if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
			return nil, err
		}
		if err := os.Rename(filepath.Join(out, t.binaryName()), bin); err != nil {
			return nil, err
		}
	}
	fmt.Fprintf(log, "testenv: built %s in %s\n", strings.Join(names, ", "), time.Since(start).Round(time.Second))
	return paths, nil
}

// toolsBinDir is ToolsDir's folder of binaries, made if missing.
func toolsBinDir() (string, error) {
	dir, err := ToolsDir()
	if err != nil {
		return "", err
	}
	dir = filepath.Join(dir, "bin")
	return dir, os.MkdirAll(dir, 0o755)
}

// binaryName is the file `go build -o <dir>/` writes for the tool's package: the last
// element of its import path that is not a major version (etcd's .../server/v3 is
// "server"), or the module's folder for a main package at the module's root.
func (t Tool) binaryName() string {
	elems := strings.Split(t.Package, "/")
	name := elems[len(elems)-1]
	if t.Package == "." {
		name = filepath.Base(t.ModuleDir)
	} else if len(elems) > 1 && len(name) > 1 && name[0] == 'v' && strings.Trim(name[1:], "0123456789") == "" {
		name = elems[len(elems)-2]
	}
	if runtime.GOOS == "windows" {
		name += ".exe"
	}
	return name
}

// IsExecutable says whether path is a regular, executable file.
func IsExecutable(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}

// LockFile takes an exclusive lock on the file at path, creating it, and waits for it;
// it locks out other processes too. Call the function it returns to release it.
func LockFile(path string) (func(), error) {
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
	toolsDir, err := ToolsDir()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(toolsDir, "envtest", apiKey+"-"+etcdKey)
	if IsExecutable(filepath.Join(dir, "kube-apiserver")) && IsExecutable(filepath.Join(dir, "etcd")) {
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
	bins, err := ToolPaths(ctx, log, KubeAPIServer, Etcd)
	if err != nil {
		return "", err
	}
	for name, bin := range bins {
		link := filepath.Join(dir, name)
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
	toolsDir, err := ToolsDir()
	if err != nil {
		return "", err
	}
	minor := strings.Join(strings.SplitN(strings.TrimPrefix(KubernetesVersion, "v"), ".", 3)[:2], ".")
	cmd := exec.CommandContext(ctx, "go", "tool", "-modfile=hack/tools/dev/go.mod", "setup-envtest",
		"use", minor+".x", "--bin-dir", filepath.Join(toolsDir, "setup-envtest"), "-p", "path")
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
	if !IsExecutable(filepath.Join(dir, "kube-apiserver")) {
		return "", fmt.Errorf("setup-envtest returned %q without kube-apiserver", dir)
	}
	return dir, nil
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// CGOEnv names the variable that, set to 1, builds the tools with cgo (CGO_ENABLED=1, as
// the tools were built before they were made static), for a side-by-side measurement: the
// keys differ, so both builds can be kept in one ToolsDir, but the kind node images need
// the static ones (docs/measurements/builds.md).
const CGOEnv = "TESTENV_TOOLS_CGO"

// cgoSetting is the CGO_ENABLED setting the tools are built with.
func cgoSetting() string {
	if os.Getenv(CGOEnv) == "1" {
		return "CGO_ENABLED=1"
	}
	return "CGO_ENABLED=0"
}

// BuildLanesEnv names the variable that sets how many wrapper modules ToolPaths builds
// side by side (default DefaultBuildLanes; 1 builds one module after another).
const BuildLanesEnv = "TESTENV_BUILD_LANES"

// DefaultBuildLanes is one module at a time. The wrapper modules share most of their
// packages with the main module and with each other (hack/modalign keeps them at the
// same versions), and two go commands compiling the same package at once both compile
// it: one after the other, the second finds it in the build cache.
const DefaultBuildLanes = 1

// ToolPaths returns the binaries of tools by name, building the missing ones. The tools
// of one wrapper module build in one `go build` (buildModule); different modules build
// side by side, BuildLanesEnv at once, in the order of tools. Each build's duration goes
// to log.
func ToolPaths(ctx context.Context, log io.Writer, tools ...Tool) (map[string]string, error) {
	lanes := DefaultBuildLanes
	if v, err := strconv.Atoi(os.Getenv(BuildLanesEnv)); err == nil && v > 0 {
		lanes = v
	}
	modules, byModule := groupByModule(tools)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu    sync.Mutex
		out   = make(map[string]string, len(tools))
		first error
		wg    sync.WaitGroup
	)
	log = &syncWriter{w: log}
	next := make(chan string)
	for range min(lanes, len(modules)) {
		wg.Go(func() {
			for m := range next {
				paths, err := buildModule(ctx, log, byModule[m])
				mu.Lock()
				if err != nil && first == nil {
					first = err
					cancel()
				}
				maps.Copy(out, paths)
				mu.Unlock()
			}
		})
	}
	for _, m := range modules {
		select {
		case next <- m:
		case <-ctx.Done():
		}
	}
	close(next)
	wg.Wait()
	if first != nil {
		return nil, first
	}
	return out, ctx.Err()
}

// Download fetches the modules the tools' packages come from, and compiles nothing. A
// caller that compiles the main module first, whose packages most tools share, overlaps
// the downloads with that compile and then builds the tools from its build cache
// (Taskfile.yaml's up, .ci/prebuild), instead of compiling the same packages twice at
// the same time.
func Download(ctx context.Context, log io.Writer, tools ...Tool) error {
	root, err := RepoRoot()
	if err != nil {
		return err
	}
	modules, byModule := groupByModule(tools)
	for _, m := range modules {
		start := time.Now()
		// Listing the packages with their dependencies needs every module that provides one.
		args := []string{"list", "-deps", "-f", "{{if .Error}}{{.Error}}{{end}}"}
		for _, t := range byModule[m] {
			args = append(args, t.Package)
		}
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir = filepath.Join(root, m)
		cmd.Env = append(os.Environ(), cgoSetting())
		var stderr strings.Builder // "go: downloading ..." lines, and the go command's errors
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		switch {
		case err != nil:
			return fmt.Errorf("downloading the modules of %s: %w\n%s", m, err, stderr.String())
		case len(strings.TrimSpace(string(out))) > 0: // a package that did not load
			return fmt.Errorf("downloading the modules of %s:\n%s", m, out)
		}
		fmt.Fprintf(log, "testenv: the modules of %s downloaded in %s\n", m, time.Since(start).Round(time.Second))
	}
	return nil
}

// groupByModule groups tools by wrapper module, the modules in the order of tools.
func groupByModule(tools []Tool) ([]string, map[string][]Tool) {
	var modules []string
	byModule := map[string][]Tool{}
	for _, t := range tools {
		if _, ok := byModule[t.ModuleDir]; !ok {
			modules = append(modules, t.ModuleDir)
		}
		byModule[t.ModuleDir] = append(byModule[t.ModuleDir], t)
	}
	return modules, byModule
}

// syncWriter lets the lanes share one log.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

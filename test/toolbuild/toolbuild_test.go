package toolbuild

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestBinaryName(t *testing.T) {
	for _, c := range []struct {
		tool Tool
		want string
	}{
		{KubeAPIServer, "kube-apiserver"},
		{Etcd, "server"}, // .../server/v3: go build names it after the element before the major version
		{KroController, "controller"},
		{Helm, "helm"}, // helm.sh/helm/v4/cmd/helm
		{Registry, "registry"},
		{Tool{ModuleDir: "hack/tools/pause", Package: "."}, "pause"},
		{Tool{Package: "example.com/v2"}, "example.com"},
		{Tool{Package: "example.com/tool/v"}, "v"},
	} {
		got := c.tool.binaryName()
		got = strings.TrimSuffix(got, ".exe")
		if got != c.want {
			t.Errorf("binaryName of %q = %q, want %q", c.tool.Package, got, c.want)
		}
	}
}

// TestSandboxToolsShareOneModule keeps the sandbox's commands in one wrapper module: that is
// what makes their shared packages compile once.
func TestSandboxToolsShareOneModule(t *testing.T) {
	for _, tool := range SandboxTools() {
		if tool.ModuleDir != SandboxModule {
			t.Errorf("%s comes from %s, not from %s", tool.Name, tool.ModuleDir, SandboxModule)
		}
	}
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	gomod, err := os.ReadFile(filepath.Join(root, SandboxModule, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range SandboxTools() {
		if !bytes.Contains(gomod, []byte("\t"+tool.Package+"\n")) {
			t.Errorf("%s: %s is not a tool of %s/go.mod", tool.Name, tool.Package, SandboxModule)
		}
	}
}

// TestBuildModuleBuildsOnceAndCaches builds a small wrapper module's tool (the kind node's
// pause) into a tools folder of its own (TESTENV_TOOLS_DIR): the first call builds it under
// its key there, the second finds it without building, and the binary runs.
func TestBuildModuleBuildsOnceAndCaches(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	toolsDir := t.TempDir()
	t.Setenv(ToolsDirEnv, toolsDir)
	tool := Tool{Name: "pause-toolbuild-test", ModuleDir: "hack/tools/pause", Package: "."}
	bin, err := tool.cached(root)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(bin, toolsDir+string(os.PathSeparator)) {
		t.Fatalf("the tool is kept at %s, outside %s=%s", bin, ToolsDirEnv, toolsDir)
	}

	var log bytes.Buffer
	paths, err := ToolPaths(ctx, &log, tool)
	if err != nil {
		t.Fatal(err)
	}
	if paths[tool.Name] != bin || !IsExecutable(bin) {
		t.Fatalf("got %q (executable: %v), want the executable %q", paths[tool.Name], IsExecutable(paths[tool.Name]), bin)
	}
	if !strings.Contains(log.String(), "building pause-toolbuild-test from hack/tools/pause") {
		t.Errorf("the first call did not say it built the tool:\n%s", log.String())
	}
	log.Reset()
	if p, err := tool.Path(ctx, &log); err != nil || p != bin {
		t.Fatalf("second call: %q, %v", p, err)
	}
	if log.Len() != 0 {
		t.Errorf("the second call built again:\n%s", log.String())
	}
	// pause waits for a signal: it starts, and is killed.
	cmd := exec.CommandContext(ctx, bin)
	if err := cmd.Start(); err != nil {
		t.Fatalf("the built binary does not start: %v", err)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
}

// TestDownloadListsWithoutBuilding runs Download on a small wrapper module with one
// dependency, into an empty module cache of its own: it downloads the dependency (the go
// command says so on stderr, which is no error) and builds nothing into the tools folder,
// and a package the module does not have fails it, naming the module.
func TestDownloadListsWithoutBuilding(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	sums, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	var sum []string
	for _, line := range strings.Split(string(sums), "\n") {
		if strings.HasPrefix(line, "golang.org/x/mod v0.41.0") {
			sum = append(sum, line)
		}
	}
	if len(sum) != 2 {
		t.Fatalf("the main module's go.sum has no golang.org/x/mod v0.41.0 (found %q): update the test's version", sum)
	}
	if err := os.MkdirAll(filepath.Join(root, ".cache"), 0o755); err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp(filepath.Join(root, ".cache"), "toolbuild-download-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	files := map[string]string{
		"go.mod":  "module example.com/download\n\ngo 1.26.0\n\nrequire golang.org/x/mod v0.41.0\n",
		"go.sum":  strings.Join(sum, "\n") + "\n",
		"main.go": "package main\n\nimport \"golang.org/x/mod/semver\"\n\nfunc main() { println(semver.IsValid(\"v1.0.0\")) }\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	moduleDir, err := filepath.Rel(root, dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("GOMODCACHE", t.TempDir())
	t.Setenv("GOFLAGS", "-modcacherw")
	toolsDir := t.TempDir()
	t.Setenv(ToolsDirEnv, toolsDir)

	var log bytes.Buffer
	if err := Download(ctx, &log, Tool{Name: "download", ModuleDir: moduleDir, Package: "."}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log.String(), "the modules of "+moduleDir+" downloaded") {
		t.Errorf("Download did not say what it downloaded:\n%s", log.String())
	}
	if _, err := os.Stat(filepath.Join(os.Getenv("GOMODCACHE"), "golang.org", "x", "mod@v0.41.0")); err != nil {
		t.Errorf("the dependency was not downloaded: %v", err)
	}
	if entries, err := os.ReadDir(toolsDir); err != nil || len(entries) != 0 {
		t.Errorf("Download built something into the tools folder: %v, %v", entries, err)
	}
	err = Download(ctx, &log, Tool{Name: "nothing", ModuleDir: moduleDir, Package: "./does-not-exist"})
	if err == nil || !strings.Contains(err.Error(), moduleDir) {
		t.Errorf("a missing package: got %v, want an error naming %s", err, moduleDir)
	}
}

// TestBuildArgs: the tools of one module build in one go build, with every linker flag and
// build tag among them once, and a tag changes a tool's cache key.
func TestBuildArgs(t *testing.T) {
	a := Tool{Name: "a", ModuleDir: "hack/tools/pause", Package: "x/a", LDFlags: "-X a.v=1", Tags: "t1"}
	b := Tool{Name: "b", ModuleDir: "hack/tools/pause", Package: "./b", Tags: "t1"}
	got := strings.Join(buildArgs("/out", []Tool{a, b}), " ")
	want := "build -o /out/ -ldflags " + buildFlags + " -X a.v=1 -tags t1 x/a ./b"
	if got != want {
		t.Errorf("buildArgs: %q, want %q", got, want)
	}
	if got := strings.Join(buildArgs("/out", []Tool{{Package: "p"}}), " "); strings.Contains(got, "-tags") {
		t.Errorf("no tags, but %q", got)
	}
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	untagged := a
	untagged.Tags = ""
	k1, err1 := a.key(root)
	k2, err2 := untagged.key(root)
	if err1 != nil || err2 != nil || k1 == k2 {
		t.Errorf("keys with and without a tag: %s %s (%v, %v)", k1, k2, err1, err2)
	}
}

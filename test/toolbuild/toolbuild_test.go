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

// TestDownloadListsWithoutBuilding runs Download on the small pause module: it succeeds
// and builds nothing into the tools folder, and a package the module does not have fails
// it, naming the module.
func TestDownloadListsWithoutBuilding(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	toolsDir := t.TempDir()
	t.Setenv(ToolsDirEnv, toolsDir)
	var log bytes.Buffer
	if err := Download(ctx, &log, Tool{Name: "pause", ModuleDir: "hack/tools/pause", Package: "."}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log.String(), "the modules of hack/tools/pause downloaded") {
		t.Errorf("Download did not say what it downloaded:\n%s", log.String())
	}
	if entries, err := os.ReadDir(toolsDir); err != nil || len(entries) != 0 {
		t.Errorf("Download built something into the tools folder: %v, %v", entries, err)
	}
	err := Download(ctx, &log, Tool{Name: "nothing", ModuleDir: "hack/tools/pause", Package: "./does-not-exist"})
	if err == nil || !strings.Contains(err.Error(), "hack/tools/pause") {
		t.Errorf("a missing package: got %v, want an error naming hack/tools/pause", err)
	}
}

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestVetsForTheTargetPlatform builds crossvet and runs it on a small module whose only
// mistake is in a darwin-only file: it fails for darwin, naming the mistake, and passes
// for linux, where the file is not part of the build.
func TestVetsForTheTargetPlatform(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "crossvet")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building crossvet: %v\n%s", err, out)
	}
	mod := filepath.Join(dir, "probe")
	files := map[string]string{
		"go.mod":          "module probe\n\ngo 1.26\n",
		"probe.go":        "package probe\n\nfunc Name() string { return name() }\n",
		"probe_linux.go":  "package probe\n\nfunc name() string { return \"linux\" }\n",
		"probe_darwin.go": "package probe\n\nimport \"fmt\"\n\nfunc name() string { return fmt.Sprintf(\"%d\", \"darwin\") }\n",
	}
	if err := os.MkdirAll(mod, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(mod, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run := func(goos string) (string, error) {
		cmd := exec.Command(bin, "./...")
		cmd.Dir = mod
		cmd.Env = append(os.Environ(), "GOOS="+goos, "GOARCH=amd64", "GOFLAGS=", "GOWORK=off")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := run("darwin")
	if err == nil || !strings.Contains(out, "probe_darwin.go") || !strings.Contains(out, "Sprintf format %d") {
		t.Errorf("for darwin crossvet should report the Sprintf in probe_darwin.go; err %v, output:\n%s", err, out)
	}
	if out, err := run("linux"); err != nil {
		t.Errorf("for linux the darwin file is not built, so crossvet should pass; err %v, output:\n%s", err, out)
	}
}

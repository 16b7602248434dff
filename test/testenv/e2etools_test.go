//go:build e2e

// The end-to-end environment's own tests build a dozen binaries from Go modules on first
// use (about 10 minutes on 2 cores): they only run with -tags e2e, e.g.
// go test -tags e2e ./test/testenv/ -run 'TestE2ETools|TestFluxInstallsKroOnKwokControlPlane'

package testenv

import (
	"context"
	"testing"
	"time"
)

// TestE2ETools builds (or finds in the cache) every binary of the end-to-end environment
// and reports how long each took.
func TestE2ETools(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	start := time.Now()
	paths, err := ToolPaths(ctx, testLog{t}, E2ETools()...)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range E2ETools() {
		if !isExecutable(paths[tool.Name]) {
			t.Errorf("%s: no executable at %q", tool.Name, paths[tool.Name])
		}
	}
	t.Logf("all tools ready in %s", time.Since(start).Round(time.Second))
}

// testLog writes log lines of the environment into the test log.
type testLog struct{ t testing.TB }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Helper()
	l.t.Log(string(p))
	return len(p), nil
}

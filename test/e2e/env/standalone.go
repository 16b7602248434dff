package env

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

// Commands splits a documented block of commands into its commands: comment and blank
// lines are left out, and a line ending in a backslash goes on on the next.
func Commands(block string) []string {
	var cmds []string
	var cur strings.Builder
	for _, line := range strings.Split(block, "\n") {
		t := strings.TrimSpace(line)
		if cur.Len() == 0 && (t == "" || strings.HasPrefix(t, "#")) {
			continue
		}
		if rest, ok := strings.CutSuffix(t, `\`); ok {
			cur.WriteString(rest)
			continue
		}
		cur.WriteString(t)
		cmds = append(cmds, cur.String())
		cur.Reset()
	}
	return cmds
}

// StartDocumentedProvider runs the first block of docs/operations.md, "Installing
// without openmcp", as written: `service-provider-kro init`, then `service-provider-kro
// run` in the background, in a folder holding ob.yaml and pf.yaml (the environment's
// kubeconfigs) with the provider's binary on PATH. Only the ports are the test's: run
// gets free ones appended, so that it cannot collide with what else listens on this
// machine. It returns run's process once it reports ready, and init's output. The
// environment's own provider should be stopped first: both would reconcile.
func (e *Env) StartDocumentedProvider(ctx context.Context) (*testenv.Process, string, error) {
	root, err := testenv.RepoRoot()
	if err != nil {
		return nil, "", err
	}
	blocks, err := DocCommands(filepath.Join(root, operationsDoc), installHeading)
	if err != nil {
		return nil, "", err
	}
	cmds := Commands(blocks[0])
	if len(cmds) != 2 || !strings.HasPrefix(cmds[0], "service-provider-kro init ") || !strings.HasPrefix(cmds[1], "service-provider-kro run ") {
		return nil, "", fmt.Errorf("%s: the first sh block of %q is not `service-provider-kro init …` and `service-provider-kro run …`:\n%s", operationsDoc, installHeading, blocks[0])
	}
	work := filepath.Join(e.Dir, "standalone")
	if err := os.MkdirAll(work, 0o755); err != nil {
		return nil, "", err
	}
	for file, c := range map[string]*Cluster{"ob.yaml": e.Onboarding, "pf.yaml": e.Platform} {
		if err := os.WriteFile(filepath.Join(work, file), c.Kubeconfig, 0o600); err != nil {
			return nil, "", err
		}
	}
	var log bytes.Buffer
	if err := e.sh(ctx, work, &log, cmds[0]); err != nil {
		return nil, log.String(), err
	}
	addrs, err := testenv.FreeLoopbackAddrs(2)
	if err != nil {
		return nil, log.String(), err
	}
	script := fmt.Sprintf("cd %q && exec %s --metrics-bind-address %s --metrics-secure=false --health-probe-bind-address %s", work, cmds[1], addrs[0], addrs[1])
	p, err := testenv.StartProcess("documented-provider", filepath.Join(e.Dir, "standalone"),
		[]string{"HOME=" + e.Dir, "PATH=" + e.toolPath()}, "bash", "-euo", "pipefail", "-c", script)
	if err != nil {
		return nil, log.String(), err
	}
	if err := waitReady(ctx, p, "http://"+addrs[1]+"/readyz"); err != nil {
		_ = p.Stop()
		return nil, log.String(), err
	}
	return p, log.String(), nil
}

// toolPath is PATH with the provider's binary first, and on kind the environment's
// kubectl: the documented commands call them by name.
func (e *Env) toolPath() string {
	dirs := []string{filepath.Dir(e.ProviderBinary)}
	if e.kind != nil {
		dirs = append(dirs, filepath.Dir(e.Kubectl()))
	}
	return strings.Join(append(dirs, os.Getenv("PATH")), string(os.PathListSeparator))
}

package env

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

// Where docs/operations.md keeps the commands the kind backend runs as they are written.
const (
	operationsDoc         = "docs/operations.md"
	installHeading        = "## Installing without openmcp"
	giveControlPlaneTitle = "### Giving a ControlPlane to the provider (standalone)"
)

// DocCommands returns the ```sh blocks of a Markdown file's section: those after the
// heading line and before the next heading of the same or a higher level.
func DocCommands(file, heading string) ([]string, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	level := strings.Index(heading, " ")
	var blocks []string
	in, inBlock := false, false
	var cur strings.Builder
	for _, line := range strings.Split(string(data), "\n") {
		if !inBlock && strings.HasPrefix(line, "#") {
			l := strings.Index(line, " ")
			if line == heading {
				in = true
				continue
			}
			if in && l > 0 && l <= level {
				break
			}
		}
		switch {
		case in && !inBlock && line == "```sh":
			inBlock = true
			cur.Reset()
		case inBlock && line == "```":
			inBlock = false
			blocks = append(blocks, cur.String())
		case inBlock:
			cur.WriteString(line + "\n")
		}
	}
	if len(blocks) == 0 {
		return nil, fmt.Errorf("%s: no sh block under %q", file, heading)
	}
	return blocks, nil
}

// InstallProvider installs the provider on the platform cluster (which is the onboarding
// cluster too) from the release pushKindImages published, by running the commands of
// docs/operations.md, "Installing without openmcp", as they are written: the block that
// installs from the release's files, in a folder holding those files (what the block
// before it downloads), the kubeconfigs onboarding.yaml and platform.yaml, and the
// release's binary for this machine as service-provider-kro first on PATH, with the
// registry's credentials in REGISTRY, REGISTRY_USER and REGISTRY_PASSWORD. It then gives
// the provider the registry's pull secret and the environment's ProviderConfig (the
// documented sample comes from GitHub, which the test does not reach), and each
// ControlPlane by the commands of "Giving a ControlPlane to the provider". It returns the
// commands' output.
func (e *Env) InstallProvider(ctx context.Context) (string, error) {
	return e.installRelease(ctx, e.Release)
}

func (e *Env) installRelease(ctx context.Context, r *Release) (string, error) {
	root, err := testenv.RepoRoot()
	if err != nil {
		return "", err
	}
	doc := filepath.Join(root, operationsDoc)
	install, err := DocCommands(doc, installHeading)
	if err != nil {
		return "", err
	}
	give, err := DocCommands(doc, giveControlPlaneTitle)
	if err != nil {
		return "", err
	}
	if len(install) < 3 || !strings.Contains(install[2], "apply -k .") || !strings.Contains(install[2], r.Bundles["platform"]) {
		return "", fmt.Errorf("%s: the third sh block of %q is not the install from the release's bundles:\n%s", operationsDoc, installHeading, strings.Join(install, "\n---\n"))
	}
	work := filepath.Join(e.Dir, "install-"+r.Version)
	if err := os.MkdirAll(filepath.Join(work, "bin"), 0o755); err != nil {
		return "", err
	}
	if err := os.CopyFS(work, os.DirFS(r.Dir)); err != nil && !os.IsExist(err) {
		return "", err
	}
	// The release's binary for this machine, as the documented download names it.
	e.ProviderBinary = filepath.Join(work, "bin", "service-provider-kro")
	if err := os.Rename(filepath.Join(work, "service-provider-kro_linux_"+runtime.GOARCH), e.ProviderBinary); err != nil {
		return "", err
	}
	if err := os.Chmod(e.ProviderBinary, 0o755); err != nil {
		return "", err
	}
	kc, err := os.ReadFile(e.KindKubeconfig("platform"))
	if err != nil {
		return "", err
	}
	for _, f := range []string{"onboarding.yaml", "platform.yaml"} {
		if err := os.WriteFile(filepath.Join(work, f), kc, 0o600); err != nil {
			return "", err
		}
	}
	var log bytes.Buffer
	if err := e.sh(ctx, work, &log, install[2], "REGISTRY="+e.Registry.Host, "REGISTRY_USER="+e.Registry.Username, "REGISTRY_PASSWORD="+e.Registry.Password); err != nil {
		return log.String(), err
	}
	pc := e.Platform.Client
	if err := createIfMissing(ctx, pc, e.Registry.PullSecret(e.PodNamespace, PullSecretName)); err != nil {
		return log.String(), err
	}
	if err := createIfMissing(ctx, pc, e.ProviderConfig()); err != nil {
		return log.String(), err
	}
	if err := e.giveControlPlanes(ctx, work, &log, give[0]); err != nil {
		return log.String(), err
	}
	return log.String(), waitDeploymentAvailable(ctx, pc, e.PodNamespace, "service-provider-kro", 3*time.Minute)
}

// giveControlPlanes runs the documented block that gives a ControlPlane to the provider,
// for each ControlPlane, and checks that it made the ControlPlane's tenant namespace.
func (e *Env) giveControlPlanes(ctx context.Context, work string, log *bytes.Buffer, give string) error {
	for _, cp := range e.ControlPlanes {
		if err := os.WriteFile(filepath.Join(work, "cp.yaml"), cp.Kubeconfig, 0o600); err != nil {
			return err
		}
		if err := e.sh(ctx, work, log, give, "KUBECONFIG=platform.yaml", "KRO="+cp.Namespace+"/"+cp.Name); err != nil {
			return err
		}
		if err := e.Platform.Client.Get(ctx, client.ObjectKey{Name: cp.TenantNamespace}, &corev1.Namespace{}); err != nil {
			return fmt.Errorf("the documented commands did not make tenant namespace %s of %s/%s: %w", cp.TenantNamespace, cp.Namespace, cp.Name, err)
		}
	}
	return nil
}

// sh runs a documented block of commands with bash -euo pipefail in dir.
func (e *Env) sh(ctx context.Context, dir string, log *bytes.Buffer, script string, env ...string) error {
	fmt.Fprintf(log, "$ %s", script)
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", script)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "PATH="+e.toolPath()), env...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("running the commands of %s: %w\n%s", operationsDoc, err, log.String())
	}
	return nil
}

// Where docs/releases.md keeps the commands of an upgrade.
const (
	releasesDoc    = "docs/releases.md"
	upgradeHeading = "## Upgrading the provider"
)

// UpgradeProvider upgrades the provider installed by InstallProvider to the release r by
// the commands of docs/releases.md, "Upgrading the provider", as they are written, in a
// folder holding r's files and the installation's kustomization.yaml. It returns the
// commands' output once the rollout is done.
func (e *Env) UpgradeProvider(ctx context.Context, from, to *Release) (string, error) {
	root, err := testenv.RepoRoot()
	if err != nil {
		return "", err
	}
	blocks, err := DocCommands(filepath.Join(root, releasesDoc), upgradeHeading)
	if err != nil {
		return "", err
	}
	work := filepath.Join(e.Dir, "install-"+to.Version)
	if err := os.MkdirAll(work, 0o755); err != nil {
		return "", err
	}
	if err := os.CopyFS(work, os.DirFS(to.Dir)); err != nil && !os.IsExist(err) {
		return "", err
	}
	for _, f := range []string{"kustomization.yaml", "onboarding.yaml", "platform.yaml"} {
		data, err := os.ReadFile(filepath.Join(e.Dir, "install-"+from.Version, f))
		if err != nil {
			return "", err
		}
		if err := os.WriteFile(filepath.Join(work, f), data, 0o600); err != nil {
			return "", err
		}
	}
	var log bytes.Buffer
	err = e.sh(ctx, work, &log, blocks[0])
	return log.String(), err
}

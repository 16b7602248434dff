package testenv

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// HelmCLI runs the helm command with all its state (registry logins, caches) in one
// folder, so nothing lands in the home folder.
type HelmCLI struct {
	// Bin is the helm binary.
	Bin string
	// Home is the folder that holds helm's configuration, caches and data.
	Home string
}

// NewHelmCLI builds helm (once) and returns a CLI whose state lives in home.
func NewHelmCLI(ctx context.Context, log io.Writer, home string) (*HelmCLI, error) {
	bin, err := Helm.Path(ctx, log)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(home, 0o755); err != nil {
		return nil, err
	}
	return &HelmCLI{Bin: bin, Home: home}, nil
}

// Run runs helm with args and returns its output.
func (h *HelmCLI) Run(args ...string) ([]byte, error) {
	env := []string{
		"HOME=" + h.Home,
		"HELM_CACHE_HOME=" + filepath.Join(h.Home, "cache"),
		"HELM_CONFIG_HOME=" + filepath.Join(h.Home, "config"),
		"HELM_DATA_HOME=" + filepath.Join(h.Home, "data"),
		"HELM_REGISTRY_CONFIG=" + filepath.Join(h.Home, "registry", "config.json"),
		"HELM_REPOSITORY_CONFIG=" + filepath.Join(h.Home, "repositories.yaml"),
		"HELM_REPOSITORY_CACHE=" + filepath.Join(h.Home, "repository"),
		"KUBECONFIG=" + filepath.Join(h.Home, "no-kubeconfig"),
	}
	return runCommand(env, h.Home, h.Bin, args...)
}

// PackageKroChart packages kro's real Helm chart as chart version and app version
// `version` (e.g. "0.9.4") into outDir and returns the archive's path. The chart comes
// from the kro module of that version when the module proxy serves it, else from
// KroModule. Its image tag points at registry.k8s.io, which is fine on kwok clusters,
// where pods are not run.
func (h *HelmCLI) PackageKroChart(ctx context.Context, version, outDir string) (string, error) {
	version = strings.TrimPrefix(version, "v")
	modDir, err := ModuleDir(ctx, "github.com/kubernetes-sigs/kro@v"+version)
	if err != nil {
		if modDir, err = ModuleDir(ctx, KroModule); err != nil {
			return "", err
		}
	}
	src := filepath.Join(modDir, "helm")
	work, err := os.MkdirTemp(h.Home, "kro-chart-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(work)
	chartDir := filepath.Join(work, "kro")
	if err := os.CopyFS(chartDir, os.DirFS(src)); err != nil {
		return "", fmt.Errorf("copying the kro chart from %s: %w", src, err)
	}
	values := filepath.Join(chartDir, "values.yaml")
	data, err := os.ReadFile(values)
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(values, []byte(strings.ReplaceAll(string(data), "${VERSION}", version)), 0o644); err != nil {
		return "", err
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return "", err
	}
	if _, err := h.Run("package", chartDir, "--version", version, "--app-version", version, "--destination", outDir); err != nil {
		return "", err
	}
	out := filepath.Join(outDir, "kro-"+version+".tgz")
	if _, err := os.Stat(out); err != nil {
		return "", fmt.Errorf("helm package did not write %s: %w", out, err)
	}
	return out, nil
}

// Login logs helm into the registry.
func (h *HelmCLI) Login(r *OCIRegistry) error {
	_, err := h.Run("registry", "login", r.Host, "--username", r.Username, "--password", r.Password, "--ca-file", r.CAFile)
	return err
}

// Push pushes a packaged chart into the registry under repository (e.g. "charts");
// the chart is then at r.URL(repository + "/" + chartName). Login first.
func (h *HelmCLI) Push(r *OCIRegistry, chart, repository string) error {
	_, err := h.Run("push", chart, r.URL(repository), "--ca-file", r.CAFile)
	return err
}

// PublishKroCharts packages the kro chart at each version and pushes it to
// r.URL(repository + "/kro"). Helm's state and the archives live in dir.
func PublishKroCharts(ctx context.Context, log io.Writer, r *OCIRegistry, dir, repository string, versions ...string) error {
	h, err := NewHelmCLI(ctx, log, filepath.Join(dir, "helm"))
	if err != nil {
		return err
	}
	if err := h.Login(r); err != nil {
		return err
	}
	for _, v := range versions {
		chart, err := h.PackageKroChart(ctx, v, filepath.Join(dir, "charts"))
		if err != nil {
			return err
		}
		if err := h.Push(r, chart, repository); err != nil {
			return err
		}
		fmt.Fprintf(log, "testenv: pushed kro chart %s to %s\n", strings.TrimPrefix(v, "v"), r.URL(repository+"/kro"))
	}
	return nil
}

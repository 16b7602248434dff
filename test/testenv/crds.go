package testenv

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// Versions of the upstream projects whose CRDs (and, for the e2e, binaries) the tests use.
// The Flux controllers are the newest releases that build from the module proxy and serve
// the API versions of the Flux API modules in go.mod.
const (
	SourceControllerModule = "github.com/fluxcd/source-controller@v1.9.4"
	HelmControllerModule   = "github.com/fluxcd/helm-controller@v1.6.4"
	KroModule              = "github.com/kubernetes-sigs/kro@v0.9.4"
)

// ModuleDir downloads a module (module@version) into the module cache, if it is not there
// yet, and returns its folder.
func ModuleDir(ctx context.Context, moduleAtVersion string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", moduleAtVersion)
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go mod download %s: %w", moduleAtVersion, err)
	}
	var info struct{ Dir, Error string }
	if err := json.Unmarshal(out, &info); err != nil {
		return "", fmt.Errorf("go mod download %s: %w", moduleAtVersion, err)
	}
	if info.Error != "" || info.Dir == "" {
		return "", fmt.Errorf("go mod download %s: %s", moduleAtVersion, info.Error)
	}
	return info.Dir, nil
}

// FluxCRDDirs returns the folders of the OCIRepository/HelmRepository... and HelmRelease
// CRDs, taken from the Flux controllers' module zips.
func FluxCRDDirs(ctx context.Context) ([]string, error) {
	var dirs []string
	for _, m := range []string{SourceControllerModule, HelmControllerModule} {
		dir, err := ModuleDir(ctx, m)
		if err != nil {
			return nil, err
		}
		dirs = append(dirs, filepath.Join(dir, "config", "crd", "bases"))
	}
	return dirs, nil
}

// KroCRDDir returns the folder of kro's CRDs (ResourceGraphDefinition, GraphRevision),
// taken from the chart in the kro module zip.
func KroCRDDir(ctx context.Context) (string, error) {
	dir, err := ModuleDir(ctx, KroModule)
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "helm", "crds"), nil
}

// InstallCRDDir installs the CRDs in dir on a running cluster and waits until they are
// served.
func InstallCRDDir(_ context.Context, c *Cluster, dir string) error {
	_, err := envtest.InstallCRDs(c.Config, envtest.CRDInstallOptions{Paths: []string{dir}, ErrorIfPathMissing: true})
	return err
}

// WaitForCRD waits until the CRD of that name exists and is Established on the cluster
// of c, polling every interval, for as long as ctx lasts.
func WaitForCRD(ctx context.Context, c client.Client, name string, interval time.Duration) error {
	for {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := c.Get(ctx, client.ObjectKey{Name: name}, crd); err == nil {
			for _, cond := range crd.Status.Conditions {
				if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for CRD %s to be established: %w", name, ctx.Err())
		case <-time.After(interval):
		}
	}
}

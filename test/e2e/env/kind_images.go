package env

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/openmcp-project/service-provider-kro/test/kind"
	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

// Images of the kind backend besides the provider's, each one static binary built from its
// module. kro's chart names registry.k8s.io/kro/kro:<chart version>; both chart versions
// run the controller of testenv.KroModule (only its chart differs between them).
var (
	fluxSourceImage = "kro.test/fluxcd/source-controller:" + moduleVersion(testenv.SourceControllerModule)
	fluxHelmImage   = "kro.test/fluxcd/helm-controller:" + moduleVersion(testenv.HelmControllerModule)
)

func moduleVersion(moduleAtVersion string) string {
	_, v, _ := strings.Cut(moduleAtVersion, "@")
	return v
}

// ProviderImage is the provider's image as config/manager names it: the repository and
// tag of its kustomization's images entry.
func ProviderImage() (string, error) {
	root, err := testenv.RepoRoot()
	if err != nil {
		return "", err
	}
	data, err := os.ReadFile(filepath.Join(root, "config", "manager", "kustomization.yaml"))
	if err != nil {
		return "", err
	}
	var k struct {
		Images []struct{ Name, NewName, NewTag string } `json:"images"`
	}
	if err := yaml.Unmarshal(data, &k); err != nil {
		return "", err
	}
	if len(k.Images) != 1 || k.Images[0].NewName == "" || k.Images[0].NewTag == "" {
		return "", fmt.Errorf("config/manager/kustomization.yaml: want one image with newName and newTag, got %+v", k.Images)
	}
	return k.Images[0].NewName + ":" + k.Images[0].NewTag, nil
}

// loadKindImages builds the images and loads them into the nodes: the provider's, from the
// OCI layout `go tool task image` writes, and Flux's into the platform cluster; kro's into
// every ControlPlane.
func (e *Env) loadKindImages(ctx context.Context) error {
	root, err := testenv.RepoRoot()
	if err != nil {
		return err
	}
	task := exec.CommandContext(ctx, "go", "tool", "task", "image")
	task.Dir = root
	if out, err := task.CombinedOutput(); err != nil {
		return fmt.Errorf("go tool task image: %w\n%s", err, out)
	}
	ref, err := ProviderImage()
	if err != nil {
		return err
	}
	dir := filepath.Join(e.Dir, "images")
	provider := filepath.Join(dir, "provider.tar")
	if err := kind.LayoutArchive(filepath.Join(root, "bin", "image"), ref, provider); err != nil {
		return err
	}
	bins, err := testenv.ToolPaths(ctx, e.log, testenv.SourceController, testenv.HelmController, testenv.KroController)
	if err != nil {
		return err
	}
	var kroTags []string
	for _, v := range testenv.KroChartVersions {
		kroTags = append(kroTags, "registry.k8s.io/kro/kro:"+v)
	}
	images := map[string]kind.Image{
		"source-controller.tar": {Tags: []string{fluxSourceImage}, Binary: bins[testenv.SourceController.Name], Path: "/usr/local/bin/source-controller", User: "65534:65534"},
		"helm-controller.tar":   {Tags: []string{fluxHelmImage}, Binary: bins[testenv.HelmController.Name], Path: "/usr/local/bin/helm-controller", User: "65534:65534"},
		"kro.tar":               {Tags: kroTags, Binary: bins[testenv.KroController.Name], Path: "/ko-app/controller", User: "65532:65532"},
	}
	for file, img := range images {
		if err := img.WriteArchive(filepath.Join(dir, file)); err != nil {
			return fmt.Errorf("image %s: %w", img.Tags[0], err)
		}
	}
	platform := e.KindCluster("platform")
	for _, f := range []string{"provider.tar", "source-controller.tar", "helm-controller.tar"} {
		if err := kind.LoadImageArchive(e.kind.provider, platform, filepath.Join(dir, f)); err != nil {
			return err
		}
	}
	for _, cp := range e.ControlPlanes {
		if err := kind.LoadImageArchive(e.kind.provider, e.KindCluster(cp.Name), filepath.Join(dir, "kro.tar")); err != nil {
			return err
		}
	}
	return nil
}

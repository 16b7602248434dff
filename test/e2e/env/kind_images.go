package env

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/hack/image/ociimage"
	"github.com/openmcp-project/service-provider-kro/test/kind"
	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

// The kind backend's nodes pull every image but their own control plane's from the
// environment's registry, over TLS with its CA and with credentials, as a platform
// team's nodes pull from a private registry: the provider's from the release `go tool
// task release` pushes there, Flux's and kro's (each one static binary built from its
// module) pushed beside it. kro's chart names registry.k8s.io/kro/kro:<chart version>;
// the ProviderConfig's helmValues point it at the registry (KroImageRepository), and both
// chart versions run the controller of testenv.KroModule.

// ImagesPath is the repository path below the registry's host that holds the images.
const ImagesPath = "images"

func (e *Env) fluxImage(name, moduleAtVersion string) string {
	return e.Registry.Host + "/" + ImagesPath + "/fluxcd/" + name + ":" + moduleVersion(moduleAtVersion)
}

// KroImageRepository is where the kind backend's nodes pull kro's image from.
func (e *Env) KroImageRepository() string { return e.Registry.Host + "/" + ImagesPath + "/kro/kro" }

// ProviderRepository is where the kind backend's releases push the provider's image.
func (e *Env) ProviderRepository() string {
	return e.Registry.Host + "/" + ImagesPath + "/service-provider-kro"
}

func moduleVersion(moduleAtVersion string) string {
	_, v, _ := strings.Cut(moduleAtVersion, "@")
	return v
}

// Release is what `go tool task release` published (its release.json) and where its files are.
type Release struct {
	Version string            `json:"version"`
	Image   string            `json:"image"` // repository:tag@digest
	Digest  string            `json:"digest"`
	Bundles map[string]string `json:"bundles"`
	// Dir holds the release's files: bundles, binaries, SBOMs, SHA256SUMS.
	Dir string `json:"-"`
}

// PinnedImage is the image as the bundles name it: repository@digest.
func (r *Release) PinnedImage() string {
	repo, _, _ := strings.Cut(r.Image, ":"+r.Version+"@")
	return repo + "@" + r.Digest
}

// PublishRelease runs `go tool task release` for version against the environment's
// registry, with its credentials and CA as a release job would have them, into
// e.Dir/release-<version>, and returns what it published.
func (e *Env) PublishRelease(ctx context.Context, version string) (*Release, error) {
	root, err := testenv.RepoRoot()
	if err != nil {
		return nil, err
	}
	out := filepath.Join(e.Dir, "release-"+version)
	cmd := exec.CommandContext(ctx, "go", "tool", "task", "release", "VERSION="+version,
		"IMAGE_REPOSITORY="+e.ProviderRepository(), "OCM_REPOSITORY="+e.Registry.Host+"/ocm",
		"--", "-username", e.Registry.Username, "-ca-file", e.Registry.CAFile, "-out", out)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "RELEASE_REGISTRY_PASSWORD="+e.Registry.Password)
	if b, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go tool task release %s: %w\n%s", version, err, b)
	}
	data, err := os.ReadFile(filepath.Join(out, "release.json"))
	if err != nil {
		return nil, err
	}
	r := &Release{Dir: out}
	if err := json.Unmarshal(data, r); err != nil {
		return nil, fmt.Errorf("%s/release.json: %w", out, err)
	}
	return r, nil
}

// pushKindImages makes every node trust the registry (kind.TrustRegistry), publishes the
// release the provider is installed from, and pushes Flux's and kro's images.
func (e *Env) pushKindImages(ctx context.Context) error {
	for _, c := range e.kind.clusters {
		if err := kind.TrustRegistry(e.kind.provider, c, e.Registry.Host, e.Registry.CA.CertPEM); err != nil {
			return err
		}
	}
	version, err := releaseVersion()
	if err != nil {
		return err
	}
	if e.Release, err = e.PublishRelease(ctx, version); err != nil {
		return err
	}
	bins, err := testenv.ToolPaths(ctx, e.log, testenv.SourceController, testenv.HelmController, testenv.KroController)
	if err != nil {
		return err
	}
	var kroTags []string
	for _, v := range testenv.KroChartVersions {
		kroTags = append(kroTags, e.KroImageRepository()+":"+v)
	}
	auth := ociimage.RegistryOptions{Username: e.Registry.Username, Password: e.Registry.Password, RootCAs: e.Registry.CA.CertPool()}
	for _, img := range []kind.Image{
		{Tags: []string{e.fluxImage("source-controller", testenv.SourceControllerModule)}, Binary: bins[testenv.SourceController.Name], Path: "/usr/local/bin/source-controller", User: "65534:65534"},
		{Tags: []string{e.fluxImage("helm-controller", testenv.HelmControllerModule)}, Binary: bins[testenv.HelmController.Name], Path: "/usr/local/bin/helm-controller", User: "65534:65534"},
		{Tags: kroTags, Binary: bins[testenv.KroController.Name], Path: "/ko-app/controller", User: "65532:65532"},
	} {
		if err := img.Push(ctx, auth); err != nil {
			return err
		}
	}
	return nil
}

// releaseVersion is the version of the kind backend's first release: VERSION's.
func releaseVersion() (string, error) {
	root, err := testenv.RepoRoot()
	if err != nil {
		return "", err
	}
	v, err := os.ReadFile(filepath.Join(root, "VERSION"))
	return strings.TrimSpace(string(v)), err
}

// kindProviderConfig offers v0.9.3 and v0.9.4 of kro as ProviderConfig does, each with
// helmValues that make the nodes pull kro's image from the registry with the pull secret
// the provider copies next to kro: the image's repository and imagePullSecrets.
func (e *Env) kindProviderConfig() *v1alpha1.ProviderConfig {
	values, _ := json.Marshal(map[string]any{
		"image":            map[string]string{"repository": e.KroImageRepository()},
		"imagePullSecrets": []map[string]string{{"name": PullSecretName}},
	})
	pc := &v1alpha1.ProviderConfig{
		ObjectMeta: metav1.ObjectMeta{Name: e.ProviderName},
		Spec:       v1alpha1.ProviderConfigSpec{PollInterval: &metav1.Duration{Duration: 10 * time.Second}},
	}
	for _, v := range testenv.KroChartVersions {
		pc.Spec.Versions = append(pc.Spec.Versions, v1alpha1.KroVersion{
			Version: "v" + v, ChartVersion: v, ChartURL: e.ChartURL, ChartPullSecret: PullSecretName,
			HelmValues: &apiextensionsv1.JSON{Raw: values},
		})
	}
	return pc
}

// Package config holds the provider's kustomize configuration (CRDs by cluster, RBAC by
// cluster, the manager Deployment, samples) and renders it for tests. The binary does not
// import it; it embeds only the CRDs (package crd).
package config

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/openmcp-project/service-provider-kro/test/toolbuild"
)

// The overlays to apply, one per kind of cluster.
const (
	OnboardingOverlay = "onboarding"
	PlatformOverlay   = "platform"
	// Namespace is where the overlays put the provider.
	Namespace = "service-provider-kro-system"
	// ServiceAccount is the provider's identity on both clusters.
	ServiceAccount = "service-provider-kro"
	// MetricsReaderRole is the ClusterRole that lets its subjects GET the provider's
	// /metrics; the platform overlay ships it unbound, for Prometheus.
	MetricsReaderRole = "service-provider-kro-metrics-reader"
)

// Dir is the config folder of the source tree this package was compiled from; it is
// meant for tests, which run inside the source tree. Built with -trimpath (CI builds
// everything so, to compile the dependencies once for the tests and the release binaries),
// the compiled-in path is the import path, not a file: then it is the config folder of the
// repository around the working directory (toolbuild.RepoRoot).
func Dir() string {
	_, file, _, _ := runtime.Caller(0)
	if filepath.IsAbs(file) {
		return filepath.Dir(file)
	}
	root, err := toolbuild.RepoRoot()
	if err != nil {
		return "config" // not inside the source tree: relative to the working directory
	}
	return filepath.Join(root, "config")
}

// Render builds the kustomization in dir (relative to Dir, or absolute) as
// `kubectl kustomize` does and returns its objects in kustomize's order.
func Render(dir string) ([]*unstructured.Unstructured, error) {
	if !filepath.IsAbs(dir) {
		dir = filepath.Join(Dir(), dir)
	}
	resMap, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("rendering %s: %w", dir, err)
	}
	out := make([]*unstructured.Unstructured, 0, resMap.Size())
	for _, r := range resMap.Resources() {
		m, err := r.Map()
		if err != nil {
			return nil, fmt.Errorf("rendering %s: %w", dir, err)
		}
		out = append(out, &unstructured.Unstructured{Object: m})
	}
	return out, nil
}

// Kustomizations lists every folder below Dir that holds a kustomization.yaml, relative
// to Dir and sorted.
func Kustomizations() ([]string, error) {
	root := Dir()
	var dirs []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if _, err := os.Stat(filepath.Join(path, "kustomization.yaml")); err == nil {
				rel, err := filepath.Rel(root, path)
				if err != nil {
					return err
				}
				dirs = append(dirs, rel)
			}
		}
		return nil
	})
	sort.Strings(dirs)
	return dirs, err
}

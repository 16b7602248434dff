// Package testenv gives tests real clusters: it starts several API servers at once, and
// the end-to-end environment (Flux, a registry, kro, kwok ControlPlanes) from binaries
// that test/toolbuild builds from Go modules; the names below re-export it, so that a
// test needs one import.
package testenv

import (
	"context"
	"io"

	"github.com/openmcp-project/service-provider-kro/test/toolbuild"
)

// ModulePath is the main module's path; RepoRoot looks for its go.mod.
const ModulePath = toolbuild.ModulePath

// KubernetesVersion is the kube-apiserver release the tests run against.
const KubernetesVersion = toolbuild.KubernetesVersion

// SandboxModule is the wrapper module of every command the environment runs.
const SandboxModule = toolbuild.SandboxModule

// Versions stamped into kwok and helm.
const (
	KwokVersion = toolbuild.KwokVersion
	HelmVersion = toolbuild.HelmVersion
)

// Tool is a command built from a wrapper module under hack/tools.
type Tool = toolbuild.Tool

// The commands of the environment (toolbuild's documentation says what each is).
var (
	KubeAPIServer         = toolbuild.KubeAPIServer
	Etcd                  = toolbuild.Etcd
	KubeControllerManager = toolbuild.KubeControllerManager
	KubeScheduler         = toolbuild.KubeScheduler
	Kubectl               = toolbuild.Kubectl
	SourceController      = toolbuild.SourceController
	HelmController        = toolbuild.HelmController
	Registry              = toolbuild.Registry
	Helm                  = toolbuild.Helm
	Kwok                  = toolbuild.Kwok
	Kwokctl               = toolbuild.Kwokctl
	KroController         = toolbuild.KroController
	Promtool              = toolbuild.Promtool
	RuleMetrics           = toolbuild.RuleMetrics
)

// SandboxTools lists the commands StartE2E starts with.
func SandboxTools() []Tool { return toolbuild.SandboxTools() }

// ToolPaths returns the binaries of tools by name, building the missing ones.
func ToolPaths(ctx context.Context, log io.Writer, tools ...Tool) (map[string]string, error) {
	return toolbuild.ToolPaths(ctx, log, tools...)
}

// EnvtestAssets returns a folder holding kube-apiserver and etcd, the layout envtest
// expects in KUBEBUILDER_ASSETS.
func EnvtestAssets(ctx context.Context, log io.Writer) (string, error) {
	return toolbuild.EnvtestAssets(ctx, log)
}

// RepoRoot finds the repository root from the working directory upwards.
func RepoRoot() (string, error) { return toolbuild.RepoRoot() }

// CacheDir is the git-ignored folder where built binaries are kept.
func CacheDir() (string, error) { return toolbuild.CacheDir() }

// ToolsDir is the folder, shared by every checkout on the machine, where built tools and
// the locks around them are kept.
func ToolsDir() (string, error) { return toolbuild.ToolsDir() }

func isExecutable(path string) bool { return toolbuild.IsExecutable(path) }

func lockFile(path string) (func(), error) { return toolbuild.LockFile(path) }

// LockFile takes an exclusive lock on the file at path, which holds across processes (the
// parallel processes of the e2e suite); call the function it returns to release it.
func LockFile(path string) (func(), error) { return toolbuild.LockFile(path) }

package testenv

import (
	"context"
	"io"
	"os"
	"strconv"
	"sync"
)

// Versions of the commands the end-to-end environment builds. They are pinned by the
// wrapper modules under hack/tools; the constants only stamp the binaries' versions.
const (
	KwokVersion = "v0.8.0"
	HelmVersion = "v3.19.0"
)

// KubeControllerManager and KubeScheduler come from the same wrapper module as
// KubeAPIServer; kwokctl runs them so that Deployments get pods and pods get nodes.
var (
	KubeControllerManager = Tool{
		Name:      "kube-controller-manager",
		ModuleDir: "hack/tools/kube",
		Package:   "k8s.io/kubernetes/cmd/kube-controller-manager",
		LDFlags:   KubeAPIServer.LDFlags, // the same version stamp
	}
	KubeScheduler = Tool{
		Name:      "kube-scheduler",
		ModuleDir: "hack/tools/kube",
		Package:   "k8s.io/kubernetes/cmd/kube-scheduler",
		LDFlags:   KubeAPIServer.LDFlags, // the same version stamp
	}
	// Kubectl is used by kwokctl to see whether a cluster it started is served.
	Kubectl = Tool{
		Name:      "kubectl",
		ModuleDir: "hack/tools/kube",
		Package:   "k8s.io/kubernetes/cmd/kubectl",
		LDFlags:   KubeAPIServer.LDFlags, // the same version stamp
	}
)

// Flux controllers at the versions of SourceControllerModule and HelmControllerModule.
var (
	SourceController = Tool{
		Name:      "source-controller",
		ModuleDir: "hack/tools/flux-source",
		Package:   "github.com/fluxcd/source-controller",
	}
	HelmController = Tool{
		Name:      "helm-controller",
		ModuleDir: "hack/tools/flux-helm",
		Package:   "github.com/fluxcd/helm-controller",
	}
)

// Registry is the CNCF distribution OCI registry.
var Registry = Tool{
	Name:      "registry",
	ModuleDir: "hack/tools/registry",
	Package:   "github.com/distribution/distribution/v3/cmd/registry",
}

// Helm is the helm CLI, used to package and push charts.
var Helm = Tool{
	Name:      "helm",
	ModuleDir: "hack/tools/helm",
	Package:   "helm.sh/helm/v3/cmd/helm",
	LDFlags:   "-X helm.sh/helm/v3/internal/version.version=" + HelmVersion,
}

// Kwok (the fake-node controller) and Kwokctl (which starts kwok clusters).
var (
	Kwok = Tool{
		Name:      "kwok",
		ModuleDir: "hack/tools/kwok",
		Package:   "sigs.k8s.io/kwok/cmd/kwok",
		LDFlags:   kwokLDFlags(),
	}
	Kwokctl = Tool{
		Name:      "kwokctl",
		ModuleDir: "hack/tools/kwok",
		Package:   "sigs.k8s.io/kwok/cmd/kwokctl",
		LDFlags:   kwokLDFlags(),
	}
)

// KroController is kro's controller at the version of KroModule.
var KroController = Tool{
	Name:      "kro-controller",
	ModuleDir: "hack/tools/kro",
	Package:   "github.com/kubernetes-sigs/kro/cmd/controller",
}

func kwokLDFlags() string {
	return "-X sigs.k8s.io/kwok/pkg/consts.Version=" + KwokVersion +
		" -X sigs.k8s.io/kwok/pkg/consts.KubeVersion=" + KubernetesVersion
}

// SandboxTools lists the commands the end-to-end environment starts with (StartE2E, and
// so the default sandbox), heaviest first. What only some runs need is built when first
// started: openmcp-operator (StartOpenMCPOperator) for the openmcp mode.
func SandboxTools() []Tool {
	return []Tool{
		KubeAPIServer, KubeControllerManager, KubeScheduler, Kubectl, Etcd,
		SourceController, HelmController, Registry, Helm, Kwok, Kwokctl, KroController,
	}
}

// E2ETools lists every command the end-to-end suite needs: the sandbox's and
// openmcp-operator.
func E2ETools() []Tool {
	return append(SandboxTools(), OpenMCPOperator)
}

// BuildLanesEnv names the variable that sets how many wrapper modules ToolPaths builds
// side by side (default DefaultBuildLanes; 1 builds one tool after another).
const BuildLanesEnv = "TESTENV_BUILD_LANES"

// DefaultBuildLanes is two modules at a time. Measured cold on two idle cores
// (2026-12-03, the sandbox's tools): 11 min 35 s with two, 12 min 17 s with one. The Go
// compiler keeps both cores busy within one module most of the time; a second lane fills
// the gaps, mostly the linker's single-threaded end of each tool.
const DefaultBuildLanes = 2

// ToolPaths returns the binaries of tools by name, building the missing ones. The tools
// of one wrapper module are built one after another, since they share most packages and
// a second build at the same time would compile them again; different modules are built
// side by side, BuildLanesEnv at once, in the order of tools (heaviest first). Tool.Path
// writes each build's duration to log.
func ToolPaths(ctx context.Context, log io.Writer, tools ...Tool) (map[string]string, error) {
	lanes := DefaultBuildLanes
	if v, err := strconv.Atoi(os.Getenv(BuildLanesEnv)); err == nil && v > 0 {
		lanes = v
	}
	var modules []string
	byModule := map[string][]Tool{}
	for _, t := range tools {
		if _, ok := byModule[t.ModuleDir]; !ok {
			modules = append(modules, t.ModuleDir)
		}
		byModule[t.ModuleDir] = append(byModule[t.ModuleDir], t)
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu    sync.Mutex
		out   = make(map[string]string, len(tools))
		first error
		wg    sync.WaitGroup
	)
	log = &syncWriter{w: log}
	next := make(chan string)
	for range min(lanes, len(modules)) {
		wg.Go(func() {
			for m := range next {
				for _, t := range byModule[m] {
					p, err := t.Path(ctx, log)
					mu.Lock()
					if err != nil && first == nil {
						first = err
						cancel()
					}
					out[t.Name] = p
					mu.Unlock()
					if err != nil {
						break
					}
				}
			}
		})
	}
	for _, m := range modules {
		select {
		case next <- m:
		case <-ctx.Done():
		}
	}
	close(next)
	wg.Wait()
	if first != nil {
		return nil, first
	}
	return out, ctx.Err()
}

// syncWriter lets the lanes share one log.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

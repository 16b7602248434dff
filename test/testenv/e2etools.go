package testenv

import (
	"context"
	"io"
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

// ToolPaths returns the binaries of tools by name, building the missing ones one after
// another (a cold build costs minutes and a lot of memory; in parallel they would only
// compete for the same cores). Tool.Path writes each build's duration to log.
func ToolPaths(ctx context.Context, log io.Writer, tools ...Tool) (map[string]string, error) {
	out := make(map[string]string, len(tools))
	for _, t := range tools {
		p, err := t.Path(ctx, log)
		if err != nil {
			return nil, err
		}
		out[t.Name] = p
	}
	return out, nil
}

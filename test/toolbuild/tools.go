package toolbuild

import "strings"

// KubernetesVersion is the kube-apiserver release the tests run against. Its minor
// matches the k8s.io client libraries in go.mod.
const KubernetesVersion = "v1.36.3"

// KubeAPIServer is kube-apiserver at KubernetesVersion, with its version stamped so
// clients see the real version instead of v0.0.0.
var KubeAPIServer = Tool{
	Name:      "kube-apiserver",
	ModuleDir: SandboxModule,
	Package:   "k8s.io/kubernetes/cmd/kube-apiserver",
	LDFlags:   versionLDFlags(KubernetesVersion),
}

// Etcd is the etcd server kube-apiserver of KubernetesVersion is tested with.
var Etcd = Tool{Name: "etcd", ModuleDir: SandboxModule, Package: "go.etcd.io/etcd/server/v3"}

func versionLDFlags(v string) string {
	major, minor, _ := strings.Cut(strings.TrimPrefix(v, "v"), ".")
	minor, _, _ = strings.Cut(minor, ".")
	pkg := "k8s.io/component-base/version"
	return strings.Join([]string{
		"-X " + pkg + ".gitVersion=" + v,
		"-X " + pkg + ".gitMajor=" + major,
		"-X " + pkg + ".gitMinor=" + minor,
		"-X " + pkg + ".gitTreeState=clean",
	}, " ")
}

// SandboxModule is the wrapper module of every command the end-to-end environment and
// the kind node run (all but openmcp-operator): one module, so that the packages they
// share compile once.
const SandboxModule = "hack/tools/sandbox"

// Versions of the commands the end-to-end environment builds. They are pinned by the
// wrapper module SandboxModule; the constants only stamp the binaries' versions.
const (
	KwokVersion = "v0.8.0"
	HelmVersion = "v4.2.4"
)

// KubeControllerManager and KubeScheduler come from k8s.io/kubernetes like KubeAPIServer; kwokctl runs them so that Deployments get pods and pods get nodes.
var (
	KubeControllerManager = Tool{
		Name:      "kube-controller-manager",
		ModuleDir: SandboxModule,
		Package:   "k8s.io/kubernetes/cmd/kube-controller-manager",
		LDFlags:   KubeAPIServer.LDFlags, // the same version stamp
	}
	KubeScheduler = Tool{
		Name:      "kube-scheduler",
		ModuleDir: SandboxModule,
		Package:   "k8s.io/kubernetes/cmd/kube-scheduler",
		LDFlags:   KubeAPIServer.LDFlags, // the same version stamp
	}
	// Kubectl is used by kwokctl to see whether a cluster it started is served.
	Kubectl = Tool{
		Name:      "kubectl",
		ModuleDir: SandboxModule,
		Package:   "k8s.io/kubernetes/cmd/kubectl",
		LDFlags:   KubeAPIServer.LDFlags, // the same version stamp
	}
)

// Flux controllers at the versions of SourceControllerModule and HelmControllerModule.
var (
	SourceController = Tool{
		Name:      "source-controller",
		ModuleDir: SandboxModule,
		Package:   "github.com/fluxcd/source-controller",
	}
	HelmController = Tool{
		Name:      "helm-controller",
		ModuleDir: SandboxModule,
		Package:   "github.com/fluxcd/helm-controller",
	}
)

// Registry is the CNCF distribution OCI registry.
var Registry = Tool{
	Name:      "registry",
	ModuleDir: SandboxModule,
	Package:   "github.com/distribution/distribution/v3/cmd/registry",
}

// Helm is the helm CLI, used to package and push charts. It is Helm 4, whose libraries
// the Flux controllers link too.
var Helm = Tool{
	Name:      "helm",
	ModuleDir: SandboxModule,
	Package:   "helm.sh/helm/v4/cmd/helm",
	LDFlags:   "-X helm.sh/helm/v4/internal/version.version=" + HelmVersion,
}

// Kwok (the fake-node controller) and Kwokctl (which starts kwok clusters).
var (
	Kwok = Tool{
		Name:      "kwok",
		ModuleDir: SandboxModule,
		Package:   "sigs.k8s.io/kwok/cmd/kwok",
		LDFlags:   kwokLDFlags(),
	}
	Kwokctl = Tool{
		Name:      "kwokctl",
		ModuleDir: SandboxModule,
		Package:   "sigs.k8s.io/kwok/cmd/kwokctl",
		LDFlags:   kwokLDFlags(),
	}
)

// KroController is kro's controller at the version of KroModule.
var KroController = Tool{
	Name:      "kro-controller",
	ModuleDir: SandboxModule,
	Package:   "github.com/kubernetes-sigs/kro/cmd/controller",
}

func kwokLDFlags() string {
	return "-X sigs.k8s.io/kwok/pkg/consts.Version=" + KwokVersion +
		" -X sigs.k8s.io/kwok/pkg/consts.KubeVersion=" + KubernetesVersion
}

// SandboxTools lists the commands the end-to-end environment starts with (StartE2E, and
// so the default sandbox); they all come from SandboxModule and build in one go. What
// only some runs need is built when first started: openmcp-operator
// (StartOpenMCPOperator) for the openmcp mode.
func SandboxTools() []Tool {
	return []Tool{
		KubeAPIServer, KubeControllerManager, KubeScheduler, Kubectl, Etcd,
		SourceController, HelmController, Registry, Helm, Kwok, Kwokctl, KroController,
	}
}

// OpenMCPOperatorVersion is the openmcp-operator release hack/tools/openmcp-operator builds.
const OpenMCPOperatorVersion = "v1.3.0"

// OpenMCPOperator is openmcp-operator, for the end-to-end suite's openmcp mode. It has a
// wrapper module of its own: in SandboxModule it would raise the Flux controllers' API
// dependencies.
var OpenMCPOperator = Tool{
	Name:      "openmcp-operator",
	ModuleDir: "hack/tools/openmcp-operator",
	Package:   "github.com/openmcp-project/openmcp-operator/cmd/openmcp-operator",
}

// E2ETools lists every command the end-to-end suite needs: the sandbox's and
// openmcp-operator.
func E2ETools() []Tool {
	return append(SandboxTools(), OpenMCPOperator)
}

// MonitoringModule is the wrapper module of the monitoring kit's tools.
const MonitoringModule = "hack/tools/monitoring"

// Promtool unit-tests the alerts of config/monitoring (promtool test rules), and
// RuleMetrics lists the metrics and labels those rules read (hack/tools/monitoring).
var (
	// remove_all_sd leaves out Prometheus' service discoveries (AWS, Azure, GCE, ... SDKs):
	// promtool's rule tests need none of them, and they were most of its build.
	Promtool    = Tool{Name: "promtool", ModuleDir: MonitoringModule, Package: "github.com/prometheus/prometheus/cmd/promtool", Tags: "remove_all_sd"}
	RuleMetrics = Tool{Name: "rulemetrics", ModuleDir: MonitoringModule, Package: "./rulemetrics"}
)

// MonitoringTools are the tools the monitoring kit's tests run.
func MonitoringTools() []Tool { return []Tool{Promtool, RuleMetrics} }

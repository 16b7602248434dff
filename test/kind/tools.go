package kind

import "github.com/openmcp-project/service-provider-kro/test/testenv"

// The node's Kubernetes binaries come from k8s.io/kubernetes in the wrapper module that
// builds the tests' kube-apiserver, with the same version stamp: kubeadm checks that
// kubelet and the control plane agree.
var (
	Kubelet   = kubeTool("kubelet")
	Kubeadm   = kubeTool("kubeadm")
	KubeProxy = kubeTool("kube-proxy")
)

// CoreDNS is the cluster DNS, with the plugins hack/tools/coredns/main.go links.
var CoreDNS = testenv.Tool{Name: "coredns", ModuleDir: "hack/tools/coredns", Package: "."}

// Pause is the sandbox program of every pod (hack/tools/pause).
var Pause = testenv.Tool{Name: "pause", ModuleDir: "hack/tools/pause", Package: "."}

func kubeTool(name string) testenv.Tool {
	return testenv.Tool{
		Name:      name,
		ModuleDir: testenv.KubeAPIServer.ModuleDir,
		Package:   "k8s.io/kubernetes/cmd/" + name,
		LDFlags:   testenv.KubeAPIServer.LDFlags,
	}
}

// NodeTools lists every binary the node image holds or makes images of, heaviest module
// first (testenv.ToolPaths builds one module's tools in one go build, and CoreDNS and pause
// beside it).
func NodeTools() []testenv.Tool {
	return []testenv.Tool{
		testenv.KubeAPIServer, testenv.KubeControllerManager, testenv.KubeScheduler, testenv.Kubectl,
		Kubelet, Kubeadm, KubeProxy, testenv.Etcd, CoreDNS, Pause,
	}
}

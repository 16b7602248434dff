package testenv

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	openmcpinstall "github.com/openmcp-project/openmcp-operator/api/install"

	"github.com/openmcp-project/service-provider-kro/test/toolbuild"
)

// OpenMCPOperatorVersion is the openmcp-operator release hack/tools/openmcp-operator builds.
const OpenMCPOperatorVersion = toolbuild.OpenMCPOperatorVersion

// OpenMCPOperator is openmcp-operator, which deploys service providers (ServiceProvider →
// init Job → run Deployment), schedules ClusterRequests and runs the ControlPlane
// controller (`mcp run`).
var OpenMCPOperator = toolbuild.OpenMCPOperator

// OpenMCPScheme knows Kubernetes' own kinds, CRDs and every openmcp-operator API (clusters,
// providers, ControlPlanes). Add nothing to it; NewOpenMCPScheme makes one to extend.
var OpenMCPScheme = NewOpenMCPScheme()

// NewOpenMCPScheme returns a new scheme like OpenMCPScheme.
func NewOpenMCPScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(apiextensionsv1.AddToScheme(s))
	openmcpinstall.InstallOperatorAPIsPlatform(s)
	openmcpinstall.InstallOperatorAPIsOnboarding(s)
	return s
}

// Names openmcp-operator is run with.
const (
	// OpenMCPNamespace is openmcp-operator's namespace on the platform cluster (its
	// POD_NAMESPACE): the providers it deploys run there.
	OpenMCPNamespace = "openmcp-system"
	// OpenMCPPodName is the Pod object that stands for openmcp-operator itself: its `init`
	// reads its own Pod (POD_NAME) to learn its image.
	OpenMCPPodName = "openmcp-operator"
	// MCPControllerName is the ControlPlane controller's provider name (`mcp run
	// --provider-name`), as openmcp-operator's init names its PlatformService.
	MCPControllerName = "managedcontrolplane"
)

// OpenMCPOperatorOptions configures StartOpenMCPOperator.
type OpenMCPOperatorOptions struct {
	// Platform is the cluster openmcp-operator runs against (its ambient cluster).
	Platform *rest.Config
	// PlatformKubeconfig is a self-contained kubeconfig of Platform.
	PlatformKubeconfig []byte
	// Environment is openmcp-operator's --environment; default "e2e".
	Environment string
	// Config is openmcp-operator's configuration file (scheduler purpose mappings...).
	Config string
	// Dir holds the kubeconfig, the config and the logs.
	Dir string
	// BeforeMCP runs after the platform's CRDs are installed and openmcp-operator's `run`
	// is started, before `mcp init`, which waits for onboarding access: start the cluster
	// provider there.
	BeforeMCP func(ctx context.Context) error
}

// OpenMCP is a running openmcp-operator: `run` (scheduler, AccessRequest controller,
// provider deployment controller) and `mcp run` (the ControlPlane controller) as processes
// against the platform cluster.
type OpenMCP struct {
	Environment string
	// Run and MCP are `openmcp-operator run` and `openmcp-operator mcp run`.
	Run, MCP *Process
	dir      string
}

// StartOpenMCPOperator builds (once) openmcp-operator and starts it as its Helm chart would
// (init, then run), plus the ControlPlane controller, which openmcp-operator's init would
// have deployed as a PlatformService (`mcp init`, `mcp run`): here they run as processes, so
// that openmcp-operator's own image is not needed. The processes get POD_NAME and
// POD_NAMESPACE as in a pod; a Pod object for openmcp-operator itself is created on the
// platform cluster because its init reads it.
func StartOpenMCPOperator(ctx context.Context, log io.Writer, opts OpenMCPOperatorOptions) (_ *OpenMCP, err error) {
	bin, err := OpenMCPOperator.Path(ctx, log)
	if err != nil {
		return nil, err
	}
	if opts.Environment == "" {
		opts.Environment = "e2e"
	}
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, err
	}
	kubeconfig := filepath.Join(opts.Dir, "platform.kubeconfig")
	if err := os.WriteFile(kubeconfig, opts.PlatformKubeconfig, 0o600); err != nil {
		return nil, err
	}
	configPath := filepath.Join(opts.Dir, "config.yaml")
	if err := os.WriteFile(configPath, []byte(opts.Config), 0o644); err != nil {
		return nil, err
	}
	c, err := client.New(opts.Platform, client.Options{Scheme: OpenMCPScheme})
	if err != nil {
		return nil, err
	}
	if err := createOpenMCPPod(ctx, c); err != nil {
		return nil, err
	}
	o := &OpenMCP{Environment: opts.Environment, dir: opts.Dir}
	defer func() {
		if err != nil {
			_ = o.Stop()
		}
	}()
	env := []string{
		"KUBECONFIG=" + kubeconfig, "HOME=" + opts.Dir,
		"POD_NAME=" + OpenMCPPodName, "POD_NAMESPACE=" + OpenMCPNamespace,
		"POD_IP=127.0.0.1", "POD_SERVICE_ACCOUNT_NAME=openmcp-operator",
	}
	common := []string{"--kubeconfig=" + kubeconfig, "--environment=" + opts.Environment, "--config=" + configPath, "--verbosity=debug"}
	run := func(name string, args ...string) error {
		return runToCompletion(ctx, name, opts.Dir, env, bin, append(args, common...)...)
	}
	// The operator's own init, as its chart runs it; the ControlPlane controller and the
	// Helm deployer would be PlatformServices of openmcp-operator's image: skipped, the
	// ControlPlane controller runs as a process below.
	if err := run("openmcp-operator-init", "init", "--skip-mcp-platform-service", "--skip-helm-platform-service"); err != nil {
		return nil, err
	}
	addrs, err := FreeLoopbackAddrs(2)
	if err != nil {
		return nil, err
	}
	o.Run, err = StartProcess("openmcp-operator-run", opts.Dir, env, bin, append([]string{"run",
		"--health-probe-bind-address=" + addrs[0], "--metrics-bind-address=0"}, common...)...)
	if err != nil {
		return nil, err
	}
	if err := waitHealthy(ctx, o.Run, "http://"+addrs[0]+"/readyz", time.Minute); err != nil {
		return nil, err
	}
	if opts.BeforeMCP != nil {
		if err := opts.BeforeMCP(ctx); err != nil {
			return nil, err
		}
	}
	if err := run("openmcp-mcp-init", "mcp", "init", "--provider-name="+MCPControllerName); err != nil {
		return nil, err
	}
	o.MCP, err = StartProcess("openmcp-mcp-run", opts.Dir, env, bin, append([]string{"mcp", "run",
		"--provider-name=" + MCPControllerName, "--health-probe-bind-address=" + addrs[1], "--metrics-bind-address=0"}, common...)...)
	if err != nil {
		return nil, err
	}
	if err := waitHealthy(ctx, o.MCP, "http://"+addrs[1]+"/readyz", 3*time.Minute); err != nil {
		return nil, err
	}
	return o, nil
}

// createOpenMCPPod creates openmcp-operator's namespace and the Pod object that stands for
// openmcp-operator (on a node of its own, so that no kubelet of the tests runs it).
func createOpenMCPPod(ctx context.Context, c client.Client) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: OpenMCPNamespace}}
	if err := c.Create(ctx, ns); client.IgnoreAlreadyExists(err) != nil {
		return err
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: OpenMCPPodName, Namespace: OpenMCPNamespace,
			Labels: map[string]string{"app.kubernetes.io/name": "openmcp-operator"}},
		Spec: corev1.PodSpec{
			NodeName: "openmcp-operator-host",
			Containers: []corev1.Container{{
				Name:  "openmcp-operator",
				Image: "ghcr.io/openmcp-project/images/openmcp-operator:" + OpenMCPOperatorVersion,
				Args:  []string{"run", "--environment=e2e"},
			}},
		},
	}
	if err := c.Create(ctx, pod); client.IgnoreAlreadyExists(err) != nil {
		return err
	}
	return nil
}

// Stop stops the ControlPlane controller and openmcp-operator.
func (o *OpenMCP) Stop() error {
	if o == nil {
		return nil
	}
	return StopProcesses(o.MCP, o.Run)
}

// runToCompletion runs a command of openmcp-operator that ends by itself (init, mcp init)
// and waits for it, for at most three minutes.
func runToCompletion(ctx context.Context, name, dir string, env []string, bin string, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	p, err := StartProcess(name, dir, env, bin, args...)
	if err != nil {
		return err
	}
	select {
	case <-p.Exited():
	case <-ctx.Done():
		_ = p.Stop()
		return fmt.Errorf("openmcp-operator %v did not finish: %w\n%s", args, ctx.Err(), p.LogTail(30))
	}
	if p.err != nil {
		return fmt.Errorf("openmcp-operator %v: %w\n%s", args, p.err, p.LogTail(30))
	}
	return nil
}

package env

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmcp-project/service-provider-kro/hack/image/ociimage"
	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

// OpenMCPOptions configures StartOpenMCP.
type OpenMCPOptions struct {
	// Dir holds every process's files and logs.
	Dir string
	// Log receives progress lines.
	Log io.Writer
	// ControlPlanes are the kwok clusters the cluster provider hands out for ControlPlanes;
	// default one, "mcp-1".
	ControlPlanes []string
	// ImageTag is the tag the provider image is pushed with; default "e2e".
	ImageTag string
	// WorkloadCluster names a kwok cluster the cluster provider hands out for every
	// ClusterRequest of purpose workload (one Cluster that all share); none when empty.
	WorkloadCluster string
}

// OpenMCPEnv is an environment in which OpenControlPlane's own openmcp-operator v1.3.0
// deploys the provider: an onboarding and a platform cluster (real API servers), Flux and
// a TLS registry with kro's chart as in Start, plus on the platform cluster
// kube-controller-manager (Jobs and Deployments get pods) and a Kubelet that runs pods as
// processes from the images in the registry, a ClusterProvider that backs openmcp's
// Clusters with the onboarding cluster and kwok ControlPlanes and grants AccessRequests,
// and openmcp-operator itself (`init`, `run`, and the ControlPlane controller `mcp run`).
// The provider's image, built from this repository's code for this machine's platform, is
// in the registry; nothing runs the provider until a ServiceProvider asks openmcp for it.
type OpenMCPEnv struct {
	Dir        string
	Onboarding *Cluster
	Platform   *Cluster
	// ControlPlanes are the clusters the ClusterProvider hands out, by name.
	ControlPlanes []*Cluster
	// Workload is the workload cluster (OpenMCPOptions.WorkloadCluster), or nil.
	Workload *Cluster
	Registry *testenv.OCIRegistry
	ChartURL string
	// Image is the provider image's reference in the registry.
	Image string
	// PullSecretName is the registry's credentials in openmcp's namespace (the provider's
	// POD_NAMESPACE): the ServiceProvider's image pull secret and the chart pull secret.
	PullSecretName string
	// Namespace is openmcp-operator's namespace, where it runs the provider.
	Namespace       string
	Kubelet         *testenv.Kubelet
	ClusterProvider *testenv.ClusterProvider
	OpenMCP         *testenv.OpenMCP
	Timings         []testenv.Timing

	log         io.Writer
	stopBackend func() error
	kcm         *testenv.Process
	kros        kroControllers
	stopOnce    sync.Once
	stopErr     error
}

// StartOpenMCP builds what is missing and starts the environment. On error whatever was
// started is stopped again; otherwise call Stop. It needs Linux: openmcp-operator runs the
// provider from its linux image, through the testenv kubelet.
func StartOpenMCP(ctx context.Context, opts OpenMCPOptions) (_ *OpenMCPEnv, err error) {
	if runtime.GOOS != "linux" {
		return nil, fmt.Errorf("the openmcp environment needs Linux: openmcp-operator runs the provider from its linux image, through the testenv kubelet (this machine is %s)", runtime.GOOS)
	}
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	if opts.ControlPlanes == nil {
		opts.ControlPlanes = []string{"mcp-1"}
	}
	if opts.ImageTag == "" {
		opts.ImageTag = "e2e"
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, err
	}
	e := &OpenMCPEnv{Dir: dir, log: opts.Log, PullSecretName: PullSecretName, Namespace: testenv.OpenMCPNamespace}
	defer func() {
		if err != nil {
			_ = e.Stop()
		}
	}()
	var binary string
	if err := e.step("build provider (static, linux/"+runtime.GOARCH+")", func() error {
		binary, err = BuildStaticProvider(ctx, opts.Log)
		return err
	}); err != nil {
		return nil, err
	}
	if err := e.step("build openmcp-operator", func() error {
		_, err := testenv.OpenMCPOperator.Path(ctx, opts.Log)
		return err
	}); err != nil {
		return nil, err
	}
	names := opts.ControlPlanes
	if opts.WorkloadCluster != "" {
		names = append(slices.Clone(names), opts.WorkloadCluster)
	}
	pc, err := startProcessClusters(ctx, opts.Log, filepath.Join(dir, "env"), names, "")
	if err != nil {
		return nil, err
	}
	e.stopBackend = pc.stop
	e.Timings = append(e.Timings, pc.timings...)
	e.Platform, e.Onboarding, e.ControlPlanes = pc.platform, pc.onboarding, pc.controlPlanes
	if opts.WorkloadCluster != "" {
		e.Workload, e.ControlPlanes = e.ControlPlanes[len(e.ControlPlanes)-1], e.ControlPlanes[:len(e.ControlPlanes)-1]
	}
	e.Registry, e.ChartURL = pc.registry, pc.chartURL

	if err := e.step("push provider image", func() error {
		e.Image = e.Registry.Host + "/service-provider-kro:" + opts.ImageTag
		return PushProviderImage(ctx, e.Registry, e.Image, binary)
	}); err != nil {
		return nil, err
	}
	if err := e.step("kube-controller-manager and kubelet on the platform", func() error {
		if e.kcm, err = testenv.StartKubeControllerManager(ctx, opts.Log, testenv.KubeControllerManagerOptions{
			Kubeconfig: e.Platform.Kubeconfig, Dir: filepath.Join(dir, "platform-kcm"),
		}); err != nil {
			return err
		}
		e.Kubelet, err = testenv.StartKubelet(ctx, testenv.KubeletOptions{
			Platform: e.Platform.Config, Dir: filepath.Join(dir, "kubelet"), RegistryCAs: e.Registry.CA.CertPool(), Log: opts.Log,
		})
		return err
	}); err != nil {
		return nil, err
	}
	if err := e.step("openmcp-operator (init, run, mcp init, mcp run) and the cluster provider", func() error {
		var cps []testenv.TargetCluster
		for _, cp := range e.ControlPlanes {
			cps = append(cps, testenv.TargetCluster{Name: cp.Name, Config: cp.Config})
		}
		e.OpenMCP, err = testenv.StartOpenMCPOperator(ctx, opts.Log, testenv.OpenMCPOperatorOptions{
			Platform: e.Platform.Config, PlatformKubeconfig: e.Platform.Kubeconfig,
			Config: testenv.SchedulerConfig, Dir: filepath.Join(dir, "openmcp"),
			BeforeMCP: func(ctx context.Context) error {
				cpo := testenv.ClusterProviderOptions{
					Platform:      e.Platform.Config,
					Onboarding:    testenv.TargetCluster{Name: "onboarding", Config: e.Onboarding.Config},
					ControlPlanes: cps,
					Log:           opts.Log,
				}
				if e.Workload != nil {
					cpo.Workload = testenv.TargetCluster{Name: e.Workload.Name, Config: e.Workload.Config}
				}
				e.ClusterProvider, err = testenv.StartClusterProvider(ctx, cpo)
				return err
			},
		})
		return err
	}); err != nil {
		return nil, err
	}
	if err := e.step("pull secret", func() error {
		return createIfMissing(ctx, e.Platform.Client, e.Registry.PullSecret(e.Namespace, e.PullSecretName))
	}); err != nil {
		return nil, err
	}
	return e, nil
}

func (e *OpenMCPEnv) step(name string, f func() error) error {
	return runStep(e.log, &e.Timings, name, f)
}

// ControlPlane returns the cluster of that name, or nil.
func (e *OpenMCPEnv) ControlPlane(name string) *Cluster {
	for _, cp := range e.ControlPlanes {
		if cp.Name == name {
			return cp
		}
	}
	return nil
}

// StartKroController runs kro's controller against a ControlPlane once its chart has
// installed kro's CRDs (it waits for them), as Env.StartKroController does.
func (e *OpenMCPEnv) StartKroController(ctx context.Context, cp *Cluster) error {
	return e.kros.start(ctx, e.log, e.Dir, cp)
}

// StopKroController stops kro's controller of a ControlPlane, if it runs.
func (e *OpenMCPEnv) StopKroController(name string) error {
	return e.kros.stop(name)
}

// StartKroControllerOnWorkload runs kro's controller for cp as it runs on the workload
// cluster: with the credential the provider wrote there (StartKroControllerWithCredential).
func (e *OpenMCPEnv) StartKroControllerOnWorkload(ctx context.Context, cp *Cluster, tenant client.ObjectKey) error {
	return startKroControllerWithCredential(ctx, e.log, e.Dir, &e.kros, cp, e.Workload, tenant)
}

// StopKroControllerOnWorkload stops the controller StartKroControllerOnWorkload started.
func (e *OpenMCPEnv) StopKroControllerOnWorkload(cp *Cluster) error {
	return e.kros.stop(cp.Name + "-workload")
}

// Stop stops everything: the kubelet (and with it the provider's processes), openmcp,
// the cluster provider, kro's controllers, kube-controller-manager, then Flux, the registry
// and the clusters. It is safe on a partly started environment and more than once.
func (e *OpenMCPEnv) Stop() error {
	if e == nil {
		return nil
	}
	e.stopOnce.Do(func() {
		errs := []error{e.Kubelet.Stop(), e.OpenMCP.Stop(), e.ClusterProvider.Stop(), e.kros.stopAll(), e.kcm.Stop()}
		if e.stopBackend != nil {
			errs = append(errs, e.stopBackend())
		}
		e.stopErr = errors.Join(errs...)
	})
	return e.stopErr
}

// BuildStaticProvider builds the provider as the image has it: a static binary
// (CGO_ENABLED=0) for linux and this machine's architecture, into .cache/e2e/openmcp/.
func BuildStaticProvider(ctx context.Context, log io.Writer) (string, error) {
	return buildProvider(ctx, log, filepath.Join(".cache", "e2e", "openmcp", "linux-"+runtime.GOARCH, "service-provider-kro"),
		"CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
}

// PushProviderImage builds the provider image (hack/image/ociimage's ProviderSpec) for
// linux/<this machine's architecture> from binary and pushes it to the registry as ref.
func PushProviderImage(ctx context.Context, r *testenv.OCIRegistry, ref, binary string) error {
	spec := ociimage.ProviderSpec("v0.0.0-e2e", time.Unix(0, 0).UTC())
	platform := "linux/" + runtime.GOARCH
	if !slices.Contains(spec.Platforms, platform) {
		return fmt.Errorf("the provider image is not built for %s", platform)
	}
	spec.Platforms = []string{platform}
	idx, err := ociimage.Build(spec, map[string]string{platform: binary})
	if err != nil {
		return fmt.Errorf("building the image: %w", err)
	}
	_, err = ociimage.Push(ctx, idx, ref, ociimage.RegistryOptions{Username: r.Username, Password: r.Password, RootCAs: r.CA.CertPool()})
	if err != nil {
		return fmt.Errorf("pushing %s: %w", ref, err)
	}
	return nil
}

// PodsOf lists the pods of openmcp's namespace with a label set, for messages.
func (e *OpenMCPEnv) PodsOf(ctx context.Context, labels map[string]string) ([]corev1.Pod, error) {
	var list corev1.PodList
	err := e.Platform.Client.List(ctx, &list, client.InNamespace(e.Namespace), client.MatchingLabels(labels))
	return list.Items, err
}

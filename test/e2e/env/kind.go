package env

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kindcluster "sigs.k8s.io/kind/pkg/cluster"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/owned"
	"github.com/openmcp-project/service-provider-kro/test/kind"
	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

// KindPodNamespace is the provider's namespace in the kind backend: the one config/ installs.
const KindPodNamespace = DefaultPodNamespace

// kindBackend holds what the kind backend started.
type kindBackend struct {
	provider *kindcluster.Provider
	// clusters are the kind clusters' names, platform first.
	clusters []string
	// kubeconfigs are the files of the clusters' kubeconfigs, by role; they name the API
	// servers at the nodes' addresses on kind's network, which the host and every pod reach.
	kubeconfigs map[string]string
	// Kubectl is the kubectl binary (the Kubernetes release of the nodes).
	kubectl string
	// wrapped says whether kind ran through the docker wrapper.
	wrapped bool
	restore func()
}

// startKind starts the kind backend: a platform cluster, which is the onboarding cluster
// too, and one cluster per ControlPlane, all from the offline node image. The registry
// runs on the host at kind's network gateway, with kro's charts, the provider's release
// and Flux's and kro's images, which the nodes pull from it (pushKindImages); Flux's
// controllers run as pods on the platform cluster.
// The provider is installed by the commands of docs/operations.md (InstallProvider), which
// the specs run themselves.
func startKind(ctx context.Context, opts Options) (_ *Env, err error) {
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if runtime.GOOS != "linux" {
		return nil, fmt.Errorf("%s=%s needs Linux (the kind node image is made of binaries built on this machine, which is %s) and a Docker engine", BackendVariable, BackendKind, runtime.GOOS)
	}
	if !kind.DockerAnswers(ctx) {
		return nil, fmt.Errorf("%s=%s needs a Docker engine, and `docker info` does not answer", BackendVariable, BackendKind)
	}
	kb := &kindBackend{provider: kind.Provider(opts.Log), kubeconfigs: map[string]string{}, restore: func() {}}
	e := &Env{
		Backend: BackendKind, Dir: dir, ProviderName: opts.ProviderName, PodNamespace: KindPodNamespace,
		log: opts.Log, kind: kb,
	}
	e.stopBackend = func() error { return e.stopKind() }
	defer func() {
		if err != nil {
			_ = e.Stop()
		}
	}()

	var image string
	if err := e.step("kind node image", func() error {
		image, err = kind.NodeImage(ctx, opts.Log)
		if err != nil {
			return err
		}
		kb.wrapped, kb.restore, err = kind.PrepareDocker(ctx, opts.Log, image)
		return err
	}); err != nil {
		return nil, err
	}
	if err := e.step("kubectl", func() error {
		kb.kubectl, err = testenv.Kubectl.Path(ctx, opts.Log)
		return err
	}); err != nil {
		return nil, err
	}
	roles := []string{"platform"}
	for _, cp := range opts.ControlPlanes {
		roles = append(roles, cp.Name)
	}
	byRole := map[string]*Cluster{}
	for _, role := range roles {
		name := opts.KindClusterPrefix + role
		if err := e.step("kind cluster "+role, func() error {
			c, err := kb.create(ctx, dir, role, name, image)
			byRole[role] = c
			return err
		}); err != nil {
			return nil, err
		}
	}
	e.Platform, e.Onboarding = byRole["platform"], byRole["platform"]
	for _, ref := range opts.ControlPlanes {
		cp := &ControlPlane{Cluster: *byRole[ref.Name], Namespace: ref.Namespace}
		kro := &v1alpha1.Kro{ObjectMeta: metav1.ObjectMeta{Name: ref.Name, Namespace: ref.Namespace}}
		if cp.TenantNamespace, err = owned.TenantNamespace(kro); err != nil {
			return nil, err
		}
		e.ControlPlanes = append(e.ControlPlanes, cp)
		if err := createIfMissing(ctx, e.Onboarding.Client, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ref.Namespace}}); err != nil {
			return nil, err
		}
	}
	if err := e.step("registry", func() error {
		gw, err := kindGateway(ctx)
		if err != nil {
			return err
		}
		e.Registry, err = testenv.StartRegistryOn(ctx, opts.Log, filepath.Join(dir, "registry"), gw)
		if err != nil {
			return err
		}
		e.ChartURL = e.Registry.URL("charts/kro")
		return testenv.PublishKroCharts(ctx, opts.Log, e.Registry, filepath.Join(dir, "publish"), "charts", testenv.KroChartVersions...)
	}); err != nil {
		return nil, err
	}
	if err := e.step("release and images", func() error { return e.pushKindImages(ctx) }); err != nil {
		return nil, err
	}
	if err := e.step("flux", func() error { return e.installFlux(ctx) }); err != nil {
		return nil, err
	}
	return e, nil
}

// create creates one kind cluster and returns it with the kubeconfig other containers use.
func (kb *kindBackend) create(ctx context.Context, dir, role, name, image string) (*Cluster, error) {
	hostKubeconfig := filepath.Join(dir, "kind", name+".host.kubeconfig")
	if err := os.MkdirAll(filepath.Dir(hostKubeconfig), 0o755); err != nil {
		return nil, err
	}
	_ = kb.provider.Delete(name, hostKubeconfig) // a cluster left by an interrupted run
	if err := kind.Create(ctx, kb.provider, name, image, hostKubeconfig); err != nil {
		return nil, err
	}
	kb.clusters = append(kb.clusters, name)
	kc, err := kind.InternalKubeconfig(ctx, kb.provider, name)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "kind", role+".kubeconfig")
	if err := os.WriteFile(path, kc, 0o600); err != nil {
		return nil, err
	}
	kb.kubeconfigs[role] = path
	return newCluster(role, kc)
}

// KindCluster is the kind cluster's name of a role ("platform" or a ControlPlane's name).
func (e *Env) KindCluster(role string) string {
	for _, n := range e.kind.clusters {
		if strings.HasSuffix(n, "-"+role) {
			return n
		}
	}
	return ""
}

// KindKubeconfig is the kubeconfig file of a role's kind cluster.
func (e *Env) KindKubeconfig(role string) string { return e.kind.kubeconfigs[role] }

// Kubectl is the kubectl binary of the kind backend.
func (e *Env) Kubectl() string { return e.kind.kubectl }

// DockerWrapped says whether kind ran through the docker wrapper.
func (e *Env) DockerWrapped() bool { return e.kind.wrapped }

// stopKind deletes the kind clusters and stops the registry.
func (e *Env) stopKind() error {
	kb := e.kind
	var errs []error
	if e.Registry != nil {
		errs = append(errs, e.Registry.Stop())
	}
	if os.Getenv("KIND_RETAIN") == "" {
		for i := len(kb.clusters) - 1; i >= 0; i-- {
			errs = append(errs, kb.provider.Delete(kb.clusters[i], ""))
		}
	}
	kb.restore()
	return errors.Join(errs...)
}

// kindGateway is the IPv4 gateway of kind's Docker network: the host's address as the
// nodes and their pods see it.
func kindGateway(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "docker", "network", "inspect", "kind",
		"-f", "{{range .IPAM.Config}}{{.Gateway}} {{end}}").Output()
	if err != nil {
		return "", fmt.Errorf("kind's network: %w", err)
	}
	for _, gw := range strings.Fields(string(out)) {
		if !strings.Contains(gw, ":") {
			return gw, nil
		}
	}
	return "", fmt.Errorf("kind's network has no IPv4 gateway: %q", out)
}

// KindNodeMemory is what `docker stats` says each kind node's container uses now, one line
// per node.
func (e *Env) KindNodeMemory(ctx context.Context) (string, error) {
	args := []string{"stats", "--no-stream", "--format", "{{.Name}} {{.MemUsage}}"}
	for _, c := range e.kind.clusters {
		args = append(args, c+"-control-plane")
	}
	out, err := exec.CommandContext(ctx, "docker", args...).Output()
	return strings.TrimSpace(string(out)), err
}

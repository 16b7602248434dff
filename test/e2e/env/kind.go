package env

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"time"

	"sigs.k8s.io/kind/pkg/apis/config/v1alpha4"
	kindcluster "sigs.k8s.io/kind/pkg/cluster"
	kindcmd "sigs.k8s.io/kind/pkg/cmd"

	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

// kindCluster is one kind cluster the kind backend creates.
type kindCluster struct {
	// role is "onboarding", "platform" or the ControlPlane's name; name is the kind
	// cluster's name (the prefix and the role).
	role, name string
	config     *v1alpha4.Cluster
}

// kindClusters plans the kind backend's clusters: one per role, each a single node whose
// API server listens on 127.0.0.1, where the provider, Flux and the registry run as local
// processes and reach it. The node image is kind's default for its version.
func kindClusters(prefix string, controlPlanes []ControlPlaneRef) []kindCluster {
	roles := []string{"onboarding", "platform"}
	for _, cp := range controlPlanes {
		roles = append(roles, cp.Name)
	}
	out := make([]kindCluster, 0, len(roles))
	for _, role := range roles {
		cfg := &v1alpha4.Cluster{
			TypeMeta:   v1alpha4.TypeMeta{Kind: "Cluster", APIVersion: "kind.x-k8s.io/v1alpha4"},
			Nodes:      []v1alpha4.Node{{Role: v1alpha4.ControlPlaneRole}},
			Networking: v1alpha4.Networking{APIServerAddress: "127.0.0.1"},
		}
		out = append(out, kindCluster{role: role, name: prefix + role, config: cfg})
	}
	return out
}

// DockerAnswers says whether a Docker engine answers `docker info`.
func DockerAnswers(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	return exec.CommandContext(ctx, "docker", "info").Run() == nil
}

// startKindBackend creates one kind cluster per role (sigs.k8s.io/kind as a library,
// Docker as node provider) and runs the registry and Flux as local processes against
// the platform kind cluster, the way the process backend does: Flux's controllers reach
// the ControlPlanes through the kubeconfigs in the tenant namespaces, which point at the
// kind API servers' ports on 127.0.0.1, and pull the chart from the registry on loopback.
// kro runs inside each ControlPlane, from the image its chart names, so the Docker host
// must be able to pull that image.
//
// This path needs a Docker engine; it has not been run on the machines this project is
// developed and tested on, which have none.
func (e *Env) startKindBackend(ctx context.Context, opts Options) error {
	if !DockerAnswers(ctx) {
		return fmt.Errorf("%s=%s needs a Docker engine, and `docker info` does not answer", BackendVariable, BackendKind)
	}
	provider := kindcluster.NewProvider(kindcluster.ProviderWithDocker(), kindcluster.ProviderWithLogger(kindcmd.NewLogger()))
	kubeconfigDir := filepath.Join(e.Dir, "kind")
	var created []string
	deleteAll := func() error {
		var errs []error
		for i := len(created) - 1; i >= 0; i-- {
			errs = append(errs, provider.Delete(created[i], filepath.Join(kubeconfigDir, created[i]+".kubeconfig")))
		}
		return errors.Join(errs...)
	}
	var flux *testenv.Flux
	e.stopBackend = func() error {
		return errors.Join(flux.Stop(), e.Registry.Stop(), deleteAll())
	}
	byRole := map[string]*Cluster{}
	for _, kc := range kindClusters(opts.KindClusterPrefix, opts.ControlPlanes) {
		role, name := kc.role, kc.name
		if err := e.step("kind cluster "+role, func() error {
			if err := provider.Create(name,
				kindcluster.CreateWithV1Alpha4Config(kc.config),
				kindcluster.CreateWithKubeconfigPath(filepath.Join(kubeconfigDir, name+".kubeconfig")),
				kindcluster.CreateWithWaitForReady(3*time.Minute),
				kindcluster.CreateWithDisplayUsage(false),
				kindcluster.CreateWithDisplaySalutation(false),
			); err != nil {
				return err
			}
			created = append(created, name)
			kc, err := provider.KubeConfig(name, false)
			if err != nil {
				return err
			}
			c, err := newCluster(role, []byte(kc))
			if err != nil {
				return err
			}
			byRole[role] = c
			return nil
		}); err != nil {
			return err
		}
	}
	e.Onboarding, e.Platform = byRole["onboarding"], byRole["platform"]
	for _, ref := range opts.ControlPlanes {
		e.ControlPlanes = append(e.ControlPlanes, &ControlPlane{Cluster: *byRole[ref.Name], Namespace: ref.Namespace})
	}
	if err := e.step("flux CRDs", func() error {
		dirs, err := testenv.FluxCRDDirs(ctx)
		if err != nil {
			return err
		}
		return testenv.InstallCRDs(e.Platform.Config, dirs...)
	}); err != nil {
		return err
	}
	if err := e.step("registry", func() error {
		var err error
		e.Registry, err = testenv.StartRegistry(ctx, e.log, filepath.Join(e.Dir, "registry"))
		return err
	}); err != nil {
		return err
	}
	if err := e.step("publish charts", func() error {
		e.ChartURL = e.Registry.URL("charts/kro")
		return testenv.PublishKroCharts(ctx, e.log, e.Registry, filepath.Join(e.Dir, "publish"), "charts", testenv.KroChartVersions...)
	}); err != nil {
		return err
	}
	return e.step("flux", func() error {
		var err error
		flux, err = testenv.StartFlux(ctx, e.log, testenv.FluxOptions{
			Kubeconfig: e.Platform.Kubeconfig,
			Dir:        filepath.Join(e.Dir, "flux"),
			CAs:        [][]byte{e.Registry.CA.CertPEM},
		})
		e.faults.flux = flux
		return err
	})
}

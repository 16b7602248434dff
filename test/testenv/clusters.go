package testenv

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/openmcp-project/service-provider-kro/clusters"

	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// Cluster is one real kube-apiserver (with its own etcd) started for a test.
type Cluster struct {
	// Name is the role the test gave the cluster, e.g. "onboarding".
	Name string
	// Config authenticates as a cluster admin.
	Config *rest.Config
	// Client is a controller-runtime client on Config with clusters.Scheme.
	Client client.Client
	// Kubeconfig is a self-contained kubeconfig (CA and credentials inline) for Config.
	Kubeconfig []byte

	env     *envtest.Environment
	certDir string
}

// ClusterOptions configures one cluster.
type ClusterOptions struct {
	// Name is the cluster's role.
	Name string
	// CRDDirs are folders of CRD manifests installed before the cluster is handed out.
	CRDDirs []string
	// CRDs are installed before the cluster is handed out, like CRDDirs.
	CRDs []*apiextensionsv1.CustomResourceDefinition
}

// StartClusters starts one API server per option, concurrently, and returns them in the
// same order. On error, the clusters already started are stopped again.
func StartClusters(ctx context.Context, opts ...ClusterOptions) ([]*Cluster, error) {
	assets, err := EnvtestAssets(ctx, os.Stderr)
	if err != nil {
		return nil, fmt.Errorf("providing kube-apiserver and etcd: %w", err)
	}
	out := make([]*Cluster, len(opts))
	errs := make([]error, len(opts))
	var wg sync.WaitGroup
	for i, o := range opts {
		wg.Go(func() { out[i], errs[i] = startCluster(assets, o) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			StopClusters(out...)
			return nil, fmt.Errorf("starting cluster %q: %w", opts[i].Name, err)
		}
	}
	return out, nil
}

func startCluster(assets string, o ClusterOptions) (*Cluster, error) {
	// A cert folder of our own survives an API server restart, so that kubeconfigs
	// handed out before stay valid (see StopAPIServer).
	certDir, err := os.MkdirTemp("", "testenv-"+o.Name+"-")
	if err != nil {
		return nil, err
	}
	env := &envtest.Environment{
		ControlPlane: envtest.ControlPlane{APIServer: &envtest.APIServer{CertDir: certDir}},
		// With clients' watches open, a graceful stop can take long; tests kill it.
		ControlPlaneStopTimeout: 2 * time.Second,
		// Test packages run side by side, on 2 cores in CI: an API server then takes
		// longer to answer than envtest's default of 20 s (seen at a load of 24).
		ControlPlaneStartTimeout: 2 * time.Minute,
		BinaryAssetsDirectory:    assets,
		CRDDirectoryPaths:        o.CRDDirs,
		CRDs:                     o.CRDs,
		ErrorIfCRDPathMissing:    true,
		Scheme:                   clusters.Scheme,
	}
	cfg, err := env.Start()
	if err != nil {
		return nil, err
	}
	c := &Cluster{Name: o.Name, Config: cfg, env: env, certDir: certDir}
	if c.Client, err = client.New(cfg, client.Options{Scheme: clusters.Scheme}); err != nil {
		_ = env.Stop()
		return nil, err
	}
	user, err := env.AddUser(envtest.User{Name: "admin-" + o.Name, Groups: []string{"system:masters"}}, nil)
	if err != nil {
		_ = env.Stop()
		return nil, fmt.Errorf("adding an admin user: %w", err)
	}
	if c.Kubeconfig, err = user.KubeConfig(); err != nil {
		_ = env.Stop()
		return nil, err
	}
	if v, err := discovery.NewDiscoveryClientForConfigOrDie(cfg).ServerVersion(); err == nil {
		fmt.Fprintf(os.Stderr, "testenv: cluster %s: kube-apiserver %s at %s\n", o.Name, v.GitVersion, cfg.Host)
	}
	return c, nil
}

// Stop stops the cluster's API server and etcd.
func (c *Cluster) Stop() error {
	if c == nil || c.env == nil {
		return nil
	}
	// Stop the API server first, without waiting for clients' watches to drain.
	err := c.StopAPIServer()
	if e := c.env.Stop(); err == nil {
		err = e
	}
	_ = os.RemoveAll(c.certDir)
	return err
}

// StopAPIServer stops only the API server, as if the cluster became unreachable; etcd
// keeps the data. StartAPIServer brings it back on the same address with the same
// certificates.
// The API server is asked to stop and killed after two seconds: with watches open it can
// take far longer to drain, and a ControlPlane that vanishes is what tests want anyway.
func (c *Cluster) StopAPIServer() error {
	if err := c.env.ControlPlane.APIServer.Stop(); err != nil && !strings.Contains(err.Error(), "timeout waiting for process") {
		return err
	}
	return nil
}

// StartAPIServer restarts an API server stopped with StopAPIServer and waits until it
// answers.
func (c *Cluster) StartAPIServer() error {
	return c.env.ControlPlane.APIServer.Start()
}

// WriteKubeconfig writes the cluster's kubeconfig into dir and returns its path.
func (c *Cluster) WriteKubeconfig(dir string) (string, error) {
	path := filepath.Join(dir, c.Name+".kubeconfig")
	return path, os.WriteFile(path, c.Kubeconfig, 0o600)
}

// StopClusters stops every non-nil cluster.
func StopClusters(cs ...*Cluster) {
	for _, c := range cs {
		_ = c.Stop()
	}
}

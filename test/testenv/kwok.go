package testenv

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmcp-project/service-provider-kro/clusters"
)

// KwokClusterOptions configures StartKwokCluster.
type KwokClusterOptions struct {
	// Name of the cluster (kwokctl's --name); also its role in messages.
	Name string
	// Dir holds kwokctl's work folder (KWOK_WORKDIR), its kubeconfig and its logs.
	Dir string
	// Nodes is the number of fake nodes; default 1.
	Nodes int
}

// KwokCluster is a cluster made by `kwokctl create cluster --runtime binary`: etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler and the kwok controller run
// as local processes, and the kwok controller plays the kubelet of fake nodes, so pods
// get scheduled and become Ready (nothing runs in them). Deployments become Available,
// which a bare API server never does.
type KwokCluster struct {
	// Name is the cluster's name.
	Name string
	// Config authenticates as a cluster admin.
	Config *rest.Config
	// Client is a controller-runtime client on Config with clusters.Scheme.
	Client client.Client
	// Kubeconfig is a self-contained kubeconfig (CA and credentials inline).
	Kubeconfig []byte

	kwokctl  string
	env      []string
	kubecfg  string
	workdir  string
	stopOnce sync.Once
	stopErr  error
	// releasePort gives the API server's port back once the cluster is deleted.
	releasePort func()
}

// StartKwokCluster builds (once) kwokctl, kwok and the Kubernetes binaries and creates
// a kwok cluster with every component on loopback. Stop deletes it again.
func StartKwokCluster(ctx context.Context, log io.Writer, opts KwokClusterOptions) (*KwokCluster, error) {
	if opts.Nodes == 0 {
		opts.Nodes = 1
	}
	paths, err := ToolPaths(ctx, log, KubeAPIServer, KubeControllerManager, KubeScheduler, Kubectl, Etcd, Kwok, Kwokctl)
	if err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, err
	}
	workdir := filepath.Join(dir, "kwok")
	if err := os.MkdirAll(workdir, 0o755); err != nil {
		return nil, err
	}
	c := &KwokCluster{
		Name:    opts.Name,
		kwokctl: paths[Kwokctl.Name],
		kubecfg: filepath.Join(dir, opts.Name+".kubeconfig"),
		workdir: workdir,
		env: []string{
			"KWOK_WORKDIR=" + workdir,
			"KWOK_KUBECTL_BINARY=" + paths[Kubectl.Name],
			"HOME=" + dir,
		},
	}
	// kwokctl picks its ports by looking for free ones: create one cluster at a time on
	// this machine (also across test processes and checkouts) so that two never pick the same.
	cacheDir, err := ToolsDir()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return nil, err
	}
	unlock, err := lockFile(filepath.Join(cacheDir, "kwokctl-create.lock"))
	if err != nil {
		return nil, err
	}
	defer unlock()
	port, release, err := reserveAPIServerPort(cacheDir)
	if err != nil {
		return nil, err
	}
	componentPorts, releaseComponents, err := reserveComponentPorts(cacheDir)
	if err != nil {
		release()
		return nil, err
	}
	c.releasePort = func() { release(); releaseComponents() }
	configPath := filepath.Join(dir, "kwokctl.yaml")
	// The controller manager and the scheduler run without leader election: each is the
	// only one of its cluster, and with it each exits once it cannot renew its lease for
	// 10 s. A ControlPlane whose API server was stopped that long (StopAPIServer, the fault
	// specs; longer on a busy machine) came back without them, so no Deployment got pods
	// and Helm waited out its 5 minute timeout on every install and upgrade there.
	if err := os.WriteFile(configPath, []byte(`apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokctlConfiguration
options:
  bindAddress: 127.0.0.1
`+componentPorts+`componentsPatches:
- name: kube-controller-manager
  extraArgs:
  - key: leader-elect
    value: "false"
- name: kube-scheduler
  extraArgs:
  - key: leader-elect
    value: "false"
`), 0o644); err != nil {
		_ = c.Stop()
		return nil, err
	}
	start := time.Now()
	_, err = runCommand(c.env, dir, c.kwokctl, "create", "cluster",
		"--name", opts.Name,
		"--config", configPath,
		"--runtime", "binary",
		"--kube-apiserver-port", strconv.Itoa(port), // reserved here: reserveAPIServerPort
		"--kubeconfig", c.kubecfg,
		"--kube-apiserver-binary", paths[KubeAPIServer.Name],
		"--kube-controller-manager-binary", paths[KubeControllerManager.Name],
		"--kube-scheduler-binary", paths[KubeScheduler.Name],
		"--etcd-binary", paths[Etcd.Name],
		"--kwok-controller-binary", paths[Kwok.Name],
		"--wait", "2m",
	)
	if err != nil {
		_ = c.Stop()
		return nil, fmt.Errorf("creating kwok cluster %s: %w", opts.Name, err)
	}
	if err := c.loadKubeconfig(); err != nil {
		_ = c.Stop()
		return nil, err
	}
	for i := range opts.Nodes {
		if err := c.Client.Create(ctx, FakeNode(fmt.Sprintf("kwok-node-%d", i))); err != nil {
			_ = c.Stop()
			return nil, fmt.Errorf("creating a fake node in %s: %w", opts.Name, err)
		}
	}
	if err := c.restartExited(ctx, log); err != nil {
		_ = c.Stop()
		return nil, err
	}
	fmt.Fprintf(log, "testenv: kwok cluster %s at %s ready in %s\n", opts.Name, c.Config.Host, time.Since(start).Round(100*time.Millisecond))
	return c, nil
}

func (c *KwokCluster) loadKubeconfig() error {
	raw, err := clientcmd.LoadFromFile(c.kubecfg)
	if err != nil {
		return fmt.Errorf("reading the kubeconfig of kwok cluster %s: %w", c.Name, err)
	}
	raw.CurrentContext = "kwok-" + c.Name
	if _, ok := raw.Contexts[raw.CurrentContext]; !ok {
		return fmt.Errorf("kubeconfig %s has no context %s", c.kubecfg, raw.CurrentContext)
	}
	if err := clientcmdapi.MinifyConfig(raw); err != nil {
		return err
	}
	if err := clientcmdapi.FlattenConfig(raw); err != nil {
		return err
	}
	if c.Kubeconfig, err = clientcmd.Write(*raw); err != nil {
		return err
	}
	if c.Config, err = clientcmd.RESTConfigFromKubeConfig(c.Kubeconfig); err != nil {
		return err
	}
	c.Client, err = client.New(c.Config, client.Options{Scheme: clusters.Scheme})
	return err
}

// Stop deletes the cluster and stops its processes; it is safe on a nil cluster, more
// than once, and when creation failed half-way.
func (c *KwokCluster) Stop() error {
	if c == nil {
		return nil
	}
	c.stopOnce.Do(func() {
		c.stopErr = c.stop()
		if c.releasePort != nil {
			c.releasePort()
		}
	})
	return c.stopErr
}

func (c *KwokCluster) stop() error {
	// kwokctl deletes the cluster's folder, logs included: keep the logs.
	logs, _ := filepath.Glob(filepath.Join(c.workdir, "clusters", c.Name, "logs", "*.log"))
	for _, f := range logs {
		if data, err := os.ReadFile(f); err == nil {
			_ = os.MkdirAll(c.LogDir(), 0o755)
			_ = os.WriteFile(filepath.Join(c.LogDir(), filepath.Base(f)), data, 0o644)
		}
	}
	_, err := runCommand(c.env, filepath.Dir(c.workdir), c.kwokctl, "delete", "cluster", "--name", c.Name, "--kubeconfig", c.kubecfg)
	if err == nil {
		return nil
	}
	// kwokctl starts its components detached: kill whatever it left behind.
	for _, pid := range c.componentPids() {
		_ = killPid(pid)
	}
	return err
}

// componentPids reads kwokctl's pid files: the pid of each component by its pid file.
func (c *KwokCluster) componentPids() map[string]int {
	files, _ := filepath.Glob(filepath.Join(c.workdir, "clusters", c.Name, "pids", "*.pid"))
	pids := make(map[string]int, len(files))
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if pid, err := strconv.Atoi(strings.TrimSpace(string(data))); err == nil && pid > 1 {
			pids[f] = pid
		}
	}
	return pids
}

// StopAPIServer kills the cluster's kube-apiserver with SIGKILL, as a ControlPlane whose
// API server goes down; etcd and the other components keep running, and so the data
// stays. StartAPIServer brings it back on the same address with the same certificates,
// so kubeconfigs handed out before stay valid.
func (c *KwokCluster) StopAPIServer() error {
	pidPath := filepath.Join(c.workdir, "clusters", c.Name, "pids", "kube-apiserver.pid")
	data, err := os.ReadFile(pidPath)
	if err != nil {
		return fmt.Errorf("kwok cluster %s: %w", c.Name, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 1 {
		return fmt.Errorf("kwok cluster %s: pid file %s holds %q", c.Name, pidPath, data)
	}
	if err := killPid(pid); err != nil {
		return fmt.Errorf("killing kube-apiserver of kwok cluster %s (pid %d): %w", c.Name, pid, err)
	}
	// kwokctl runs its components detached, so nobody here reaps them: wait until the
	// process is gone or a zombie, then remove the pid file so that kwokctl does not take
	// a zombie for a running API server.
	deadline := time.Now().Add(10 * time.Second)
	for processAlive(pid) {
		if time.Now().After(deadline) {
			return fmt.Errorf("kube-apiserver of kwok cluster %s (pid %d) did not die on SIGKILL", c.Name, pid)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return os.Remove(pidPath)
}

// StartAPIServer starts the kube-apiserver stopped with StopAPIServer again (kwokctl
// start cluster starts what is not running) and waits until the cluster is ready.
func (c *KwokCluster) StartAPIServer(ctx context.Context) error {
	if _, err := runCommand(c.env, filepath.Dir(c.workdir), c.kwokctl, "start", "cluster", "--name", c.Name, "--wait", "2m"); err != nil {
		return fmt.Errorf("starting the API server of kwok cluster %s: %w", c.Name, err)
	}
	// kwokctl's wait asks through its own kubeconfig; make sure the one handed out works too.
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := c.discovery().ServerVersion()
		if err == nil {
			return c.restartExited(ctx, io.Discard)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kwok cluster %s does not answer after its API server was started: %w", c.Name, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (c *KwokCluster) discovery() *discovery.DiscoveryClient {
	cfg := rest.CopyConfig(c.Config)
	cfg.Timeout = 2 * time.Second
	return discovery.NewDiscoveryClientForConfigOrDie(cfg)
}

// LogDir is where the logs of the cluster's components are kept once it is stopped;
// while it runs, they are in kwokctl's work folder under the same parent.
func (c *KwokCluster) LogDir() string {
	return filepath.Join(filepath.Dir(c.workdir), "logs")
}

// WriteKubeconfig writes the cluster's kubeconfig into dir and returns its path.
func (c *KwokCluster) WriteKubeconfig(dir string) (string, error) {
	path := filepath.Join(dir, c.Name+"-flat.kubeconfig")
	return path, os.WriteFile(path, c.Kubeconfig, 0o600)
}

// FakeNode returns a node that kwok manages (it plays the node's kubelet).
func FakeNode(name string) *corev1.Node {
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("32"),
		corev1.ResourceMemory: resource.MustParse("256Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: name,
			Annotations: map[string]string{
				"node.alpha.kubernetes.io/ttl": "0",
				"kwok.x-k8s.io/node":           "fake",
			},
			Labels: map[string]string{
				"kubernetes.io/hostname": name,
				"kubernetes.io/os":       "linux",
				"kubernetes.io/arch":     "amd64",
				"kubernetes.io/role":     "agent",
				"type":                   "kwok",
			},
		},
		Status: corev1.NodeStatus{
			Allocatable: capacity,
			Capacity:    capacity,
		},
	}
}

// restartExited starts again the components of the cluster that have exited. kwokctl
// starts each once and watches none: on a busy machine kube-controller-manager gave up
// waiting for its API server to become healthy and exited at start ("failed to wait for
// apiserver being healthy"), and the cluster stayed without it, so no Deployment got pods
// and Helm waited out its timeout (the fault of 20 installs at once, 2026-12-07).
// `kwokctl start cluster` starts what has no live pid file.
func (c *KwokCluster) restartExited(ctx context.Context, log io.Writer) error {
	var exited []string
	for f, pid := range c.componentPids() {
		if !processAlive(pid) {
			exited = append(exited, strings.TrimSuffix(filepath.Base(f), ".pid"))
			_ = os.Remove(f)
		}
	}
	if len(exited) == 0 {
		return nil
	}
	fmt.Fprintf(log, "testenv: kwok cluster %s: %s exited, starting it again\n", c.Name, strings.Join(exited, ", "))
	if _, err := runCommand(c.env, filepath.Dir(c.workdir), c.kwokctl, "start", "cluster", "--name", c.Name, "--wait", "2m"); err != nil {
		return fmt.Errorf("starting %s of kwok cluster %s again: %w", strings.Join(exited, ", "), c.Name, err)
	}
	return ctx.Err()
}

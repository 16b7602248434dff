package kind

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"

	"sigs.k8s.io/kind/pkg/apis/config/v1alpha4"
	kindcluster "sigs.k8s.io/kind/pkg/cluster"
	"sigs.k8s.io/kind/pkg/cluster/nodeutils"
	kindcmd "sigs.k8s.io/kind/pkg/cmd"
)

// kubeletOnCgroupV1 lets kubelet 1.35 and later run on a cgroup v1 host: it refuses to
// unless told otherwise. On cgroup v2 it changes nothing.
const kubeletOnCgroupV1 = `kind: KubeletConfiguration
failCgroupV1: false
`

const snapshotterEnv = "KIND_EXPERIMENTAL_CONTAINERD_SNAPSHOTTER"

// registryHosts has containerd read a registry's host configuration from CertsDir (kind's
// own containerd configuration does not set config_path), where TrustRegistry writes it.
var registryHosts = `[plugins."io.containerd.grpc.v1.cri".registry]
  config_path = "` + CertsDir + `"
`

// Config is the kind configuration of a single-node cluster on image, its API server
// published on 127.0.0.1.
func Config(image string) *v1alpha4.Cluster {
	cfg := &v1alpha4.Cluster{
		TypeMeta:                v1alpha4.TypeMeta{Kind: "Cluster", APIVersion: "kind.x-k8s.io/v1alpha4"},
		Nodes:                   []v1alpha4.Node{{Role: v1alpha4.ControlPlaneRole, Image: image}},
		Networking:              v1alpha4.Networking{APIServerAddress: "127.0.0.1"},
		KubeadmConfigPatches:    []string{kubeletOnCgroupV1},
		ContainerdConfigPatches: []string{registryHosts},
	}
	v1alpha4.SetDefaultsCluster(cfg)
	return cfg
}

// Provider is kind's cluster provider on Docker, logging to log.
func Provider(log io.Writer) *kindcluster.Provider {
	return kindcluster.NewProvider(kindcluster.ProviderWithDocker(), kindcluster.ProviderWithLogger(kindcmd.NewLogger()))
}

// Create creates the cluster name from image and writes its kubeconfig (the API server on
// 127.0.0.1) to kubeconfig. It waits until the node is Ready.
func Create(ctx context.Context, p *kindcluster.Provider, name, image, kubeconfig string) error {
	// kind's entrypoint picks containerd's fuse-overlayfs snapshotter when the node's root
	// is a FUSE file system (Docker's fuse-overlayfs storage driver). This node image has no
	// fuse-overlayfs snapshotter; overlayfs works on the node's /var, a Docker volume on the
	// host's own file system, and kind passes this variable on to the node.
	if os.Getenv(snapshotterEnv) == "" {
		if err := os.Setenv(snapshotterEnv, "overlayfs"); err != nil {
			return err
		}
	}
	return p.Create(name,
		kindcluster.CreateWithV1Alpha4Config(Config(image)),
		kindcluster.CreateWithKubeconfigPath(kubeconfig),
		kindcluster.CreateWithWaitForReady(4*time.Minute),
		kindcluster.CreateWithDisplayUsage(false),
		kindcluster.CreateWithDisplaySalutation(false),
		// KIND_RETAIN keeps a node that failed to come up, to look into it.
		kindcluster.CreateWithRetain(os.Getenv("KIND_RETAIN") != ""),
	)
}

// InternalKubeconfig is the cluster's kubeconfig as seen from other containers on kind's
// Docker network (pods of other kind clusters among them): the API server at the node's
// address on that network.
func InternalKubeconfig(ctx context.Context, p *kindcluster.Provider, name string) ([]byte, error) {
	kc, err := p.KubeConfig(name, true)
	if err != nil {
		return nil, err
	}
	host := name + "-control-plane"
	out, err := exec.CommandContext(ctx, "docker", "inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", host).Output()
	if err != nil {
		return nil, fmt.Errorf("address of %s: %w", host, err)
	}
	ip := strings.TrimSpace(string(out))
	// Pods resolve names through CoreDNS, which does not know Docker's container names.
	return bytes.ReplaceAll([]byte(kc), []byte("https://"+host+":"), []byte("https://"+ip+":")), nil
}

// LoadImageArchive imports a Docker image archive into every node of the cluster, as
// `kind load image-archive` does.
func LoadImageArchive(p *kindcluster.Provider, cluster, archive string) error {
	nodes, err := p.ListInternalNodes(cluster)
	if err != nil {
		return err
	}
	for _, n := range nodes {
		f, err := os.Open(archive)
		if err != nil {
			return err
		}
		err = nodeutils.LoadImageArchive(n, f)
		_ = f.Close()
		if err != nil {
			return fmt.Errorf("loading %s into %s: %w", archive, n.String(), err)
		}
	}
	return nil
}

package testenv

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// The kube-controller-manager of a bare API server: Deployments and Jobs get pods for the
// Kubelet to run, deleted namespaces are emptied, owned objects are garbage collected.

// KubeControllerManagerOptions configures StartKubeControllerManager.
type KubeControllerManagerOptions struct {
	// Kubeconfig is a self-contained admin kubeconfig of the cluster.
	Kubeconfig []byte
	// Dir holds the kubeconfig and the log.
	Dir string
	// Controllers to run; default the Deployment, ReplicaSet, Job, namespace and garbage
	// collector controllers.
	Controllers []string
}

// StartKubeControllerManager runs kube-controller-manager against a bare API server (such
// as an envtest cluster), so that Jobs and Deployments get pods (a Kubelet then runs them),
// deleted namespaces are emptied and removed, and owned objects are garbage collected. It serves nothing (no secure port) and does no
// leader election.
func StartKubeControllerManager(ctx context.Context, log io.Writer, opts KubeControllerManagerOptions) (*Process, error) {
	bin, err := KubeControllerManager.Path(ctx, log)
	if err != nil {
		return nil, err
	}
	if len(opts.Controllers) == 0 {
		opts.Controllers = []string{"deployment-controller", "replicaset-controller", "job-controller",
			"namespace-controller", "garbage-collector-controller"}
	}
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, err
	}
	kubeconfig := filepath.Join(opts.Dir, "kube-controller-manager.kubeconfig")
	if err := os.WriteFile(kubeconfig, opts.Kubeconfig, 0o600); err != nil {
		return nil, err
	}
	p, err := StartProcess("kube-controller-manager", opts.Dir, nil, bin,
		"--kubeconfig="+kubeconfig,
		"--leader-elect=false",
		"--secure-port=0",
		"--controllers="+strings.Join(opts.Controllers, ","),
		"--concurrent-deployment-syncs=2", "--concurrent-replicaset-syncs=2", "--concurrent-job-syncs=2",
	)
	if err != nil {
		return nil, err
	}
	select { // it fails fast on bad flags
	case <-p.Exited():
		return nil, fmt.Errorf("kube-controller-manager exited: %w\n%s", p.err, p.LogTail(20))
	case <-time.After(time.Second):
	}
	return p, nil
}

package testenv

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// KroControllerOptions configures StartKroController.
type KroControllerOptions struct {
	// Name names the process and its log file; default "kro-controller".
	Name string
	// Kubeconfig is a self-contained kubeconfig of the cluster kro runs against (a
	// ControlPlane). kro's CRDs must be installed there (by its chart, or InstallCRDs
	// with KroCRDDir).
	Kubeconfig []byte
	// Dir holds the kubeconfig and the log.
	Dir string
	// Args are extra flags for the controller.
	Args []string
	// Files are written into Dir beside the kubeconfig, for a kubeconfig that names files
	// by relative paths (the credential the provider prepares for kro on a workload
	// cluster: a token and a CA).
	Files map[string][]byte
}

// StartKroController builds (once) and runs kro's controller as a process, leader
// election off and its ports on loopback, and waits until it reports ready.
func StartKroController(ctx context.Context, log io.Writer, opts KroControllerOptions) (*Process, error) {
	bin, err := KroController.Path(ctx, log)
	if err != nil {
		return nil, err
	}
	if opts.Name == "" {
		opts.Name = "kro-controller"
	}
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, err
	}
	kubeconfig := filepath.Join(opts.Dir, opts.Name+".kubeconfig")
	if err := os.WriteFile(kubeconfig, opts.Kubeconfig, 0o600); err != nil {
		return nil, err
	}
	for name, data := range opts.Files {
		if err := os.WriteFile(filepath.Join(opts.Dir, name), data, 0o600); err != nil {
			return nil, err
		}
	}
	addrs, err := FreeLoopbackAddrs(2)
	if err != nil {
		return nil, err
	}
	args := append([]string{
		"--leader-elect=false",
		"--metrics-bind-address=" + addrs[0],
		"--health-probe-bind-address=" + addrs[1],
	}, opts.Args...)
	p, err := StartProcess(opts.Name, opts.Dir, []string{"KUBECONFIG=" + kubeconfig, "HOME=" + opts.Dir}, bin, args...)
	if err != nil {
		return nil, err
	}
	if err := waitHealthy(ctx, p, "http://"+addrs[1]+"/readyz", time.Minute); err != nil {
		_ = p.Stop()
		return nil, err
	}
	return p, nil
}

// InstallCRDs installs the CRD manifests in dirs into the cluster of cfg and waits
// until they are served.
func InstallCRDs(cfg *rest.Config, dirs ...string) error {
	_, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{Paths: dirs, ErrorIfPathMissing: true})
	return err
}

// AvailableKroDeployment is kro's Deployment in kro-system as Helm makes it for release
// kro (the chart's labels, Helm's marks of the release), done with its rollout of two
// replicas.
func AvailableKroDeployment() *appsv1.Deployment {
	return AvailableReleaseDeployment("kro-system", "kro")
}

// AvailableReleaseDeployment is kro's Deployment as Helm makes it for a release in a
// namespace, done with its rollout of two replicas.
func AvailableReleaseDeployment(namespace, release string) *appsv1.Deployment {
	selector := map[string]string{"app.kubernetes.io/name": "kro", "app.kubernetes.io/instance": release}
	labels := map[string]string{"app.kubernetes.io/name": "kro", "app.kubernetes.io/instance": release, "app.kubernetes.io/managed-by": "Helm"}
	annotations := map[string]string{"meta.helm.sh/release-name": release, "meta.helm.sh/release-namespace": namespace}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: release, Labels: labels, Annotations: annotations, Generation: 1},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(2)),
			Selector: &metav1.LabelSelector{MatchLabels: selector},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: selector},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "kro", Image: "registry.k8s.io/kro/kro:v0.9.4"}}},
			},
		},
		Status: appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: 2, UpdatedReplicas: 2, ReadyReplicas: 2, AvailableReplicas: 2,
			Conditions: []appsv1.DeploymentCondition{{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue, Reason: "MinimumReplicasAvailable",
				Message: "Deployment has minimum availability.", LastUpdateTime: metav1.Now(), LastTransitionTime: metav1.Now()}}},
	}
}

// PlayKroDeployment creates kro's Deployment (AvailableKroDeployment) on a ControlPlane
// where no controller runs, and plays its controller: done with its rollout, as a
// rollout's health gate asks.
func PlayKroDeployment(ctx context.Context, c client.Client) error {
	return PlayDeployment(ctx, c, AvailableKroDeployment())
}

// PlayDeployment creates a Deployment, and its namespace, on a cluster where no
// controller runs, and gives it the status d carries. One that exists is left alone.
func PlayDeployment(ctx context.Context, c client.Client, d *appsv1.Deployment) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: d.Namespace}}
	if err := c.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	status := d.Status
	if err := c.Create(ctx, d); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	}
	d.Status = status
	d.Status.ObservedGeneration = d.Generation
	return c.Status().Update(ctx, d)
}

package env

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

// FluxNamespace is where the kind backend runs Flux's controllers.
const FluxNamespace = "flux-system"

// installFlux runs source-controller and helm-controller as Deployments on the platform
// cluster, from the images pushKindImages pushed (pulled with the registry's credentials
// through their ServiceAccounts' image pull secret), the way Flux's own install does in
// spirit: a ServiceAccount each bound to cluster-admin, source-controller's artifacts
// served through its Service, and the registry's CA as the only trusted root (the
// registry is the only TLS server source-controller talks to; helm-controller reaches the
// ControlPlanes with the CAs in their kubeconfigs).
func (e *Env) installFlux(ctx context.Context) error {
	dirs, err := testenv.FluxCRDDirs(ctx)
	if err != nil {
		return err
	}
	if err := testenv.InstallCRDs(e.Platform.Config, dirs...); err != nil {
		return err
	}
	c := e.Platform.Client
	objs := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: FluxNamespace}},
		e.Registry.PullSecret(FluxNamespace, PullSecretName),
		&corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: FluxNamespace, Name: "registry-ca"},
			Data:       map[string]string{"ca.crt": string(e.Registry.CA.CertPEM)},
		},
		&corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: FluxNamespace, Name: "source-controller"},
			Spec: corev1.ServiceSpec{
				Selector: map[string]string{"app": "source-controller"},
				Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}},
			},
		},
	}
	for _, name := range []string{"source-controller", "helm-controller"} {
		objs = append(objs,
			&corev1.ServiceAccount{
				ObjectMeta:       metav1.ObjectMeta{Namespace: FluxNamespace, Name: name},
				ImagePullSecrets: []corev1.LocalObjectReference{{Name: PullSecretName}},
			},
			&rbacv1.ClusterRoleBinding{
				ObjectMeta: metav1.ObjectMeta{Name: "flux-" + name},
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
				Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: FluxNamespace, Name: name}},
			},
		)
	}
	objs = append(objs,
		fluxDeployment("source-controller", e.fluxImage("source-controller", testenv.SourceControllerModule), []string{
			"--storage-path=/data",
			"--storage-adv-addr=source-controller.$(RUNTIME_NAMESPACE).svc.cluster.local.",
		}, corev1.ContainerPort{Name: "http", ContainerPort: 9090}),
		fluxDeployment("helm-controller", e.fluxImage("helm-controller", testenv.HelmControllerModule), nil),
	)
	for _, o := range objs {
		if err := createIfMissing(ctx, c, o); err != nil {
			return fmt.Errorf("%T %s: %w", o, o.GetName(), err)
		}
	}
	for _, name := range []string{"source-controller", "helm-controller"} {
		if err := waitDeploymentAvailable(ctx, c, FluxNamespace, name, 3*time.Minute); err != nil {
			return err
		}
	}
	return nil
}

func fluxDeployment(name, image string, args []string, ports ...corev1.ContainerPort) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: FluxNamespace, Name: name, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					ServiceAccountName: name,
					Containers: []corev1.Container{{
						Name:  "manager",
						Image: image,
						Args: append([]string{
							"--watch-all-namespaces=true",
							"--enable-leader-election=false",
							"--log-level=info",
							"--metrics-addr=:8080",
							"--health-addr=:9440",
						}, args...),
						Env: []corev1.EnvVar{
							{Name: "RUNTIME_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
							{Name: "SSL_CERT_FILE", Value: "/etc/registry-ca/ca.crt"},
							{Name: "HOME", Value: "/tmp"},
						},
						Ports: append([]corev1.ContainerPort{{Name: "healthz", ContainerPort: 9440}, {Name: "metrics", ContainerPort: 8080}}, ports...),
						ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{
							HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromString("healthz")},
						}},
						VolumeMounts: []corev1.VolumeMount{
							{Name: "data", MountPath: "/data"},
							{Name: "tmp", MountPath: "/tmp"},
							{Name: "registry-ca", MountPath: "/etc/registry-ca", ReadOnly: true},
						},
					}},
					Volumes: []corev1.Volume{
						{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
						{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
						{Name: "registry-ca", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
							LocalObjectReference: corev1.LocalObjectReference{Name: "registry-ca"},
						}}},
					},
				},
			},
		},
	}
}

// waitDeploymentAvailable waits until the Deployment's pods of its current generation are
// all available.
func waitDeploymentAvailable(ctx context.Context, c client.Client, namespace, name string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		d := &appsv1.Deployment{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, d); err != nil {
			last = err.Error()
		} else if d.Status.ObservedGeneration >= d.Generation && d.Status.UpdatedReplicas == ptr.Deref(d.Spec.Replicas, 1) &&
			d.Status.AvailableReplicas == ptr.Deref(d.Spec.Replicas, 1) && d.Status.UnavailableReplicas == 0 {
			return nil
		} else {
			last = fmt.Sprintf("%d of %d available, %d updated", d.Status.AvailableReplicas, ptr.Deref(d.Spec.Replicas, 1), d.Status.UpdatedReplicas)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
	return fmt.Errorf("the Deployment %s/%s is not available after %s: %s", namespace, name, timeout, last)
}

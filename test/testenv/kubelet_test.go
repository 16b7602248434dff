//go:build e2e

package testenv

import (
	"context"
	"crypto/x509"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmcp-project/service-provider-kro/hack/image/ociimage"
)

// podProgram is the container of the kubelet test: it prints its argv and environment,
// lists pods with its ServiceAccount's credential, then exits or serves as its args say.
const podProgram = `package main

import (
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

func main() {
	fmt.Println("argv:", strings.Join(os.Args, " "))
	for _, kv := range os.Environ() {
		fmt.Println("env:", kv)
	}
	kc, err := os.ReadFile(os.Getenv("KUBECONFIG"))
	fmt.Println("kubeconfig:", len(kc) > 0, err)
	switch os.Args[len(os.Args)-1] {
	case "fail":
		os.Exit(3)
	case "serve":
		go http.ListenAndServe("127.0.0.1:0", nil)
		s := make(chan os.Signal, 1)
		signal.Notify(s, syscall.SIGTERM)
		<-s
		fmt.Println("terminated")
	}
}
`

// TestKubeletRunsPods runs a Job and a Deployment on a bare API server with
// kube-controller-manager and the Kubelet, from an image in a registry.
func TestKubeletRunsPods(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	dir := testDir(t, "kubelet-test")
	image, cas := podProgramImage(ctx, t, dir)

	cs, err := StartClusters(ctx, ClusterOptions{Name: "platform"})
	if err != nil {
		t.Fatal(err)
	}
	defer StopClusters(cs...)
	c := cs[0].Client
	k, stopKubelet := startKubeletWithKCM(ctx, t, cs[0], dir, cas)
	defer stopKubelet()

	ns := "work"
	createAll(ctx, t, c,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "runner"}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "runner"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "view"},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "runner", Namespace: ns}}},
	)
	podSpec := func(args []string, policy corev1.RestartPolicy) corev1.PodTemplateSpec {
		return corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "prog"}},
			Spec: corev1.PodSpec{
				ServiceAccountName: "runner", RestartPolicy: policy,
				Containers: []corev1.Container{{Name: "prog", Image: image, Args: args, Env: []corev1.EnvVar{
					{Name: "A", Value: "a"}, {Name: "B", Value: "$(A)-$(IMAGE_VAR)"},
					{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
					{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
				}}},
			},
		}
	}
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ok"}, Spec: batchv1.JobSpec{Template: podSpec([]string{"exit"}, corev1.RestartPolicyNever)}}
	failing := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fails"}, Spec: batchv1.JobSpec{
		BackoffLimit: ptr.To(int32(1)), Template: podSpec([]string{"fail"}, corev1.RestartPolicyNever)}}
	depl := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "serve"}, Spec: appsv1.DeploymentSpec{
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "prog"}}, Template: podSpec([]string{"serve"}, corev1.RestartPolicyAlways)}}
	createAll(ctx, t, c, job, failing, depl)
	waitFor(t, "the Job succeeds", func() bool {
		return c.Get(ctx, client.ObjectKeyFromObject(job), job) == nil && job.Status.Succeeded == 1
	})
	waitFor(t, "the failing Job fails", func() bool {
		if c.Get(ctx, client.ObjectKeyFromObject(failing), failing) != nil {
			return false
		}
		for _, cond := range failing.Status.Conditions {
			if cond.Type == batchv1.JobFailed && cond.Status == corev1.ConditionTrue {
				return true
			}
		}
		return false
	})
	waitFor(t, "the Deployment is available", func() bool {
		return c.Get(ctx, client.ObjectKeyFromObject(depl), depl) == nil && depl.Status.AvailableReplicas == 1
	})
	checkJobPodLog(ctx, t, c, k, ns)
	// Deleting the Deployment's pod: the process gets SIGTERM, a new pod replaces it.
	var served corev1.PodList
	if err := c.List(ctx, &served, client.InNamespace(ns), client.HasLabels{"pod-template-hash"}); err != nil || len(served.Items) != 1 {
		t.Fatalf("Deployment pods: %v %v", served.Items, err)
	}
	old := served.Items[0]
	if err := c.Delete(ctx, &old); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the deleted pod is gone and replaced", func() bool {
		if c.List(ctx, &served, client.InNamespace(ns), client.HasLabels{"pod-template-hash"}) != nil {
			return false
		}
		return len(served.Items) == 1 && served.Items[0].UID != old.UID && served.Items[0].Status.Phase == corev1.PodRunning
	})
	if log, _ := os.ReadFile(k.PodLogPath(ns, old.Name)); !strings.Contains(string(log), "terminated") {
		t.Errorf("the deleted pod's process did not get SIGTERM:\n%s", log)
	}
}

// podProgramImage builds podProgram static, makes an image of it with ENTRYPOINT and CMD,
// and pushes it to an in-memory registry (stopped with the test). It returns the image's
// reference and the registry's CA.
func podProgramImage(ctx context.Context, t *testing.T, dir string) (string, *x509.CertPool) {
	t.Helper()
	src := filepath.Join(dir, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	_ = os.WriteFile(filepath.Join(src, "go.mod"), []byte("module podprogram\n\ngo 1.26\n"), 0o644)
	_ = os.WriteFile(filepath.Join(src, "main.go"), []byte(podProgram), 0o644)
	bin := filepath.Join(dir, "podprogram")
	buildLinuxBinary(ctx, t, src, ".", bin, "GOFLAGS=-mod=mod")
	platform := "linux/" + runtime.GOARCH
	spec := ociimage.Spec{Platforms: []string{platform}, BinaryPath: "/bin/prog", Entrypoint: []string{"/bin/prog", "from-entrypoint"},
		Cmd: []string{"from-cmd"}, Env: []string{"IMAGE_VAR=image"}, Created: time.Unix(0, 0)}
	idx, err := ociimage.Build(spec, map[string]string{platform: bin})
	if err != nil {
		t.Fatal(err)
	}
	return pushToMemoryRegistry(ctx, t, idx, "prog:v1")
}

// waitFor polls cond until it holds, for up to two minutes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: timed out", what)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// checkJobPodLog checks what the "ok" Job's pod printed: the command line of ENTRYPOINT and
// args, the resolved environment and the kubeconfig.
func checkJobPodLog(ctx context.Context, t *testing.T, c client.Client, k *Kubelet, ns string) {
	t.Helper()
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		log, _ := os.ReadFile(k.PodLogPath(ns, p.Name))
		t.Logf("pod %s: %s\n%s", p.Name, p.Status.Phase, log)
		if p.Labels["job-name"] == "ok" {
			for _, want := range []string{"argv: /bin/prog from-entrypoint exit", "env: B=a-image", "env: POD_NAME=" + p.Name, "env: POD_NAMESPACE=" + ns, "kubeconfig: true"} {
				if !strings.Contains(string(log), want) {
					t.Errorf("pod %s's log lacks %q", p.Name, want)
				}
			}
		}
	}
}

func createAll(ctx context.Context, t *testing.T, c client.Client, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
}

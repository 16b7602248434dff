//go:build e2e

package kind

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	kindcluster "sigs.k8s.io/kind/pkg/cluster"

	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

// TestSmoke is the kind backend's first proof: a cluster from the offline node image
// comes up with its node Ready, its control plane, kube-proxy and CoreDNS running from the
// images built from binaries, and a pod runs a locally built image loaded the way
// `kind load image-archive` loads it. It needs a Docker engine; the test-kind task runs it
// where one answers.
func TestSmoke(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	if !DockerAnswers(ctx) {
		t.Skip("no Docker engine answers `docker info`; the kind tests need one")
	}
	log := testLog()
	start := time.Now()
	image, err := NodeImage(ctx, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("node image %s in %s", image, time.Since(start).Round(time.Second))
	wrapped, restore, err := PrepareDocker(ctx, log, image)
	if err != nil {
		t.Fatal(err)
	}
	defer restore()
	t.Logf("docker wrapper in use: %t", wrapped)

	p := Provider(log)
	name := "kro-smoke"
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	_ = p.Delete(name, kubeconfig)
	start = time.Now()
	if err := Create(ctx, p, name, image, kubeconfig); err != nil {
		t.Fatalf("creating the cluster: %v", err)
	}
	t.Cleanup(func() {
		if err := p.Delete(name, kubeconfig); err != nil {
			t.Errorf("deleting the cluster: %v", err)
		}
	})
	t.Logf("cluster %s created and its node Ready in %s", name, time.Since(start).Round(time.Second))

	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes.Items) != 1 || !nodeReady(nodes.Items[0]) || nodes.Items[0].Status.NodeInfo.KubeletVersion != KubernetesVersion {
		t.Fatalf("nodes: %+v", nodes.Items)
	}

	controlPlaneRunning(ctx, t, cs)

	runLocalImage(ctx, t, log, p, name, cs)
	if out, err := exec.CommandContext(ctx, "docker", "stats", "--no-stream", "--format", "{{.Name}} {{.MemUsage}}", name+"-control-plane").Output(); err == nil {
		t.Logf("memory of the node: %s", strings.TrimSpace(string(out)))
	}
}

// controlPlaneRunning waits until the control plane's own pods, kube-proxy and CoreDNS run
// Ready: all from the images built from binaries.
func controlPlaneRunning(ctx context.Context, t *testing.T, cs *kubernetes.Clientset) {
	t.Helper()
	waitFor(ctx, t, "kube-system's pods Running and Ready (API server, controller manager, scheduler, etcd, kube-proxy, CoreDNS)", func() (bool, string) {
		pods, err := cs.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		var seen []string
		want := map[string]bool{"kube-apiserver": false, "kube-controller-manager": false, "kube-scheduler": false, "etcd": false, "kube-proxy": false, "coredns": false}
		for _, pod := range pods.Items {
			seen = append(seen, pod.Name+"="+string(pod.Status.Phase))
			for k := range want {
				if strings.HasPrefix(pod.Name, k) && podReady(pod) {
					want[k] = true
				}
			}
		}
		for _, ok := range want {
			if !ok {
				return false, strings.Join(seen, " ")
			}
		}
		return true, ""
	})

}

// runLocalImage runs a pod from an image built here from a binary (kubectl, which prints
// its version), loaded into the node the way `kind load image-archive` loads it.
func runLocalImage(ctx context.Context, t *testing.T, log io.Writer, p *kindcluster.Provider, name string, cs *kubernetes.Clientset) {
	t.Helper()
	archive := filepath.Join(t.TempDir(), "smoke.tar")
	kubectl, err := testenv.Kubectl.Path(ctx, log)
	if err != nil {
		t.Fatal(err)
	}
	const smokeImage = "kro.test/smoke:v1"
	if err := writeComponent(component{tags: []string{smokeImage}, binary: kubectl, inImage: "/usr/local/bin/kubectl", entrypoint: []string{"/usr/local/bin/kubectl"}}, archive); err != nil {
		t.Fatal(err)
	}
	if err := LoadImageArchive(p, name, archive); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "smoke", Namespace: "default"},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name: "kubectl", Image: smokeImage, ImagePullPolicy: corev1.PullNever,
				Args: []string{"version", "--client"},
			}},
		},
	}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, "the smoke pod Succeeded", func() (bool, string) {
		got, err := cs.CoreV1().Pods("default").Get(ctx, "smoke", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if got.Status.Phase == corev1.PodFailed {
			t.Fatalf("the smoke pod failed: %+v", got.Status)
		}
		return got.Status.Phase == corev1.PodSucceeded, string(got.Status.Phase) + " " + podWaiting(*got)
	})
	logs, err := cs.CoreV1().Pods("default").GetLogs("smoke", &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(logs), "Client Version: "+KubernetesVersion) {
		t.Fatalf("the smoke pod printed %q, want kubectl's client version %s", logs, KubernetesVersion)
	}
}

func nodeReady(n corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func podReady(p corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func podWaiting(p corev1.Pod) string {
	var out []string
	for _, s := range p.Status.ContainerStatuses {
		if s.State.Waiting != nil {
			out = append(out, s.State.Waiting.Reason+": "+s.State.Waiting.Message)
		}
	}
	return strings.Join(out, "; ")
}

func waitFor(ctx context.Context, t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(4 * time.Minute)
	var last string
	for time.Now().Before(deadline) && ctx.Err() == nil {
		ok, state := cond()
		if ok {
			return
		}
		last = state
		time.Sleep(time.Second)
	}
	t.Fatalf("waiting for %s: last seen %s", what, last)
}

func testLog() io.Writer {
	if testing.Verbose() {
		return os.Stderr
	}
	return io.Discard
}

// TestPrivilegedProbeForcedYesRunsKindUnmodified forces the probe's answer to "the engine
// starts privileged containers" and checks that kind then runs as it is: no wrapper goes
// on PATH, and kind's own `docker run --privileged` reaches the engine. Where the engine
// refuses privileged containers (as these machines' does), kind's create fails with that
// command in its error; where it allows them, the cluster comes up.
func TestPrivilegedProbeForcedYesRunsKindUnmodified(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	if !DockerAnswers(ctx) {
		t.Skip("no Docker engine answers `docker info`; the kind tests need one")
	}
	log := testLog()
	image, err := NodeImage(ctx, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(PrivilegedEnv, "")
	allowed, reason, err := Privileged(ctx, image)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the engine itself: privileged allowed %t (%s)", allowed, reason)

	t.Setenv(PrivilegedEnv, "yes")
	path := os.Getenv("PATH")
	wrapped, restore, err := PrepareDocker(ctx, log, image)
	if err != nil {
		t.Fatal(err)
	}
	defer restore()
	if wrapped || os.Getenv("PATH") != path {
		t.Fatalf("forced yes: wrapped %t, PATH %q (was %q)", wrapped, os.Getenv("PATH"), path)
	}
	p := Provider(log)
	name := "kro-unmodified"
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	err = Create(ctx, p, name, image, kubeconfig)
	t.Cleanup(func() { _ = p.Delete(name, kubeconfig) })
	switch {
	case allowed && err != nil:
		t.Fatalf("the engine allows privileged containers, yet kind failed: %v", err)
	case !allowed && err == nil:
		t.Fatal("the engine refuses privileged containers, yet kind created a cluster without the wrapper")
	case !allowed && !strings.Contains(err.Error(), "--privileged"):
		t.Fatalf("kind failed, but not in its own docker run --privileged: %v", err)
	case !allowed:
		t.Logf("kind unmodified failed as expected: %s", firstLine(err.Error()))
	}
}

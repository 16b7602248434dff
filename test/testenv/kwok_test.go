//go:build e2e

package testenv

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestKwokClusterOutlivesItsAPIServer stops a kwok cluster's API server for longer than a
// leader's lease (15 s) and starts it again: a Deployment made afterwards still gets its
// pods and becomes available. With leader election the controller manager and the
// scheduler exited during the outage, and Deployments made after it never became
// available (Helm then waited out its 5 minute timeout in the fault specs). A cluster
// created while the API server is down does not take its port (kwokctl picked the first
// free one, so it did, and the first cluster came back as "server gave HTTP response to
// HTTPS client").
func TestKwokClusterOutlivesItsAPIServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	kc, err := StartKwokCluster(ctx, testLog{t}, KwokClusterOptions{Name: "outage", Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kc.Stop() })

	if err := kc.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	other, err := StartKwokCluster(ctx, testLog{t}, KwokClusterOptions{Name: "during-outage", Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Stop() })
	if other.Config.Host == kc.Config.Host {
		t.Fatalf("the cluster created during the outage took the stopped API server's address %s", kc.Config.Host)
	}
	// past kube-controller-manager's and kube-scheduler's 10 s renew deadline
	time.Sleep(25*time.Second - time.Since(stopped))
	if err := kc.StartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}

	labels := map[string]string{"app": "after-outage"}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "after-outage", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example.com/none:1"}}},
			},
		},
	}
	if err := kc.Client.Create(ctx, d); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		got := &appsv1.Deployment{}
		if err := kc.Client.Get(ctx, client.ObjectKeyFromObject(d), got); err != nil {
			t.Fatal(err)
		}
		if got.Status.AvailableReplicas == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Deployment made after the API server's outage has %d of 1 replicas available after 2 minutes: the controller manager or the scheduler did not outlive the outage (logs in %s)", got.Status.AvailableReplicas, kc.LogDir())
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// TestKwokComponentPortsAreReserved: every port a kwok cluster listens on comes from the
// machine-wide reservations (kwokPortRange), so that no cluster made meanwhile takes the
// port of a component that exited and starts again, and the reservations go with the
// cluster.
func TestKwokComponentPortsAreReserved(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	kc, err := StartKwokCluster(ctx, testLog{t}, KwokClusterOptions{Name: "ports", Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, "kwokctl.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	tools, err := ToolsDir()
	if err != nil {
		t.Fatal(err)
	}
	var ports []string
	for _, name := range kwokComponentPorts {
		m := regexp.MustCompile(`(?m)^  ` + name + `: (\d+)$`).FindStringSubmatch(string(data))
		if m == nil {
			t.Fatalf("kwokctl.yaml sets no %s:\n%s", name, data)
		}
		p, _ := strconv.Atoi(m[1])
		if p < kwokPortRange[0] || p >= kwokPortRange[1] {
			t.Errorf("%s %d is outside the reserved range %v", name, p, kwokPortRange)
		}
		if _, err := os.Stat(filepath.Join(tools, "kwok-ports", m[1])); err != nil {
			t.Errorf("%s %d is not reserved: %v", name, p, err)
		}
		ports = append(ports, m[1])
	}
	if err := kc.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, p := range ports {
		if _, err := os.Stat(filepath.Join(tools, "kwok-ports", p)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("port %s is still reserved after the cluster stopped: %v", p, err)
		}
	}
}

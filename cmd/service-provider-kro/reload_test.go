package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/config"
	"github.com/openmcp-project/service-provider-kro/controllers/owned"
	"github.com/openmcp-project/service-provider-kro/controllers/placement/credentialtest"
)

// secretMount lays out a file as the kubelet mounts a Secret's key: path is a link into
// ..data, a link to a folder of the current content, and an update swaps ..data
// atomically to a new folder.
type secretMount struct {
	dir, key string
	serial   int
}

func (m *secretMount) path() string { return filepath.Join(m.dir, m.key) }

func (m *secretMount) write(g Gomega, data []byte) {
	m.serial++
	version := fmt.Sprintf("..%d", m.serial)
	g.Expect(os.Mkdir(filepath.Join(m.dir, version), 0o755)).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(m.dir, version, m.key), data, 0o600)).To(Succeed())
	g.Expect(os.Symlink(version, filepath.Join(m.dir, "..data_tmp"))).To(Succeed())
	g.Expect(os.Rename(filepath.Join(m.dir, "..data_tmp"), filepath.Join(m.dir, "..data"))).To(Succeed())
	if m.serial == 1 {
		g.Expect(os.Symlink(filepath.Join("..data", m.key), m.path())).To(Succeed())
	}
}

// TestRunPicksUpARenewedOnboardingKubeconfig: the provider runs standalone with an
// onboarding kubeconfig that `onboarding-kubeconfig` wrote, mounted as the kubelet mounts
// the Secret of config/platform. While a Kro is on its way, the kubeconfig is renewed and
// the first token revoked by deleting the Secret it is bound to: the provider goes on
// without a restart and takes the Kro through Ready and its deletion, every write on the
// onboarding cluster with the new token.
func TestRunPicksUpARenewedOnboardingKubeconfig(t *testing.T) {
	e := startRBACEnv(t)
	g := NewWithT(t)
	ctx := context.Background()
	admin, err := e.onboarding.WriteKubeconfig(t.TempDir())
	g.Expect(err).NotTo(HaveOccurred())
	mint := func(g Gomega) (kubeconfig []byte, binding string) {
		var stdout, stderr bytes.Buffer
		g.Expect(dispatch(ctx, []string{"onboarding-kubeconfig", "--onboarding-kubeconfig", admin, "--token-lifetime", "1h"}, &stdout, &stderr)).To(Succeed(), stderr.String())
		path := filepath.Join(t.TempDir(), "minted")
		g.Expect(os.WriteFile(path, stdout.Bytes(), 0o600)).To(Succeed())
		c := claimsOf(g, path)
		g.Expect(c.Kubernetes.Secret).NotTo(BeNil())
		return stdout.Bytes(), c.Kubernetes.Secret.Name
	}
	first, firstBinding := mint(g)
	mount := &secretMount{dir: t.TempDir(), key: "kubeconfig"}
	mount.write(g, first)

	stop, done := e.startProvider(t, []string{"run",
		"--onboarding-kubeconfig", mount.path(),
		"--platform-kubeconfig", e.kubeconfigFile(t, config.PlatformOverlay),
		"--provider-name", rbacProvider,
		"--pod-namespace", config.Namespace,
		"--leader-elect", "--leader-election-namespace", config.Namespace,
		"--metrics-bind-address", "0", "--health-probe-bind-address", "0",
	})
	e.lifecycle(t, func() { e.stop(t, stop, done) }, func(g Gomega, tenant string) {
		// The provider has made the tenant namespace with the first token. The kubeconfig
		// is renewed; once the provider has read it, the first token is revoked.
		second, _ := mint(g)
		mount.write(g, second)
		renewed := time.Now()
		g.Eventually(e.logs.String, rbacTimeout, rbacInterval).Should(ContainSubstring("the onboarding token was rotated; using the new one"))
		t.Logf("kubeconfig renewed → new token in use: %s", time.Since(renewed).Round(time.Millisecond))
		g.Expect(e.onboarding.Client.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: config.Namespace, Name: firstBinding}})).To(Succeed())
		cfg, err := clientcmd.RESTConfigFromKubeConfig(first)
		g.Expect(err).NotTo(HaveOccurred())
		g.Eventually(func() error {
			_, err := credentialtest.WhoAmI(ctx, cfg)
			return err
		}, 30*time.Second, rbacInterval).Should(Satisfy(apierrors.IsUnauthorized), "the first token is revoked")

		g.Expect(e.platform.Client.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: "controlplane-access", Namespace: tenant, Labels: map[string]string{v1alpha1.LabelControlPlaneKubeconfig: "true"}},
			Data:       map[string][]byte{owned.KubeconfigKey: e.controlPlane.Kubeconfig},
		})).To(Succeed())
	}, nil, nil)
	logs := e.logs.String()
	g.Expect(logs).NotTo(ContainSubstring("restarts and requests the onboarding cluster anew"), "a renewed token needs no restart")
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, "Unauthorized") {
			t.Errorf("a request was not authenticated: %s", line)
		}
	}
}

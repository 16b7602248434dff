package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/openmcp-project/service-provider-kro/clusters"
	"github.com/openmcp-project/service-provider-kro/controllers/placement/credentialtest"
	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

// TestOnboardingKubeconfig: the kubeconfig written for the provider's ServiceAccount
// authenticates as that ServiceAccount; a ServiceAccount that does not exist yet is named
// with what to do.
func TestOnboardingKubeconfig(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ob := startClusters(t, testenv.ClusterOptions{Name: "kubeconfig-onboarding"})[0]
	admin, err := ob.WriteKubeconfig(t.TempDir())
	g.Expect(err).NotTo(HaveOccurred())
	var stdout, stderr bytes.Buffer
	err = dispatch(ctx, []string{"onboarding-kubeconfig", "--onboarding-kubeconfig", admin}, &stdout, &stderr)
	g.Expect(err).To(MatchError(ContainSubstring("ServiceAccount service-provider-kro-system/service-provider-kro")))
	g.Expect(err).To(MatchError(ContainSubstring("apply config/onboarding first")))

	g.Expect(ob.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "service-provider-kro-system"}})).To(Succeed())
	g.Expect(ob.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "service-provider-kro-system", Name: "service-provider-kro"}})).To(Succeed())
	out := filepath.Join(t.TempDir(), "onboarding-sa.yaml")
	g.Expect(dispatch(ctx, []string{"onboarding-kubeconfig", "--onboarding-kubeconfig", admin, "--out", out, "--token-lifetime", "2h"}, &stdout, &stderr)).To(Succeed())
	cfg, err := clientcmd.BuildConfigFromFlags("", out)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(strings.TrimSuffix(cfg.Host, "/")).To(Equal(strings.TrimSuffix(ob.Config.Host, "/")))
	g.Expect(credentialtest.WhoAmI(ctx, cfg)).To(Equal("system:serviceaccount:service-provider-kro-system:service-provider-kro"))

	stdout.Reset()
	g.Expect(dispatch(ctx, []string{"onboarding-kubeconfig", "--onboarding-kubeconfig", admin, "--server", "https://onboarding.example:6443"}, &stdout, &stderr)).To(Succeed())
	written, err := clientcmd.Load(stdout.Bytes())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(written.Clusters[written.Contexts[written.CurrentContext].Cluster].Server).To(Equal("https://onboarding.example:6443"))
}

// TestTenantNamespace: the command prints the namespace openmcp derives, and refuses what
// is not <namespace>/<name>.
func TestTenantNamespace(t *testing.T) {
	g := NewWithT(t)
	want, err := clusters.TenantNamespace(types.NamespacedName{Namespace: "project-a", Name: "cp-1"})
	g.Expect(err).NotTo(HaveOccurred())
	var stdout, stderr bytes.Buffer
	g.Expect(dispatch(context.Background(), []string{"tenant-namespace", "project-a/cp-1"}, &stdout, &stderr)).To(Succeed())
	g.Expect(strings.TrimSpace(stdout.String())).To(Equal(want))
	for _, bad := range [][]string{{"tenant-namespace"}, {"tenant-namespace", "cp-1"}, {"tenant-namespace", "a/b/c"}, {"tenant-namespace", "/cp-1"}} {
		g.Expect(dispatch(context.Background(), bad, &stdout, &stderr)).NotTo(Succeed(), "%v", bad)
	}
}

package main

import (
	"context"
	"net/http"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/openmcp-project/service-provider-kro/config"
	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

// TestSecureMetrics: by default (--metrics-secure=true) the metrics are served over HTTPS,
// and only to a caller whose token the platform cluster (where Prometheus' ServiceAccount
// lives) authenticates and authorizes for GET /metrics: the shipped ClusterRole
// service-provider-kro-metrics-reader gives that right. --metrics-secure=false is the
// plain HTTP the other tests scrape.
func TestSecureMetrics(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	_, platform, obPath, pfPath := startProviderClusters(t)

	// Prometheus' ServiceAccount may GET /metrics; another one may not.
	g.Expect(platform.Client.Create(ctx, namespace("monitoring"))).To(Succeed())
	g.Expect(platform.Client.Create(ctx, namespace("kro-provider"))).To(Succeed())
	reader := shippedClusterRole(g, config.PlatformOverlay, config.MetricsReaderRole)
	g.Expect(platform.Client.Create(ctx, reader)).To(Succeed())
	g.Expect(platform.Client.Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "prometheus-metrics-reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: reader.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "monitoring", Name: "prometheus"}},
	})).To(Succeed())
	token := func(name string) string {
		g.Expect(platform.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "monitoring"}})).To(Succeed())
		data, err := platform.ServiceAccountKubeconfig(ctx, "monitoring", name, time.Hour)
		g.Expect(err).NotTo(HaveOccurred())
		cfg, err := clientcmd.Load(data)
		g.Expect(err).NotTo(HaveOccurred())
		return cfg.AuthInfos["system:serviceaccount:monitoring:"+name].Token
	}
	prometheus, stranger := token("prometheus"), token("stranger")

	addrs, err := testenv.FreeLoopbackAddrs(2)
	g.Expect(err).NotTo(HaveOccurred())
	runProvider(t, []string{"run", "--onboarding-kubeconfig", obPath, "--platform-kubeconfig", pfPath,
		"--pod-namespace", "kro-provider", "--metrics-bind-address", addrs[0],
		"--health-probe-bind-address", addrs[1]})

	scrape := func(g Gomega, bearer string) (int, string) {
		code, body, err := testenv.GetMetrics(context.Background(), "https://"+addrs[0]+"/metrics", bearer)
		g.Expect(err).NotTo(HaveOccurred())
		return code, body
	}
	g.Eventually(func(g Gomega) {
		code, body := scrape(g, prometheus)
		g.Expect(code).To(Equal(http.StatusOK), body)
		g.Expect(body).To(ContainSubstring("service_provider_kro_kros"))
	}, rbacTimeout, rbacInterval).Should(Succeed(), "Prometheus' ServiceAccount reads the metrics over HTTPS")
	code, _ := scrape(g, "")
	g.Expect(code).To(Equal(http.StatusUnauthorized), "no token")
	code, _ = scrape(g, "not-a-token")
	g.Expect(code).To(Equal(http.StatusUnauthorized), "a token the platform cluster does not know")
	code, _ = scrape(g, stranger)
	g.Expect(code).To(Equal(http.StatusForbidden), "a ServiceAccount without the right")

	resp, err := http.Get("http://" + addrs[0] + "/metrics")
	if err == nil {
		defer func() { _ = resp.Body.Close() }()
		g.Expect(resp.StatusCode).To(Equal(http.StatusBadRequest), "plain HTTP is not served")
	}
}

// shippedClusterRole is the ClusterRole name as the overlay of config/ renders it.
func shippedClusterRole(g Gomega, overlay, name string) *rbacv1.ClusterRole {
	objs, err := config.Render(overlay)
	g.Expect(err).NotTo(HaveOccurred())
	for _, o := range objs {
		if o.GetKind() == "ClusterRole" && o.GetName() == name {
			role := &rbacv1.ClusterRole{}
			g.Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, role)).To(Succeed())
			return role
		}
	}
	g.Expect(name).To(BeEmpty(), "config/%s renders no ClusterRole %s", overlay, name)
	return nil
}

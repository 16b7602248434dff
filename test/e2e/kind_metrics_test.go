//go:build e2e

package e2e

import (
	"fmt"
	"net/http"
	"net/url"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmcp-project/service-provider-kro/config"
	"github.com/openmcp-project/service-provider-kro/test/e2e/env"
	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

// expectMetricsAccess reads the provider's metrics as Prometheus does, from inside the
// cluster's network (a port-forward to the pod behind the Service): with the token of a
// ServiceAccount bound to the shipped ClusterRole service-provider-kro-metrics-reader it
// gets them, with one not bound 403, without a token 401.
func expectMetricsAccess(ke *env.Env) {
	GinkgoHelper()
	c := ke.Platform.Client
	const ns = "monitoring"
	Expect(client.IgnoreAlreadyExists(c.Create(suiteCtx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))).To(Succeed())
	Expect(client.IgnoreAlreadyExists(c.Create(suiteCtx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "prometheus-service-provider-kro"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: config.MetricsReaderRole},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "prometheus"}},
	}))).To(Succeed())
	token := func(name string) string {
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		Expect(client.IgnoreAlreadyExists(c.Create(suiteCtx, sa))).To(Succeed())
		req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)}}
		Expect(c.SubResource("token").Create(suiteCtx, sa, req)).To(Succeed())
		return req.Status.Token
	}
	prometheus, stranger := token("prometheus"), token("stranger")

	pods := &corev1.PodList{}
	Expect(c.List(suiteCtx, pods, client.InNamespace(env.KindPodNamespace), client.MatchingLabels{"app.kubernetes.io/name": "service-provider-kro"})).To(Succeed())
	Expect(pods.Items).To(HaveLen(1))
	local := portForward(ke, pods.Items[0].Name, 8443)
	get := func(g Gomega, bearer string) (int, string) {
		code, body, err := testenv.GetMetrics(suiteCtx, fmt.Sprintf("https://127.0.0.1:%d/metrics", local), bearer)
		g.Expect(err).NotTo(HaveOccurred())
		return code, body
	}
	// RBAC reaches the authorizer's cache within a few seconds.
	Eventually(func(g Gomega) {
		code, body := get(g, prometheus)
		g.Expect(code).To(Equal(http.StatusOK), body)
		g.Expect(body).To(ContainSubstring("service_provider_kro_kros"))
	}).WithContext(suiteCtx).WithTimeout(time.Minute).WithPolling(time.Second).Should(Succeed())
	code, _ := get(Default, stranger)
	Expect(code).To(Equal(http.StatusForbidden), "a ServiceAccount without the metrics reader's right")
	code, _ = get(Default, "")
	Expect(code).To(Equal(http.StatusUnauthorized), "no token")
}

// portForward forwards a free local port to port of a pod in the provider's namespace
// for the rest of the spec, and returns the local port.
func portForward(ke *env.Env, pod string, port int) uint16 {
	GinkgoHelper()
	rt, upgrader, err := spdy.RoundTripperFor(ke.Platform.Config)
	Expect(err).NotTo(HaveOccurred())
	u, err := url.Parse(ke.Platform.Config.Host)
	Expect(err).NotTo(HaveOccurred())
	u.Path = fmt.Sprintf("/api/v1/namespaces/%s/pods/%s/portforward", env.KindPodNamespace, pod)
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: rt}, http.MethodPost, u)
	stop, ready := make(chan struct{}), make(chan struct{})
	fw, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{fmt.Sprintf("0:%d", port)}, stop, ready, GinkgoWriter, GinkgoWriter)
	Expect(err).NotTo(HaveOccurred())
	go func() { _ = fw.ForwardPorts() }()
	DeferCleanup(func() { close(stop) })
	Eventually(ready).WithTimeout(30 * time.Second).Should(BeClosed())
	ports, err := fw.GetPorts()
	Expect(err).NotTo(HaveOccurred())
	return ports[0].Local
}

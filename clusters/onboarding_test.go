package clusters

import (
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

func kubeconfig(t *testing.T, server, ca, token string, cert []byte) []byte {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["c"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: []byte(ca)}
	cfg.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: token, ClientCertificateData: cert}
	cfg.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	cfg.CurrentContext = "c"
	data, err := clientcmd.Write(*cfg)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return data
}

// TestOnboardingRotation: what a new content of the onboarding access secret means.
func TestOnboardingRotation(t *testing.T) {
	const server, ca = "https://onboarding.example:6443", "ca-1"
	key := client.ObjectKey{Namespace: "openmcp-system", Name: "kro--onboarding"}
	for _, tc := range []struct {
		name string
		next []byte
		want Rotation
	}{
		{"the same content", kubeconfig(t, server, ca, "token-1", nil), Unchanged},
		{"a new token", kubeconfig(t, server, ca, "token-2", nil), TokenRotated},
		{"a new token of another ServiceAccount", []byte(strings.NewReplacer("name: u", "name: sa-2", "user: u", "user: sa-2").Replace(string(kubeconfig(t, server, ca, "token-2", nil)))), TokenRotated},
		{"another server", kubeconfig(t, "https://elsewhere:6443", ca, "token-2", nil), RestartNeeded},
		{"another CA", kubeconfig(t, server, "ca-2", "token-1", nil), RestartNeeded},
		{"a client certificate instead", kubeconfig(t, server, ca, "", []byte("cert")), RestartNeeded},
		{"no kubeconfig", nil, RestartNeeded},
		{"garbage", []byte("{not yaml"), RestartNeeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			a, err := newOnboardingAccess(key, kubeconfig(t, server, ca, "token-1", nil))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(a.Config.BearerToken).To(BeEmpty(), "the token travels through the rotating header, never the static field")
			got, why := a.update(tc.next)
			g.Expect(got).To(Equal(tc.want), why)
			if tc.want == TokenRotated {
				g.Expect(a.token.get()).To(Equal("token-2"))
			} else {
				g.Expect(a.token.get()).To(Equal("token-1"))
			}
			g.Expect(why).NotTo(ContainSubstring("token-"), "a token never reaches a message")
		})
	}
}

// TestRotatedTokenIsSent: a client built on the access's config sends the token that was
// current at the time of each request, without being rebuilt.
func TestRotatedTokenIsSent(t *testing.T) {
	g := NewWithT(t)
	var seen []string
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = append(seen, r.Header.Get("Authorization"))
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"major":"1","minor":"36","gitVersion":"v1.36.3"}`))
	}))
	defer srv.Close()
	ca := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}))
	key := client.ObjectKey{Namespace: "ns", Name: "access"}
	a, err := newOnboardingAccess(key, kubeconfig(t, srv.URL, ca, "token-1", nil))
	g.Expect(err).NotTo(HaveOccurred())
	cfg := rest.CopyConfig(a.Config)
	g.Expect(Ping(cfg)).To(Succeed())
	rot, _ := a.update(kubeconfig(t, srv.URL, ca, "token-2", nil))
	g.Expect(rot).To(Equal(TokenRotated))
	g.Expect(Ping(cfg)).To(Succeed())
	g.Expect(seen).To(Equal([]string{"Bearer token-1", "Bearer token-2"}))
}

func TestEmptyAccessSecretIsRefused(t *testing.T) {
	g := NewWithT(t)
	_, err := newOnboardingAccess(client.ObjectKey{Namespace: "ns", Name: "s"}, nil)
	g.Expect(err).To(MatchError(`the onboarding access secret ns/s has no key "kubeconfig"`))
}

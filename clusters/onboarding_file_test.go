package clusters

import (
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// TestOnboardingFileRotation: what a new content of the onboarding kubeconfig file means.
// A file that cannot be used for a moment (missing, half written) is not taken: the
// current token stays in use.
func TestOnboardingFileRotation(t *testing.T) {
	const server, ca = "https://onboarding.example:6443", "ca-1"
	for _, tc := range []struct {
		name    string
		next    []byte // nil removes the file
		want    Rotation
		wantErr bool
		token   string
	}{
		{"the same content", kubeconfig(t, server, ca, "token-1", nil), Unchanged, false, "token-1"},
		{"a new token", kubeconfig(t, server, ca, "token-2", nil), TokenRotated, false, "token-2"},
		{"another server", kubeconfig(t, "https://elsewhere:6443", ca, "token-2", nil), RestartNeeded, false, "token-1"},
		{"the file is gone", nil, Unchanged, true, "token-1"},
		{"an empty file", []byte{}, Unchanged, true, "token-1"},
		{"garbage", []byte("{not yaml"), Unchanged, true, "token-1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			path := filepath.Join(t.TempDir(), "kubeconfig")
			g.Expect(os.WriteFile(path, kubeconfig(t, server, ca, "token-1", nil), 0o600)).To(Succeed())
			a, err := OnboardingFromFile(path)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(a.Config.BearerToken).To(BeEmpty(), "the token travels through the rotating header, never the static field")
			if tc.next == nil {
				g.Expect(os.Remove(path)).To(Succeed())
			} else {
				g.Expect(os.WriteFile(path, tc.next, 0o600)).To(Succeed())
			}
			got, why, err := a.reread()
			g.Expect(err != nil).To(Equal(tc.wantErr), "%v", err)
			g.Expect(got).To(Equal(tc.want), why)
			g.Expect(a.token.get()).To(Equal(tc.token))
			g.Expect(why).NotTo(ContainSubstring("token-"), "a token never reaches a message")
			if err != nil {
				g.Expect(err.Error()).NotTo(ContainSubstring("token-"))
			}
		})
	}
}

// TestOnboardingFileResolvesRelativePaths: a CA file named relative to the kubeconfig is
// found next to it, as with BuildConfigFromFlags, and a token rotated in the file is sent
// by a client built before.
func TestOnboardingFileResolvesRelativePaths(t *testing.T) {
	g := NewWithT(t)
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("Authorization"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"major":"1","minor":"36","gitVersion":"v1.36.3"}`))
	}))
	defer srv.Close()
	dir := t.TempDir()
	g.Expect(os.WriteFile(filepath.Join(dir, "ca.crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600)).To(Succeed())
	write := func(token string) {
		cfg := clientcmdapi.NewConfig()
		cfg.Clusters["c"] = &clientcmdapi.Cluster{Server: srv.URL, CertificateAuthority: "ca.crt"}
		cfg.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: token}
		cfg.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
		cfg.CurrentContext = "c"
		g.Expect(clientcmd.WriteToFile(*cfg, filepath.Join(dir, "kubeconfig"))).To(Succeed())
	}
	write("token-1")
	a, err := OnboardingFromFile(filepath.Join(dir, "kubeconfig"))
	g.Expect(err).NotTo(HaveOccurred())
	cfg := rest.CopyConfig(a.Config)
	g.Expect(Ping(cfg)).To(Succeed())
	write("token-2")
	rot, _, err := a.reread()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(rot).To(Equal(TokenRotated))
	g.Expect(Ping(cfg)).To(Succeed())
	g.Expect(seen).To(Equal([]string{"Bearer token-1", "Bearer token-2"}))
}

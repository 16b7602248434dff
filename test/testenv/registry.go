package testenv

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/crypto/bcrypt"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// OCIRegistry is a distribution registry on loopback that serves TLS with a
// self-signed CA and asks for a user and password (htpasswd), the way registries
// look to Flux users.
type OCIRegistry struct {
	// Host is "127.0.0.1:<port>", the registry's host in OCI references.
	Host string
	// CA is the CA of the registry's serving certificate.
	CA *CertificateAuthority
	// CAFile holds CA.CertPEM, for `helm --ca-file`.
	CAFile string
	// Username and Password are the credentials the registry accepts.
	Username, Password string
	// Process is the running registry.
	Process *Process
}

// StartRegistry builds (once) and starts a registry with TLS and basic authentication
// on a free loopback port. Its data, certificates, configuration and log live in dir.
func StartRegistry(ctx context.Context, log io.Writer, dir string) (*OCIRegistry, error) {
	return StartRegistryOn(ctx, log, dir, "127.0.0.1")
}

// StartRegistryOn is StartRegistry on a free port of the IP address ip, which its serving
// certificate names: the kind e2e serves its pods from the kind network's gateway.
func StartRegistryOn(ctx context.Context, log io.Writer, dir, ip string) (*OCIRegistry, error) {
	bin, err := Registry.Path(ctx, log)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	addr := net.JoinHostPort(ip, strconv.Itoa(port))
	ca, err := NewCertificateAuthority("testenv registry CA")
	if err != nil {
		return nil, err
	}
	certPEM, keyPEM, err := ca.ServerCertificate(ip, "localhost")
	if err != nil {
		return nil, err
	}
	r := &OCIRegistry{Host: addr, CA: ca, CAFile: filepath.Join(dir, "ca.crt"), Username: "testenv", Password: randomHex(12)}
	hash, err := bcrypt.GenerateFromPassword([]byte(r.Password), bcrypt.DefaultCost)
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{
		"ca.crt":     ca.CertPEM,
		"server.crt": certPEM,
		"server.key": keyPEM,
		"htpasswd":   []byte(r.Username + ":" + string(hash) + "\n"),
		"config.yml": []byte(fmt.Sprintf(`version: 0.1
log:
  level: info
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: %s
  delete:
    enabled: true
http:
  addr: %s
  secret: %s
  tls:
    certificate: %s
    key: %s
auth:
  htpasswd:
    realm: testenv
    path: %s
`, filepath.Join(dir, "data"), addr, randomHex(16), filepath.Join(dir, "server.crt"),
			filepath.Join(dir, "server.key"), filepath.Join(dir, "htpasswd"))),
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return nil, err
		}
	}
	r.Process, err = StartProcess("registry", dir, []string{"OTEL_TRACES_EXPORTER=none"},
		bin, "serve", filepath.Join(dir, "config.yml"))
	if err != nil {
		return nil, err
	}
	if err := r.waitReady(ctx, 30*time.Second); err != nil {
		_ = r.Stop()
		return nil, err
	}
	return r, nil
}

// waitReady polls /v2/ until the registry answers (401 without credentials).
func (r *OCIRegistry) waitReady(ctx context.Context, timeout time.Duration) error {
	hc := &http.Client{
		Timeout:   2 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: r.CA.CertPool()}},
	}
	deadline := time.Now().Add(timeout)
	var lastErr error
	for time.Now().Before(deadline) {
		if err := r.Process.ExitError(); err != nil {
			return fmt.Errorf("%w\n%s", err, r.Process.LogTail(20))
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+r.Host+"/v2/", nil)
		resp, err := hc.Do(req)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("GET /v2/: %s", resp.Status)
		}
		lastErr = err
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("registry at %s not ready after %s: %w\n%s", r.Host, timeout, lastErr, r.Process.LogTail(20))
}

// Stop stops the registry.
func (r *OCIRegistry) Stop() error {
	if r == nil {
		return nil
	}
	return r.Process.Stop()
}

// Start starts a registry stopped with Stop again, on the same address with the same
// data, certificates and credentials, and waits until it answers. A running registry is
// left alone.
func (r *OCIRegistry) Start(ctx context.Context) error {
	if r.Process.ExitError() == nil {
		return nil
	}
	p, err := r.Process.Restart()
	if err != nil {
		return err
	}
	r.Process = p
	return r.waitReady(ctx, 30*time.Second)
}

// URL returns the oci:// URL of a repository path in the registry, e.g. "charts/kro".
func (r *OCIRegistry) URL(repository string) string {
	return "oci://" + r.Host + "/" + repository
}

// DockerConfigJSON returns a docker config for the registry's credentials, the content
// of a kubernetes.io/dockerconfigjson secret.
func (r *OCIRegistry) DockerConfigJSON() []byte {
	auth := base64.StdEncoding.EncodeToString([]byte(r.Username + ":" + r.Password))
	data, _ := json.Marshal(map[string]any{
		"auths": map[string]any{
			r.Host: map[string]string{"username": r.Username, "password": r.Password, "auth": auth},
		},
	})
	return data
}

// PullSecret returns a kubernetes.io/dockerconfigjson secret for the registry.
func (r *OCIRegistry) PullSecret(namespace, name string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Type:       corev1.SecretTypeDockerConfigJson,
		Data:       map[string][]byte{corev1.DockerConfigJsonKey: r.DockerConfigJSON()},
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

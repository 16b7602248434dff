//go:build e2e

package testenv

import (
	"context"
	"crypto/x509"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/openmcp-project/service-provider-kro/hack/image/ociimage"
)

// testDir is where a test keeps its processes' files and logs: a temporary folder, or
// $TESTENV_LOG_DIR/name to keep them after the run (CI uploads that folder).
func testDir(t *testing.T, name string) string {
	t.Helper()
	if d := os.Getenv("TESTENV_LOG_DIR"); d != "" {
		return filepath.Join(d, name)
	}
	return t.TempDir()
}

// buildLinuxBinary builds pkg in srcDir into out as the kubelet runs it from an image: a
// static binary (CGO_ENABLED=0) for linux and this machine's architecture.
func buildLinuxBinary(ctx context.Context, t *testing.T, srcDir, pkg, out string, extraEnv ...string) {
	t.Helper()
	build := exec.CommandContext(ctx, "go", "build", "-o", out, pkg)
	build.Dir = srcDir
	build.Env = append(append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH), extraEnv...)
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building %s in %s: %v\n%s", pkg, srcDir, err, b)
	}
}

// pushToMemoryRegistry pushes an image to an in-memory TLS registry without auth that
// stops with the test, as repoTag ("name:tag"). It returns the image's reference and the
// registry's CA, which the kubelet has to trust.
func pushToMemoryRegistry(ctx context.Context, t *testing.T, idx v1.ImageIndex, repoTag string) (string, *x509.CertPool) {
	t.Helper()
	reg := httptest.NewTLSServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(reg.Close)
	cas := x509.NewCertPool()
	cas.AddCert(reg.Certificate())
	image := strings.TrimPrefix(reg.URL, "https://") + "/" + repoTag
	if _, err := ociimage.Push(ctx, idx, image, ociimage.RegistryOptions{RootCAs: cas}); err != nil {
		t.Fatal(err)
	}
	return image, cas
}

// startKubeletWithKCM starts kube-controller-manager (so Jobs and Deployments get pods)
// and the Kubelet (which runs them from images in a registry with a CA in cas) on
// platform, with their files below dir/kcm and dir/kubelet. stop stops both, the
// kubelet first; call it (deferred) before the clusters stop.
func startKubeletWithKCM(ctx context.Context, t *testing.T, platform *Cluster, dir string, cas *x509.CertPool) (k *Kubelet, stop func()) {
	t.Helper()
	kcm, err := StartKubeControllerManager(ctx, testLog{t}, KubeControllerManagerOptions{Kubeconfig: platform.Kubeconfig, Dir: filepath.Join(dir, "kcm")})
	if err != nil {
		t.Fatal(err)
	}
	k, err = StartKubelet(ctx, KubeletOptions{Platform: platform.Config, Dir: filepath.Join(dir, "kubelet"), RegistryCAs: cas, Log: testLog{t}})
	if err != nil {
		_ = kcm.Stop()
		t.Fatal(err)
	}
	return k, func() { _ = k.Stop(); _ = kcm.Stop() }
}

// startOpenMCPWithClusterProvider starts openmcp-operator on platform with its files in
// dir, and the ClusterProvider emulator backing openmcp's onboarding cluster with
// onboarding. The emulator starts in BeforeMCP: openmcp's `mcp init` only finishes once
// its AccessRequests are granted. stop stops both, openmcp first; call it (deferred)
// before the clusters stop.
func startOpenMCPWithClusterProvider(ctx context.Context, t *testing.T, platform, onboarding *Cluster, dir string) (cp *ClusterProvider, stop func()) {
	t.Helper()
	om, err := StartOpenMCPOperator(ctx, testLog{t}, OpenMCPOperatorOptions{
		Platform: platform.Config, PlatformKubeconfig: platform.Kubeconfig, Config: SchedulerConfig, Dir: dir,
		BeforeMCP: func(ctx context.Context) error {
			var err error
			cp, err = StartClusterProvider(ctx, ClusterProviderOptions{
				Platform: platform.Config, Onboarding: TargetCluster{Name: "onboarding", Config: onboarding.Config}, Log: testLog{t},
			})
			return err
		},
	})
	if err != nil {
		_ = cp.Stop()
		t.Fatalf("%v (logs in %s)", err, dir)
	}
	return cp, func() { _ = om.Stop(); _ = cp.Stop() }
}

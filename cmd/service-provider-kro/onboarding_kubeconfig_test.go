package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
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
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/config"
	"github.com/openmcp-project/service-provider-kro/controllers/placement/credentialtest"
	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

// tokenClaims are the claims of a ServiceAccount token that the tests look at.
type tokenClaims struct {
	IssuedAt   int64 `json:"iat"`
	Expiry     int64 `json:"exp"`
	Kubernetes struct {
		Secret *struct {
			Name string `json:"name"`
			UID  string `json:"uid"`
		} `json:"secret"`
	} `json:"kubernetes.io"`
}

// claimsOf reads the claims of the token in a kubeconfig file, without checking its
// signature: the API server does that when the token is used.
func claimsOf(g Gomega, kubeconfig string) tokenClaims {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	g.Expect(err).NotTo(HaveOccurred())
	parts := strings.Split(cfg.BearerToken, ".")
	g.Expect(parts).To(HaveLen(3), "a JWT")
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	g.Expect(err).NotTo(HaveOccurred())
	var c tokenClaims
	g.Expect(json.Unmarshal(payload, &c)).To(Succeed())
	return c
}

// onboardingSA makes the provider's namespace and ServiceAccount on the onboarding
// cluster, as config/onboarding does, and returns an administrator's kubeconfig.
func onboardingSA(t *testing.T, ob *testenv.Cluster) string {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	admin, err := ob.WriteKubeconfig(t.TempDir())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ob.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: config.Namespace}})).To(Succeed())
	g.Expect(ob.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: config.Namespace, Name: config.ServiceAccount}})).To(Succeed())
	return admin
}

// TestOnboardingKubeconfigToken: the token lives as long as --token-lifetime says (a
// week without it), is bound to a Secret of its own, and stops working the moment that
// Secret is deleted; renewing deletes the Secrets of expired tokens only.
func TestOnboardingKubeconfigToken(t *testing.T) {
	ctx := context.Background()
	ob := startClusters(t, testenv.ClusterOptions{Name: "token-onboarding"})[0]
	admin := onboardingSA(t, ob)
	dir := t.TempDir()
	mint := func(g Gomega, name string, flags ...string) (string, string) {
		out := filepath.Join(dir, name)
		var stdout, stderr bytes.Buffer
		args := append([]string{"onboarding-kubeconfig", "--onboarding-kubeconfig", admin, "--out", out}, flags...)
		g.Expect(dispatch(ctx, args, &stdout, &stderr)).To(Succeed(), stderr.String())
		return out, stderr.String()
	}

	t.Run("the lifetime is the flag's, a week by default", func(t *testing.T) {
		g := NewWithT(t)
		out, _ := mint(g, "2h.yaml", "--token-lifetime", "2h")
		c := claimsOf(g, out)
		g.Expect(c.Expiry - c.IssuedAt).To(Equal(int64((2 * time.Hour).Seconds())))
		out, _ = mint(g, "default.yaml")
		c = claimsOf(g, out)
		g.Expect(c.Expiry - c.IssuedAt).To(Equal(int64((7 * 24 * time.Hour).Seconds())))

		var stdout, stderr bytes.Buffer
		err := dispatch(ctx, []string{"onboarding-kubeconfig", "--onboarding-kubeconfig", admin, "--token-lifetime", "5m"}, &stdout, &stderr)
		g.Expect(err).To(MatchError(ContainSubstring("--token-lifetime=5m0s: want at least 10m0s")))
		g.Expect(stdout.String()).To(BeEmpty())
	})

	t.Run("the token is bound to a Secret, and deleting it revokes the token", func(t *testing.T) {
		g := NewWithT(t)
		out, stderr := mint(g, "bound.yaml", "--token-lifetime", "1h")
		c := claimsOf(g, out)
		g.Expect(c.Kubernetes.Secret).NotTo(BeNil(), "the token is bound to a Secret")
		binding := &corev1.Secret{}
		g.Expect(ob.Client.Get(ctx, client.ObjectKey{Namespace: config.Namespace, Name: c.Kubernetes.Secret.Name}, binding)).To(Succeed())
		g.Expect(string(binding.UID)).To(Equal(c.Kubernetes.Secret.UID))
		g.Expect(binding.Labels).To(HaveKeyWithValue(v1alpha1.LabelRole, v1alpha1.RoleOnboardingToken))
		g.Expect(binding.OwnerReferences).To(ConsistOf(HaveField("Kind", "ServiceAccount")))
		g.Expect(stderr).To(ContainSubstring("bound to Secret " + config.Namespace + "/" + binding.Name))
		g.Expect(stderr).NotTo(ContainSubstring(strings.Split(mustToken(g, out), ".")[2]), "the token never reaches the output")

		cfg, err := clientcmd.BuildConfigFromFlags("", out)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(credentialtest.WhoAmI(ctx, cfg)).To(Equal("system:serviceaccount:" + config.Namespace + ":" + config.ServiceAccount))
		g.Expect(ob.Client.Delete(ctx, binding)).To(Succeed())
		g.Eventually(func() error {
			_, err := credentialtest.WhoAmI(ctx, cfg)
			return err
		}, 30*time.Second, 100*time.Millisecond).Should(Satisfy(apierrors.IsUnauthorized), "the token is revoked with its Secret")
	})

	t.Run("a renewal deletes the Secrets of expired tokens only", func(t *testing.T) {
		g := NewWithT(t)
		secret := func(name string, expires time.Time) *corev1.Secret {
			return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: config.Namespace, Name: name, Labels: tokenLabels,
				Annotations: map[string]string{v1alpha1.AnnotationTokenExpires: expires.UTC().Format(time.RFC3339)}}}
		}
		expired, valid := secret("expired", time.Now().Add(-time.Minute)), secret("valid", time.Now().Add(time.Hour))
		g.Expect(ob.Client.Create(ctx, expired)).To(Succeed())
		g.Expect(ob.Client.Create(ctx, valid)).To(Succeed())
		_, stderr := mint(g, "renewed.yaml")
		g.Expect(stderr).To(ContainSubstring("deleted Secret " + config.Namespace + "/expired"))
		g.Expect(apierrors.IsNotFound(ob.Client.Get(ctx, client.ObjectKeyFromObject(expired), &corev1.Secret{}))).To(BeTrue(), "expired")
		g.Expect(ob.Client.Get(ctx, client.ObjectKeyFromObject(valid), &corev1.Secret{})).To(Succeed(), "still valid")
	})
}

func mustToken(g Gomega, kubeconfig string) string {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	g.Expect(err).NotTo(HaveOccurred())
	return cfg.BearerToken
}

// TestOnboardingKubeconfigFile: --out is written with mode 0600 whatever the file had, by
// a rename of a new file (a reader never sees a part, and a hard link to the old file
// keeps the old content), leaving no temporary file, and a symbolic link at --out is
// replaced, never written through.
func TestOnboardingKubeconfigFile(t *testing.T) {
	ctx := context.Background()
	ob := startClusters(t, testenv.ClusterOptions{Name: "file-onboarding"})[0]
	admin := onboardingSA(t, ob)
	mint := func(g Gomega, out string) string {
		var stdout, stderr bytes.Buffer
		g.Expect(dispatch(ctx, []string{"onboarding-kubeconfig", "--onboarding-kubeconfig", admin, "--out", out}, &stdout, &stderr)).To(Succeed(), stderr.String())
		g.Expect(stdout.String()).To(BeEmpty())
		return stderr.String()
	}
	isKubeconfig := func(g Gomega, path string) {
		cfg, err := clientcmd.BuildConfigFromFlags("", path)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(credentialtest.WhoAmI(ctx, cfg)).To(Equal("system:serviceaccount:" + config.Namespace + ":" + config.ServiceAccount))
	}

	t.Run("an existing file is replaced with mode 0600", func(t *testing.T) {
		g := NewWithT(t)
		dir := t.TempDir()
		out, old := filepath.Join(dir, "onboarding.yaml"), filepath.Join(dir, "old-content")
		g.Expect(os.WriteFile(out, []byte("old\n"), 0o644)).To(Succeed())
		g.Expect(os.Chmod(out, 0o644)).To(Succeed()) // whatever the umask
		g.Expect(os.Link(out, old)).To(Succeed())
		mint(g, out)
		fi, err := os.Lstat(out)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(fi.Mode()).To(Equal(os.FileMode(0o600)), "a regular file readable by its owner only")
		isKubeconfig(g, out)
		kept, err := os.ReadFile(old)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(string(kept) == "old\n").To(BeTrue(), "a new file was renamed into place, the old one not overwritten in place")
		entries, err := os.ReadDir(dir)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(entries).To(HaveLen(2), "no temporary file is left")
	})

	t.Run("a new file gets mode 0600", func(t *testing.T) {
		g := NewWithT(t)
		out := filepath.Join(t.TempDir(), "onboarding.yaml")
		mint(g, out)
		fi, err := os.Lstat(out)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(fi.Mode()).To(Equal(os.FileMode(0o600)))
	})

	t.Run("a symbolic link at --out is replaced, its target untouched", func(t *testing.T) {
		g := NewWithT(t)
		dir := t.TempDir()
		target, out := filepath.Join(dir, "target"), filepath.Join(dir, "onboarding.yaml")
		g.Expect(os.WriteFile(target, []byte("not yours\n"), 0o644)).To(Succeed())
		g.Expect(os.Chmod(target, 0o644)).To(Succeed())
		g.Expect(os.Symlink(target, out)).To(Succeed())
		stderr := mint(g, out)
		kept, err := os.ReadFile(target)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(string(kept) == "not yours\n").To(BeTrue(), "the link's target is left as it was")
		g.Expect(stderr).To(ContainSubstring(out + " is a symbolic link"))
		fi, err := os.Stat(target)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(fi.Mode()).To(Equal(os.FileMode(0o644)))
		fi, err = os.Lstat(out)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(fi.Mode()).To(Equal(os.FileMode(0o600)), "the link is replaced by a regular file")
		isKubeconfig(g, out)
	})

	t.Run("a folder at --out is refused, and its token revoked", func(t *testing.T) {
		g := NewWithT(t)
		bindings := func() []corev1.Secret {
			list := &corev1.SecretList{}
			g.Expect(ob.Client.List(ctx, list, client.InNamespace(config.Namespace), client.MatchingLabels(tokenLabels))).To(Succeed())
			return list.Items
		}
		before := bindings()
		out := t.TempDir()
		var stdout, stderr bytes.Buffer
		err := dispatch(ctx, []string{"onboarding-kubeconfig", "--onboarding-kubeconfig", admin, "--out", out}, &stdout, &stderr)
		g.Expect(err).To(MatchError(ContainSubstring("it exists and is no regular file")))
		g.Expect(bindings()).To(Equal(before), "the Secret of the token nobody received is gone")
	})
}

package placement_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/clusters"
	"github.com/openmcp-project/service-provider-kro/controllers/owned"
	"github.com/openmcp-project/service-provider-kro/controllers/placement"
	"github.com/openmcp-project/service-provider-kro/controllers/placement/credentialtest"
	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

// providerName is the provider the credentials are made by.
const providerName = "kro"

// --- pure tests ----------------------------------------------------------------

func TestNeedsRotation(t *testing.T) {
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	issued := now.Add(-10 * time.Minute)
	kubeconfig, ca := []byte("kubeconfig"), []byte("ca")
	current := func(mutate func(*corev1.Secret)) *corev1.Secret {
		s := placement.NewKroCredentialSecret(&v1alpha1.Kro{}, providerName, "ns", kubeconfig, ca, []byte("token"), issued, issued.Add(time.Hour))
		if mutate != nil {
			mutate(s)
		}
		return s
	}
	annotate := func(key, value string) func(*corev1.Secret) {
		return func(s *corev1.Secret) { s.Annotations[key] = value }
	}
	for _, tc := range []struct {
		name   string
		secret *corev1.Secret
		ca     []byte
		rotate bool
		wait   time.Duration
	}{
		{name: "current: wait until two thirds of the lifetime", secret: current(nil), rotate: false, wait: 30 * time.Minute},
		{name: "no secret", secret: nil, rotate: true},
		{name: "no kubeconfig", secret: current(func(s *corev1.Secret) { delete(s.Data, owned.KubeconfigKey) }), rotate: true},
		{name: "no token", secret: current(func(s *corev1.Secret) { delete(s.Data, owned.KroCredentialTokenKey) }), rotate: true},
		{name: "empty token", secret: current(func(s *corev1.Secret) { s.Data[owned.KroCredentialTokenKey] = nil }), rotate: true},
		{name: "no ca.crt", secret: current(func(s *corev1.Secret) { delete(s.Data, owned.KroCredentialCAKey) }), rotate: true},
		{name: "server changed", secret: current(func(s *corev1.Secret) { s.Data[owned.KubeconfigKey] = []byte("other") }), rotate: true},
		{name: "CA changed", secret: current(nil), ca: []byte("new ca"), rotate: true},
		{name: "no issued annotation", secret: current(func(s *corev1.Secret) { delete(s.Annotations, v1alpha1.AnnotationTokenIssued) }), rotate: true},
		{name: "unreadable expiry", secret: current(annotate(v1alpha1.AnnotationTokenExpires, "soon")), rotate: true},
		{name: "expires before issued", secret: current(annotate(v1alpha1.AnnotationTokenExpires, issued.Add(-time.Hour).Format(time.RFC3339))), rotate: true},
		{name: "exactly due", secret: current(func(s *corev1.Secret) {
			annotate(v1alpha1.AnnotationTokenIssued, now.Add(-40*time.Minute).Format(time.RFC3339))(s)
			annotate(v1alpha1.AnnotationTokenExpires, now.Add(20*time.Minute).Format(time.RFC3339))(s)
		}), rotate: true},
		{name: "a second before due", secret: current(func(s *corev1.Secret) {
			annotate(v1alpha1.AnnotationTokenIssued, now.Add(-40*time.Minute+time.Second).Format(time.RFC3339))(s)
			annotate(v1alpha1.AnnotationTokenExpires, now.Add(20*time.Minute+time.Second).Format(time.RFC3339))(s)
		}), rotate: false, wait: time.Second},
		{name: "issued long ago", secret: current(annotate(v1alpha1.AnnotationTokenIssued, now.Add(-50*time.Hour).Format(time.RFC3339))), rotate: true},
		{name: "being deleted", secret: current(func(s *corev1.Secret) { s.DeletionTimestamp = &metav1.Time{Time: now} }), rotate: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			want := ca
			if tc.ca != nil {
				want = tc.ca
			}
			rotate, wait := placement.NeedsRotation(tc.secret, kubeconfig, want, now)
			g.Expect(rotate).To(Equal(tc.rotate))
			g.Expect(wait).To(Equal(tc.wait))
		})
	}
}

func TestKroKubeconfig(t *testing.T) {
	g := NewWithT(t)
	data := placement.KroKubeconfig("https://cp.example:6443", "api.cp.example", false)
	g.Expect(placement.KroKubeconfig("https://cp.example:6443", "api.cp.example", false)).To(Equal(data), "stable bytes, so needsRotation can compare them")

	cfg, err := clientcmd.Load(data)
	g.Expect(err).NotTo(HaveOccurred())
	ctx := cfg.Contexts[cfg.CurrentContext]
	g.Expect(ctx).NotTo(BeNil())
	cluster, user := cfg.Clusters[ctx.Cluster], cfg.AuthInfos[ctx.AuthInfo]
	g.Expect(cluster.Server).To(Equal("https://cp.example:6443"))
	g.Expect(cluster.TLSServerName).To(Equal("api.cp.example"))
	g.Expect(cluster.CertificateAuthority).To(Equal("ca.crt"), "relative to the kubeconfig")
	g.Expect(cluster.CertificateAuthorityData).To(BeEmpty())
	g.Expect(cluster.InsecureSkipTLSVerify).To(BeFalse())
	g.Expect(user.TokenFile).To(Equal("token"), "relative to the kubeconfig")
	g.Expect(user.Token).To(BeEmpty())

	insecure, err := clientcmd.Load(placement.KroKubeconfig("https://cp.example:6443", "", true))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(insecure.Clusters[placement.KroKubeconfigName].InsecureSkipTLSVerify).To(BeTrue())
	g.Expect(insecure.Clusters[placement.KroKubeconfigName].CertificateAuthority).To(BeEmpty(), "client-go refuses a CA with insecure")
}

// TestKroKubeconfigResolvesBesideItself proves that client-go reads the token and the CA
// from the kubeconfig's folder, wherever the secret is mounted.
func TestKroKubeconfigResolvesBesideItself(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	path := credentialtest.WriteFiles(g, dir, map[string][]byte{
		owned.KubeconfigKey: placement.KroKubeconfig("https://cp.example:6443", "", false), owned.KroCredentialTokenKey: []byte("t0k3n"), owned.KroCredentialCAKey: []byte("ca"),
	})
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cfg.BearerTokenFile).To(Equal(filepath.Join(dir, "token")))
	g.Expect(cfg.BearerToken).To(Equal("t0k3n"))
	g.Expect(cfg.CAFile).To(Equal(filepath.Join(dir, "ca.crt")))
}

func TestKroCredentialEndpoint(t *testing.T) {
	g := NewWithT(t)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	g.Expect(os.WriteFile(caFile, []byte("file ca"), 0o600)).To(Succeed())

	ep, err := placement.ControlPlaneEndpoint(&rest.Config{Host: "cp.example:6443", TLSClientConfig: rest.TLSClientConfig{CAData: []byte("ca"), ServerName: "api"}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ep).To(Equal(placement.KroEndpoint{Server: "https://cp.example:6443", TLSServerName: "api", CaData: []byte("ca")}))

	ep, err = placement.ControlPlaneEndpoint(&rest.Config{Host: "https://proxy.example/cp/a", TLSClientConfig: rest.TLSClientConfig{CAFile: caFile}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ep.Server).To(Equal("https://proxy.example/cp/a"), "a path prefix is kept")
	g.Expect(ep.CaData).To(Equal([]byte("file ca")), "kro cannot read the provider's files")

	ep, err = placement.ControlPlaneEndpoint(&rest.Config{Host: "https://cp.example", TLSClientConfig: rest.TLSClientConfig{Insecure: true, CAData: []byte("ca")}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ep.Insecure).To(BeTrue())
	g.Expect(ep.CaData).To(BeNil())

	_, err = placement.ControlPlaneEndpoint(&rest.Config{Host: "https://cp.example"})
	g.Expect(err).To(MatchError(ContainSubstring("no CA bundle")))
	_, err = placement.ControlPlaneEndpoint(&rest.Config{})
	g.Expect(err).To(MatchError(ContainSubstring("names no server")))
	_, err = placement.ControlPlaneEndpoint(&rest.Config{Host: "https://cp.example", TLSClientConfig: rest.TLSClientConfig{CAFile: filepath.Join(t.TempDir(), "missing")}})
	g.Expect(err).To(MatchError(ContainSubstring("reading the ControlPlane's CA bundle")))
}

func TestKroCredentialRedaction(t *testing.T) {
	g := NewWithT(t)
	token := []byte("eyJhbGciOiJSUzI1NiJ9.secret.sig")
	raw := placement.RedactToken(fmt.Errorf("wrapped: %w", errors.New("body: "+string(token))), token)
	g.Expect(raw.Error()).To(Equal("wrapped: body: [redacted]"))
	encoded := placement.RedactToken(errors.New(`{"data":{"token":"`+base64.StdEncoding.EncodeToString(token)+`"}}`), token)
	g.Expect(encoded.Error()).NotTo(ContainSubstring(base64.StdEncoding.EncodeToString(token)))
	clean := apierrors.NewNotFound(corev1.Resource("secrets"), "x")
	g.Expect(placement.RedactToken(clean, token)).To(BeIdenticalTo(error(clean)), "an error without the token keeps its chain")
	g.Expect(placement.RedactToken(nil, token)).To(Succeed())
}

// --- against real API servers --------------------------------------------------------

// TestKroCredential runs the credential's life on two API servers of its own, a
// ControlPlane and a workload cluster, started for this test alone: the suite's four and
// its manager are not needed. Like the suite, it fails when they cannot be started.
func TestKroCredential(t *testing.T) {
	ctx := context.Background()
	cs, err := testenv.StartClusters(ctx, testenv.ClusterOptions{Name: "kro-credential-cp"}, testenv.ClusterOptions{Name: "kro-credential-workload"})
	if err != nil {
		t.Fatalf("starting a ControlPlane and a workload cluster: %v", err)
	}
	t.Cleanup(func() { testenv.StopClusters(cs...) })
	cp, workload := cs[0], cs[1]
	kro := &v1alpha1.Kro{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "tenant"}}
	const ns, lifetime = "kro-tenant", time.Hour
	saUser := "system:serviceaccount:" + owned.KroNamespace + ":" + owned.KroServiceAccountName
	dir := t.TempDir()
	var path string
	var first *corev1.Secret
	ensure := func(g Gomega, cpConfig *rest.Config, now time.Time) (time.Duration, bool) {
		requeue, rotated, err := placement.EnsureKroCredential(ctx, cp.Client, cpConfig, workload.Client, kro, providerName, ns, lifetime, now)
		g.Expect(err).NotTo(HaveOccurred())
		return requeue, rotated
	}

	t.Run("kro gets an identity of its own, not the provider's", func(t *testing.T) {
		g := NewWithT(t)
		requeue, rotated := ensure(g, cp.Config, time.Now())
		g.Expect(rotated).To(BeTrue())
		g.Expect(requeue).To(BeNumerically("~", lifetime*2/3, 10*time.Second))
		first = credentialtest.Get(g, workload.Client, ns)
		g.Expect(first.Type).To(Equal(corev1.SecretTypeOpaque))
		g.Expect(first.Labels).To(HaveKeyWithValue(v1alpha1.LabelRole, v1alpha1.RoleKroCredential))
		g.Expect(first.Annotations).To(HaveKeyWithValue(v1alpha1.AnnotationKro, "team-a/tenant"))
		g.Expect(first.Data[owned.KroCredentialCAKey]).To(Equal(cp.Config.CAData))
		g.Expect(bytes.Contains(first.Data[owned.KubeconfigKey], first.Data[owned.KroCredentialTokenKey])).To(BeFalse(), "the kubeconfig only names the token file")

		path = credentialtest.WriteFiles(g, dir, first.Data)
		cfg, err := clientcmd.BuildConfigFromFlags("", path)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(credentialtest.WhoAmI(ctx, cfg)).To(Equal(saUser))
		_, err = kubernetes.NewForConfigOrDie(cfg).CoreV1().Secrets(owned.KroNamespace).List(ctx, metav1.ListOptions{})
		g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "no RBAC is bound to kro's ServiceAccount, got %v", err)
	})

	t.Run("an idle call writes nothing", func(t *testing.T) {
		g := NewWithT(t)
		sa := &corev1.ServiceAccount{}
		g.Expect(cp.Client.Get(ctx, owned.KroServiceAccount, sa)).To(Succeed())
		requeue, rotated := ensure(g, cp.Config, time.Now().Add(time.Minute))
		g.Expect(rotated).To(BeFalse())
		g.Expect(requeue).To(BeNumerically("~", lifetime*2/3-time.Minute, 10*time.Second))
		g.Expect(credentialtest.Get(g, workload.Client, ns).ResourceVersion).To(Equal(first.ResourceVersion))
		after := &corev1.ServiceAccount{}
		g.Expect(cp.Client.Get(ctx, owned.KroServiceAccount, after)).To(Succeed())
		g.Expect(after.ResourceVersion).To(Equal(sa.ResourceVersion))
	})

	t.Run("a token two thirds through its lifetime is rotated in place", func(t *testing.T) {
		g := NewWithT(t)
		old := credentialtest.Get(g, workload.Client, ns)
		patch := client.MergeFrom(old.DeepCopy())
		old.Annotations[v1alpha1.AnnotationTokenIssued] = time.Now().Add(-50 * time.Hour).UTC().Format(time.RFC3339)
		g.Expect(workload.Client.Patch(ctx, old, patch)).To(Succeed())

		_, rotated := ensure(g, cp.Config, time.Now())
		g.Expect(rotated).To(BeTrue())
		rotatedSecret := credentialtest.Get(g, workload.Client, ns)
		token := rotatedSecret.Data[owned.KroCredentialTokenKey]
		g.Expect(token).NotTo(Equal(first.Data[owned.KroCredentialTokenKey]))
		g.Expect(rotatedSecret.Data[owned.KubeconfigKey]).To(Equal(first.Data[owned.KubeconfigKey]), "the same kubeconfig")

		// As the kubelet updates a mounted secret: the files change, the path stays.
		g.Expect(credentialtest.WriteFiles(g, dir, rotatedSecret.Data)).To(Equal(path))
		cfg, err := clientcmd.BuildConfigFromFlags("", path)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(cfg.BearerToken).To(Equal(string(token)))
		g.Expect(credentialtest.WhoAmI(ctx, cfg)).To(Equal(saUser))
	})

	t.Run("a changed server is rotated", func(t *testing.T) {
		g := NewWithT(t)
		moved := rest.CopyConfig(cp.Config)
		moved.ServerName = "localhost"
		_, rotated := ensure(g, moved, time.Now())
		g.Expect(rotated).To(BeTrue())
		g.Expect(string(credentialtest.Get(g, workload.Client, ns).Data[owned.KubeconfigKey])).To(ContainSubstring("tls-server-name: localhost"))
		_, rotated = ensure(g, cp.Config, time.Now())
		g.Expect(rotated).To(BeTrue(), "and back")
	})

	t.Run("short lifetimes are raised to the API server's minimum", func(t *testing.T) {
		g := NewWithT(t)
		_, expires, err := placement.MintKroToken(ctx, cp.Client, kro, providerName, owned.KroServiceAccount, time.Minute)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(expires).To(BeTemporally(">", time.Now().Add(9*time.Minute)))
	})

	t.Run("a secret of that name made by someone else is not overwritten", func(t *testing.T) {
		g := NewWithT(t)
		const other = "kro-foreign"
		g.Expect(workload.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: other}})).To(Succeed())
		foreign := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: other, Name: owned.KroCredentialSecretName}, StringData: map[string]string{"x": "y"}}
		g.Expect(workload.Client.Create(ctx, foreign)).To(Succeed())
		_, _, err := placement.EnsureKroCredential(ctx, cp.Client, cp.Config, workload.Client, kro, providerName, other, lifetime, time.Now())
		g.Expect(err).To(MatchError(ContainSubstring("neither overwrites nor deletes it")))
		g.Expect(credentialtest.Get(g, workload.Client, other).ResourceVersion).To(Equal(foreign.ResourceVersion))
	})

	t.Run("errors do not reveal the token", func(t *testing.T) {
		g := NewWithT(t)
		for _, tc := range []struct {
			name  string
			write func(ctx context.Context, obj client.Object, patch client.Patch, token []byte, opts ...client.PatchOption) error
		}{
			{name: "workload cluster refuses the provider", write: func(ctx context.Context, obj client.Object, patch client.Patch, _ []byte, opts ...client.PatchOption) error {
				return refusedClient(g, workload).Patch(ctx, obj, patch, opts...)
			}},
			{name: "error echoes the request", write: func(_ context.Context, _ client.Object, _ client.Patch, token []byte, _ ...client.PatchOption) error {
				return fmt.Errorf("proxy: bad request %s, body %s", token, base64.StdEncoding.EncodeToString(token))
			}},
		} {
			var token []byte
			failing := interceptor.NewClient(withWatch(g, workload), interceptor.Funcs{
				Patch: func(ctx context.Context, _ client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
					token = obj.(*corev1.Secret).Data[owned.KroCredentialTokenKey]
					return tc.write(ctx, obj, patch, token, opts...)
				},
			})
			_, rotated, err := placement.EnsureKroCredential(ctx, cp.Client, cp.Config, failing, kro, providerName, "kro-failing", lifetime, time.Now())
			g.Expect(err).To(HaveOccurred(), tc.name)
			t.Logf("%s: %v", tc.name, err)
			g.Expect(rotated).To(BeFalse(), tc.name)
			g.Expect(token).NotTo(BeEmpty(), "%s: a token was minted before the write", tc.name)
			g.Expect(err.Error()).To(ContainSubstring("writing secret kro-failing/"+owned.KroCredentialSecretName), tc.name)
			g.Expect(err.Error()).NotTo(ContainSubstring(string(token)), tc.name)
			g.Expect(err.Error()).NotTo(ContainSubstring(base64.StdEncoding.EncodeToString(token)), tc.name)
		}
	})

	t.Run("removal revokes kro's tokens", func(t *testing.T) {
		g := NewWithT(t)
		cfg, err := clientcmd.BuildConfigFromFlags("", path)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(credentialtest.WhoAmI(ctx, cfg)).To(Equal(saUser))

		remove := func() error { // as a deletion does: the ServiceAccount first, then the secret
			return errors.Join(owned.DeleteProviders(ctx, cp.Client, cp.Client, owned.KroServiceAccount, &corev1.ServiceAccount{}),
				owned.DeleteProviders(ctx, workload.Client, workload.Client, client.ObjectKey{Namespace: ns, Name: owned.KroCredentialSecretName}, &corev1.Secret{}))
		}
		g.Expect(remove()).To(Succeed())
		err = workload.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: owned.KroCredentialSecretName}, &corev1.Secret{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "secret: %v", err)
		err = cp.Client.Get(ctx, owned.KroServiceAccount, &corev1.ServiceAccount{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "ServiceAccount: %v", err)
		g.Eventually(func() bool {
			_, err := credentialtest.WhoAmI(ctx, cfg)
			return apierrors.IsUnauthorized(err)
		}, credentialtest.RevocationTimeout, 100*time.Millisecond).Should(BeTrue(), "the token of the deleted ServiceAccount still authenticates")
		g.Expect(remove()).To(Succeed(), "gone already")
	})
}

// withWatch is a client on the cluster that an interceptor can wrap.
func withWatch(g Gomega, c *testenv.Cluster) client.WithWatch {
	out, err := client.NewWithWatch(c.Config, client.Options{Scheme: clusters.Scheme})
	g.Expect(err).NotTo(HaveOccurred())
	return out
}

// refusedClient reaches the cluster with a credential it does not accept.
func refusedClient(g Gomega, c *testenv.Cluster) client.Client {
	cfg := &rest.Config{Host: c.Config.Host, BearerToken: "not-a-token", TLSClientConfig: rest.TLSClientConfig{CAData: c.Config.CAData}}
	out, err := client.New(cfg, client.Options{Scheme: clusters.Scheme})
	g.Expect(err).NotTo(HaveOccurred())
	return out
}

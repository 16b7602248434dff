package controllers

import (
	"bytes"
	"context"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	clustersv1alpha1 "github.com/openmcp-project/openmcp-operator/api/clusters/v1alpha1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/clusters"
	"github.com/openmcp-project/service-provider-kro/controllers/owned"
	"github.com/openmcp-project/service-provider-kro/controllers/placement"
	"github.com/openmcp-project/service-provider-kro/controllers/placement/credentialtest"
	"github.com/openmcp-project/service-provider-kro/controllers/reach"
	"github.com/openmcp-project/service-provider-kro/providers/controlplane"
	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

// TestKroCredentialFromGrant makes kro's credential from an access secret as openmcp's
// cluster providers write it (a kubeconfig with a token, and the token's times), with a
// real token of a real API server: the credential authenticates as the granted identity,
// names its token and CA by file, and carries the grant's version and times.
func TestKroCredentialFromGrant(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	cs, err := testenv.StartClusters(ctx, testenv.ClusterOptions{Name: "kro-grant-cp"})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { testenv.StopClusters(cs...) })
	cp := cs[0]

	// What openmcp's cluster provider does for kro's AccessRequest: a ServiceAccount and a
	// token for it, written as a kubeconfig into the access secret.
	sa := types.NamespacedName{Namespace: "default", Name: "granted-kro"}
	g.Expect(cp.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: sa.Namespace, Name: sa.Name}})).To(Succeed())
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(3600))}}
	g.Expect(cp.Client.SubResource("token").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: sa.Namespace, Name: sa.Name}}, req)).To(Succeed())
	kc := clientcmdapi.NewConfig()
	kc.Clusters["cp"] = &clientcmdapi.Cluster{Server: cp.Config.Host, CertificateAuthorityData: cp.Config.CAData}
	kc.AuthInfos["kro"] = &clientcmdapi.AuthInfo{Token: req.Status.Token}
	kc.Contexts["cp"] = &clientcmdapi.Context{Cluster: "cp", AuthInfo: "kro"}
	kc.CurrentContext = "cp"
	kubeconfig, err := clientcmd.Write(*kc)
	g.Expect(err).NotTo(HaveOccurred())
	issued := time.Now().Add(-time.Minute).Truncate(time.Second).UTC()
	grant := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "kro.kubeconfig", ResourceVersion: "42"},
		Data: map[string][]byte{
			clustersv1alpha1.SecretKeyKubeconfig:          kubeconfig,
			clustersv1alpha1.SecretKeyCreationTimestamp:   []byte(strconv.FormatInt(issued.Unix(), 10)),
			clustersv1alpha1.SecretKeyExpirationTimestamp: []byte(strconv.FormatInt(req.Status.ExpirationTimestamp.Unix(), 10)),
		},
	}
	kro := &v1alpha1.Kro{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "tenant"}}

	secret, err := placement.KroCredentialFromGrant(kro, providerName, "kro-tenant", grant, grant.ResourceVersion)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(secret.Namespace).To(Equal("kro-tenant"))
	g.Expect(secret.Labels).To(HaveKeyWithValue(v1alpha1.LabelRole, v1alpha1.RoleKroCredential))
	g.Expect(secret.Annotations).To(HaveKeyWithValue(v1alpha1.AnnotationGrantVersion, "42"))
	g.Expect(secret.Annotations).To(HaveKeyWithValue(v1alpha1.AnnotationTokenIssued, issued.Format(time.RFC3339)))
	g.Expect(secret.Annotations).To(HaveKeyWithValue(v1alpha1.AnnotationTokenExpires, req.Status.ExpirationTimestamp.UTC().Format(time.RFC3339)))
	g.Expect(secret.Data[owned.KroCredentialCAKey]).To(Equal(cp.Config.CAData))
	g.Expect(bytes.Contains(secret.Data[owned.KubeconfigKey], []byte(req.Status.Token))).To(BeFalse(), "the kubeconfig only names the token file")
	cfg, err := clientcmd.BuildConfigFromFlags("", credentialtest.WriteFiles(g, t.TempDir(), secret.Data))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(credentialtest.WhoAmI(ctx, cfg)).To(Equal("system:serviceaccount:default:granted-kro"))

	t.Run("a grant without its times is still copied, without an expiry", func(t *testing.T) {
		g := NewWithT(t)
		bare := grant.DeepCopy()
		delete(bare.Data, clustersv1alpha1.SecretKeyCreationTimestamp)
		delete(bare.Data, clustersv1alpha1.SecretKeyExpirationTimestamp)
		secret, err := placement.KroCredentialFromGrant(kro, providerName, "kro-tenant", bare, "43")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(secret.Annotations).NotTo(HaveKey(v1alpha1.AnnotationTokenExpires))
		g.Expect(secret.Annotations).To(HaveKeyWithValue(v1alpha1.AnnotationGrantVersion, "43"))
	})
	t.Run("a grant that is no token credential is refused with a message, and no token in it", func(t *testing.T) {
		g := NewWithT(t)
		certs := grant.DeepCopy()
		kc.AuthInfos["kro"] = &clientcmdapi.AuthInfo{Username: "kro", Password: "secret-password"}
		certs.Data[clustersv1alpha1.SecretKeyKubeconfig], err = clientcmd.Write(*kc)
		g.Expect(err).NotTo(HaveOccurred())
		_, err := placement.KroCredentialFromGrant(kro, providerName, "kro-tenant", certs, "44")
		g.Expect(err).To(MatchError(ContainSubstring("holds no bearer token")))
		g.Expect(err.Error()).NotTo(ContainSubstring("secret-password"))
		broken := grant.DeepCopy()
		broken.Data[clustersv1alpha1.SecretKeyKubeconfig] = []byte("not: [a kubeconfig")
		_, err = placement.KroCredentialFromGrant(kro, providerName, "kro-tenant", broken, "45")
		g.Expect(err).To(MatchError(ContainSubstring("openmcp's access secret tenant/kro.kubeconfig for kro")))
	})
}

// TestOpenMCPWorkloadRequests checks the requests the provider makes under openmcp for a
// Kro on a workload cluster: a ClusterRequest of purpose workload, an AccessRequest for
// it confined to the tenant's namespace there, and kro's AccessRequest bound to the
// chart's ClusterRoles, each named with openmcp's helper in the tenant namespace and
// accepted by openmcp's own CRDs on a real API server.
func TestOpenMCPWorkloadRequests(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	key := types.NamespacedName{Namespace: "team-a", Name: "tenant"}
	tenant, err := clusters.TenantNamespace(key)
	g.Expect(err).NotTo(HaveOccurred())
	ns, err := reach.WorkloadNamespace(key)
	g.Expect(err).NotTo(HaveOccurred())

	cr, err := clusters.NewWorkloadClusterRequest(providerName, key)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cr.Namespace).To(Equal(tenant))
	g.Expect(cr.Spec.Purpose).To(Equal(clustersv1alpha1.PURPOSE_WORKLOAD))
	ar, err := clusters.NewWorkloadAccessRequest(providerName, key, ns)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ar.Spec.RequestRef.Name).To(Equal(cr.Name))
	g.Expect(ar.Spec.Token.Permissions).To(HaveLen(2))
	g.Expect(ar.Spec.Token.Permissions[0].Namespace).To(Equal(ns))
	g.Expect(ar.Spec.Token.Permissions[1].Rules[0].ResourceNames).To(Equal([]string{ns}))
	g.Expect(ar.Spec.Token.RoleRefs).To(BeEmpty(), "no cluster-wide role on a shared workload cluster")
	kroAR, err := clusters.NewKroAccessRequest(providerName, key, []string{"kro:controller", "kro-b", "kro:controller"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(kroAR.Name).NotTo(Equal(ar.Name))
	g.Expect(kroAR.Spec.RequestRef.Name).To(Equal(key.Name), "kro's access is to the ControlPlane's own ClusterRequest")
	g.Expect(kroAR.Spec.Token.RoleRefs).To(HaveLen(3))
	g.Expect(kroAR.Spec.Token.RoleRefs[0].Name).To(Equal("kro-b"))
	_, err = clusters.NewKroAccessRequest(providerName, key, nil)
	g.Expect(err).To(MatchError(ContainSubstring("binds no ClusterRole")))

	apiDir, err := testenv.ModuleDir(ctx, openMCPModule)
	g.Expect(err).NotTo(HaveOccurred())
	cs, err := testenv.StartClusters(ctx, testenv.ClusterOptions{Name: "openmcp-requests", CRDDirs: []string{
		filepath.Join(apiDir, "crds", "manifests", "clusters.openmcp.cloud_accessrequests.yaml"),
		filepath.Join(apiDir, "crds", "manifests", "clusters.openmcp.cloud_clusterrequests.yaml"),
	}})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { testenv.StopClusters(cs...) })
	pf := cs[0]
	g.Expect(pf.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tenant}})).To(Succeed())
	for _, o := range []client.Object{cr, ar, kroAR} {
		g.Expect(owned.Apply(ctx, pf.Client, o)).To(Succeed(), "%s %s", o.GetObjectKind().GroupVersionKind().Kind, o.GetName())
	}
	t.Run("kro's roles may change, its ControlPlane may not", func(t *testing.T) {
		g := NewWithT(t)
		changed, err := clusters.NewKroAccessRequest(providerName, key, []string{"kro:controller"})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(owned.Apply(ctx, pf.Client, changed)).To(Succeed())
		moved, err := clusters.NewKroAccessRequest(providerName, key, []string{"kro:controller"})
		g.Expect(err).NotTo(HaveOccurred())
		moved.Spec.RequestRef.Name = "elsewhere"
		g.Expect(owned.Apply(ctx, pf.Client, moved)).To(MatchError(ContainSubstring("requestRef is immutable")))
	})
	t.Run("the ClusterRequest is withdrawn only once openmcp has finalized the AccessRequest", func(t *testing.T) {
		g := NewWithT(t)
		// openmcp's cluster provider holds the grant with a finalizer until it is revoked,
		// and revoking needs the Cluster that the ClusterRequest holds.
		held := ar.DeepCopy()
		g.Expect(pf.Client.Get(ctx, client.ObjectKeyFromObject(ar), held)).To(Succeed())
		held.Finalizers = append(held.Finalizers, "clusterprovider.test/access")
		g.Expect(pf.Client.Update(ctx, held)).To(Succeed())
		c := withdrawingControlPlanes(t, pf)
		withdrawn := func() bool {
			done, err := c.WithdrawWorkloadCluster(ctx, key)
			g.Expect(err).NotTo(HaveOccurred())
			return done
		}
		g.Expect(withdrawn()).To(BeFalse())
		g.Eventually(func(g Gomega) {
			g.Expect(pf.Client.Get(ctx, client.ObjectKeyFromObject(ar), held)).To(Succeed())
			g.Expect(held.DeletionTimestamp).NotTo(BeNil(), "the AccessRequest is deleted")
		}).Should(Succeed())
		g.Consistently(func(g Gomega) {
			g.Expect(withdrawn()).To(BeFalse())
			live := &clustersv1alpha1.ClusterRequest{}
			g.Expect(pf.Client.Get(ctx, client.ObjectKeyFromObject(cr), live)).To(Succeed())
			g.Expect(live.DeletionTimestamp).To(BeNil(), "the ClusterRequest waits for the AccessRequest")
		}).WithTimeout(2 * time.Second).Should(Succeed())

		held.Finalizers = nil
		g.Expect(pf.Client.Update(ctx, held)).To(Succeed())
		g.Eventually(withdrawn).WithTimeout(10 * time.Second).Should(BeTrue())
		g.Eventually(func() bool {
			return apierrors.IsNotFound(pf.Client.Get(ctx, client.ObjectKeyFromObject(cr), &clustersv1alpha1.ClusterRequest{}))
		}).Should(BeTrue(), "the ClusterRequest is deleted")

		// A deletion that looks at the workload cluster once more (it removes kro's
		// namespace there) asks for nothing: openmcp would grant it anew and create that
		// namespace again, after the provider had removed it. Even while the access cache
		// still shows the AccessRequest being deleted.
		c.Provider = controlplane.New(controlplane.Options{})
		kro := &v1alpha1.Kro{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
		cr, err := clusters.NewWorkloadClusterRequest(providerName, key)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(owned.Apply(ctx, pf.Client, cr)).To(Succeed())
		granted := &clustersv1alpha1.ClusterRequest{}
		g.Expect(pf.Client.Get(ctx, client.ObjectKeyFromObject(cr), granted)).To(Succeed())
		granted.Status.Phase = clustersv1alpha1.REQUEST_GRANTED
		g.Expect(pf.Client.Status().Update(ctx, granted)).To(Succeed())
		held, err = clusters.NewWorkloadAccessRequest(providerName, key, ns)
		g.Expect(err).NotTo(HaveOccurred())
		held.Finalizers = []string{"clusterprovider.test/access"}
		g.Expect(owned.Apply(ctx, pf.Client, held)).To(Succeed())
		g.Expect(pf.Client.Delete(ctx, held)).To(Succeed())
		for _, state := range []string{"being deleted", "gone"} {
			g.Eventually(func(g Gomega) {
				live := &clustersv1alpha1.AccessRequest{}
				err := c.Kubeconfigs.Get(ctx, client.ObjectKeyFromObject(ar), live)
				if state == "gone" {
					g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the access cache still has it: %v", err)
					return
				}
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(live.DeletionTimestamp).NotTo(BeNil())
			}).Should(Succeed())
			_, err := c.WorkloadCluster(ctx, kro, false)
			na, ok := reach.AsNotAvailable(err)
			g.Expect(ok).To(BeTrue(), "%s: %v", state, err)
			g.Expect(na.Missing).To(BeTrue(), "%s: %v", state, na.Message)
			if state == "being deleted" {
				g.Expect(pf.Client.Get(ctx, client.ObjectKeyFromObject(ar), held)).To(Succeed())
				held.Finalizers = nil
				g.Expect(pf.Client.Update(ctx, held)).To(Succeed())
			}
		}
		g.Consistently(func() bool {
			return apierrors.IsNotFound(pf.Client.Get(ctx, client.ObjectKeyFromObject(ar), &clustersv1alpha1.AccessRequest{}))
		}).WithTimeout(2*time.Second).Should(BeTrue(), "no AccessRequest is asked for anew")
	})
}

// withdrawingControlPlanes is the openmcp side of engagedControlPlanes on the platform
// cluster pf, with a started access cache: enough to withdraw requests.
func withdrawingControlPlanes(t *testing.T, pf *testenv.Cluster) *reach.Engaged {
	t.Helper()
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	cl, err := cluster.New(pf.Config, func(o *cluster.Options) { o.Scheme = clusters.Scheme })
	g.Expect(err).NotTo(HaveOccurred())
	kubeconfigs, err := reach.AccessCache(cl, reach.AccessOpenMCP, providerName)
	g.Expect(err).NotTo(HaveOccurred())
	go func() { _ = kubeconfigs.Start(ctx) }()
	g.Expect(kubeconfigs.WaitForCacheSync(ctx)).To(BeTrue())
	return &reach.Engaged{Mode: reach.AccessOpenMCP, ProviderName: providerName, Platform: pf.Client, Kubeconfigs: kubeconfigs}
}

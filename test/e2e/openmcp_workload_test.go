//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clustersv1alpha1 "github.com/openmcp-project/openmcp-operator/api/clusters/v1alpha1"
	commonapi "github.com/openmcp-project/openmcp-operator/api/common"
	openmcpconst "github.com/openmcp-project/openmcp-operator/api/constants"
	corev2alpha1 "github.com/openmcp-project/openmcp-operator/api/core/v2alpha1"
	libutils "github.com/openmcp-project/openmcp-operator/lib/utils"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/clusters"
	"github.com/openmcp-project/service-provider-kro/controllers/owned"
	"github.com/openmcp-project/service-provider-kro/test/e2e/env"
	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

// The WorkloadCluster placement under openmcp (issue 22): two ControlPlanes' kros on one
// workload cluster that openmcp's scheduler shares, reached through AccessRequests that
// the provider asks for and openmcp's cluster provider grants: the provider's (and
// Flux's) confined to the tenant's namespace there, kro's bound to the ClusterRoles its
// chart binds. kro's controller runs as a process with the credential the provider
// copied from openmcp's grant. Registered inside the openmcp spec, after its deletion.

// openmcpKit gives the workload specs the openmcp spec's environment.
type openmcpKit struct {
	om                   func() *env.OpenMCPEnv
	onboarding, platform func() client.Client
	providerName         string
}

// openmcpWorkloadTenants are the ControlPlanes placed on the workload cluster.
var openmcpWorkloadTenants = []env.ControlPlaneRef{{Name: "mcp-2", Namespace: "tenant-b"}, {Name: "mcp-3", Namespace: "tenant-c"}}

const openmcpWorkloadVersion = "wl"

func openmcpWorkloadSpecs(k openmcpKit) {
	var cps []*env.ControlPlane
	platformNS := func(cp *env.ControlPlane) string {
		GinkgoHelper()
		ns, err := libutils.StableMCPNamespace(cp.Name, cp.Namespace)
		Expect(err).NotTo(HaveOccurred())
		return ns
	}
	workloadNS := func(cp *env.ControlPlane) string {
		GinkgoHelper()
		ns, err := env.WorkloadNamespace(cp)
		Expect(err).NotTo(HaveOccurred())
		return ns
	}
	ours := client.MatchingLabels{openmcpconst.ManagedByLabel: k.providerName}
	requestName := func(cp *env.ControlPlane, kind string) client.ObjectKey {
		GinkgoHelper()
		key := client.ObjectKey{Namespace: cp.Namespace, Name: cp.Name}
		requestKey := clusters.WorkloadRequestKey
		if kind == "kro" {
			requestKey = clusters.KroAccessRequestKey
		}
		name, err := requestKey(k.providerName, key)
		Expect(err).NotTo(HaveOccurred())
		return name
	}
	grantedClient := func(ar client.ObjectKey) (client.Client, string) {
		GinkgoHelper()
		req := &clustersv1alpha1.AccessRequest{}
		Expect(k.platform().Get(suiteCtx, ar, req)).To(Succeed())
		Expect(req.Status.IsGranted()).To(BeTrue(), "AccessRequest %s: %+v", ar, req.Status)
		secret := &corev1.Secret{}
		Expect(k.platform().Get(suiteCtx, client.ObjectKey{Namespace: ar.Namespace, Name: req.Status.SecretRef.Name}, secret)).To(Succeed())
		cfg, err := clientcmd.RESTConfigFromKubeConfig(secret.Data[clustersv1alpha1.SecretKeyKubeconfig])
		Expect(err).NotTo(HaveOccurred())
		c, err := client.New(cfg, client.Options{Scheme: clusters.Scheme})
		Expect(err).NotTo(HaveOccurred())
		return c, secret.Annotations[testenv.AccessServiceAccountLabel]
	}

	It("places two ControlPlanes' kro on one workload cluster that openmcp shares, through access it grants", func() {
		om := k.om()
		for _, ref := range openmcpWorkloadTenants {
			cl := om.ControlPlane(ref.Name)
			Expect(cl).NotTo(BeNil())
			cps = append(cps, &env.ControlPlane{Cluster: *cl, Namespace: ref.Namespace})
		}
		Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
			pc := &v1alpha1.ProviderConfig{}
			if err := k.platform().Get(suiteCtx, client.ObjectKey{Name: k.providerName}, pc); err != nil {
				return err
			}
			values, _ := json.Marshal(map[string]any{"imagePullSecrets": []map[string]string{{"name": om.PullSecretName}}})
			pc.Spec.Versions = append(pc.Spec.Versions, v1alpha1.KroVersion{Version: openmcpWorkloadVersion, ChartVersion: "0.9.4",
				ChartURL: om.ChartURL, ChartPullSecret: om.PullSecretName, Placement: v1alpha1.PlacementWorkloadCluster,
				HelmValues: &apiextensionsv1.JSON{Raw: values}})
			return k.platform().Update(suiteCtx, pc)
		})).To(Succeed())
		measure("openmcp: ControlPlanes and Kros → Ready on the shared workload cluster", func() {
			for _, cp := range cps {
				Expect(k.onboarding().Create(suiteCtx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: cp.Namespace}})).To(Succeed())
				Expect(k.onboarding().Create(suiteCtx, &corev2alpha1.ControlPlane{ObjectMeta: metav1.ObjectMeta{Name: cp.Name, Namespace: cp.Namespace}})).To(Succeed())
				Expect(k.onboarding().Create(suiteCtx, &v1alpha1.Kro{ObjectMeta: metav1.ObjectMeta{Name: cp.Name, Namespace: cp.Namespace},
					Spec: v1alpha1.KroSpec{Version: openmcpWorkloadVersion}})).To(Succeed())
			}
			for _, cp := range cps {
				eventually(5*time.Minute, func(g Gomega) {
					kro := &v1alpha1.Kro{}
					g.Expect(k.onboarding().Get(suiteCtx, client.ObjectKey{Namespace: cp.Namespace, Name: cp.Name}, kro)).To(Succeed())
					g.Expect(kro.Status.Phase).To(Equal(v1alpha1.PhaseReady), describeKro(kro))
					g.Expect(kro.Status.Placement).To(Equal(v1alpha1.PlacementWorkloadCluster))
					g.Expect(condition(kro, v1alpha1.ConditionWorkloadClusterReady).Message).To(ContainSubstring("which openmcp granted"), describeKro(kro))
				})
			}
		})
		By("openmcp's scheduler put both ClusterRequests of purpose workload on one Cluster")
		var shared []string
		for _, cp := range cps {
			var crs clustersv1alpha1.ClusterRequestList
			Expect(k.platform().List(suiteCtx, &crs, client.InNamespace(platformNS(cp)), ours)).To(Succeed())
			Expect(crs.Items).To(HaveLen(1))
			cr := crs.Items[0]
			Expect(cr.Spec.Purpose).To(Equal(clustersv1alpha1.PURPOSE_WORKLOAD))
			Expect(cr.Status.IsGranted()).To(BeTrue(), "%+v", cr.Status)
			shared = append(shared, cr.Status.Cluster.Namespace+"/"+cr.Status.Cluster.Name)
		}
		Expect(shared[0]).To(Equal(shared[1]))
		wc := om.Workload
		for _, cp := range cps {
			ns := workloadNS(cp)
			By(cp.Name + ": the provider's access to the workload cluster reaches " + ns + " and nothing else")
			access, _ := grantedClient(requestName(cp, "workload"))
			Expect(access.List(suiteCtx, &corev1.SecretList{}, client.InNamespace(ns))).To(Succeed())
			for _, other := range cps {
				if other != cp {
					err := access.List(suiteCtx, &corev1.SecretList{}, client.InNamespace(workloadNS(other)))
					Expect(apierrors.IsForbidden(err)).To(BeTrue(), "listing the other tenant's secrets: %v", err)
				}
			}
			err := access.List(suiteCtx, &corev1.NamespaceList{})
			Expect(apierrors.IsForbidden(err)).To(BeTrue(), "listing namespaces: %v", err)
			By(cp.Name + ": " + ns + " is the provider's, with the image pull secret and kro's credential in it")
			nsObj := &corev1.Namespace{}
			Expect(wc.Client.Get(suiteCtx, client.ObjectKey{Name: ns}, nsObj)).To(Succeed())
			Expect(nsObj.Labels).To(HaveKeyWithValue(v1alpha1.LabelManagedBy, v1alpha1.ManagedByValue))
			for _, name := range []string{om.PullSecretName, owned.KroCredentialSecretName} {
				Expect(wc.Client.Get(suiteCtx, client.ObjectKey{Namespace: ns, Name: name}, &corev1.Secret{})).To(Succeed())
			}
			By(cp.Name + ": kro's AccessRequest is bound to the chart's ClusterRole, and kro's credential is that grant")
			ar := &clustersv1alpha1.AccessRequest{}
			Expect(k.platform().Get(suiteCtx, requestName(cp, "kro"), ar)).To(Succeed())
			Expect(ar.Spec.Token.RoleRefs).To(Equal([]commonapi.RoleRef{{Kind: "ClusterRole", Name: "kro-cluster-role"}}))
			_, sa := grantedClient(requestName(cp, "kro"))
			kroClient := kroCredentialClient(cp, wc)
			review := &authenticationv1.SelfSubjectReview{}
			Expect(kroClient.Create(suiteCtx, review)).To(Succeed())
			Expect(review.Status.UserInfo.Username).To(Equal("system:serviceaccount:" + testenv.AccessNamespace + ":" + sa))
			Expect(cp.Client.Get(suiteCtx, client.ObjectKey{Namespace: owned.KroNamespace, Name: owned.KroServiceAccountName}, &corev1.ServiceAccount{})).
				To(WithTransform(apierrors.IsNotFound, BeTrue()), "under openmcp the provider mints no token of its own for kro")
			var bindings rbacv1.ClusterRoleBindingList
			Expect(cp.Client.List(suiteCtx, &bindings, client.MatchingLabels{v1alpha1.LabelRole: v1alpha1.RoleKroParts})).To(Succeed())
			Expect(bindings.Items).To(BeEmpty(), "openmcp binds kro's ClusterRoles, not the chart's bindings")
			Expect(om.StartKroControllerOnWorkload(suiteCtx, &cp.Cluster, client.ObjectKey{Namespace: cp.Namespace, Name: cp.Name})).To(Succeed())
		}
		measure("openmcp: RGD and instance on the workload placement → Ready", func() {
			for _, cp := range cps {
				Expect(cp.Client.Create(suiteCtx, rgdFor(cp))).To(Succeed())
			}
			for _, cp := range cps {
				Eventually(func() error { return cp.Client.Create(suiteCtx, instanceOf(cp)) }).WithContext(suiteCtx).WithTimeout(2 * time.Minute).Should(Succeed())
				eventually(3*time.Minute, func(g Gomega) {
					inst := instanceOf(cp)
					g.Expect(cp.Client.Get(suiteCtx, client.ObjectKeyFromObject(inst), inst)).To(Succeed())
					g.Expect(instanceReady(inst)).To(BeTrue(), "instance %s: %v", inst.GetName(), inst.Object["status"])
					kro := &v1alpha1.Kro{}
					g.Expect(k.onboarding().Get(suiteCtx, client.ObjectKey{Namespace: cp.Namespace, Name: cp.Name}, kro)).To(Succeed())
					g.Expect(kro.Status.ResourceGraphDefinitions).NotTo(BeNil(), describeKro(kro))
					g.Expect(kro.Status.ResourceGraphDefinitions.Ready).To(Equal(int32(1)), describeKro(kro))
				})
			}
		})
	})

	It("copies kro's credential again when openmcp rotates kro's access", func() {
		cp := cps[0]
		ns := workloadNS(cp)
		before := &corev1.Secret{}
		Expect(k.om().Workload.Client.Get(suiteCtx, client.ObjectKey{Namespace: ns, Name: owned.KroCredentialSecretName}, before)).To(Succeed())
		measure("openmcp: kro's access rotated → credential copied", func() {
			Expect(k.om().ClusterProvider.RotateAccess(suiteCtx, requestName(cp, "kro"))).To(Succeed())
			eventually(time.Minute, func(g Gomega) {
				after := &corev1.Secret{}
				g.Expect(k.om().Workload.Client.Get(suiteCtx, client.ObjectKey{Namespace: ns, Name: owned.KroCredentialSecretName}, after)).To(Succeed())
				g.Expect(after.Data[owned.KroCredentialTokenKey]).NotTo(Equal(before.Data[owned.KroCredentialTokenKey]))
				g.Expect(after.Annotations[v1alpha1.AnnotationGrantVersion]).NotTo(Equal(before.Annotations[v1alpha1.AnnotationGrantVersion]))
			})
		})
		By("the new token works, and names the ServiceAccount openmcp issued anew")
		_, sa := grantedClient(requestName(cp, "kro"))
		review := &authenticationv1.SelfSubjectReview{}
		Expect(kroCredentialClient(cp, k.om().Workload).Create(suiteCtx, review)).To(Succeed())
		Expect(review.Status.UserInfo.Username).To(Equal("system:serviceaccount:" + testenv.AccessNamespace + ":" + sa))
		By("kro's controller restarts with it, and the ControlPlane's Kro stays Ready")
		Expect(k.om().StopKroControllerOnWorkload(&cp.Cluster)).To(Succeed())
		Expect(k.om().StartKroControllerOnWorkload(suiteCtx, &cp.Cluster, client.ObjectKey{Namespace: cp.Namespace, Name: cp.Name})).To(Succeed())
		eventually(time.Minute, func(g Gomega) {
			kro := &v1alpha1.Kro{}
			g.Expect(k.onboarding().Get(suiteCtx, client.ObjectKey{Namespace: cp.Namespace, Name: cp.Name}, kro)).To(Succeed())
			g.Expect(kro.Status.Phase).To(Equal(v1alpha1.PhaseReady), describeKro(kro))
		})
	})

	It("withdraws each Kro's requests with it, the shared workload cluster's last one included, and leaves nothing behind", func() {
		wc := k.om().Workload
		for i, cp := range cps {
			// The ServiceAccounts openmcp's cluster provider issued for the Kro's requests.
			_, kroSA := grantedClient(requestName(cp, "kro"))
			_, workloadSA := grantedClient(requestName(cp, "workload"))
			Expect(cp.Client.Delete(suiteCtx, instanceOf(cp))).To(Succeed())
			eventually(time.Minute, func(g Gomega) {
				err := cp.Client.Get(suiteCtx, client.ObjectKeyFromObject(instanceOf(cp)), instanceOf(cp))
				g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "instance of %s still there: %v", cp.Name, err)
			})
			Expect(cp.Client.Delete(suiteCtx, rgdFor(cp))).To(Succeed())
			measure(fmt.Sprintf("openmcp: workload Kro %d of %d deleted", i+1, len(cps)), func() {
				kro := &v1alpha1.Kro{ObjectMeta: metav1.ObjectMeta{Name: cp.Name, Namespace: cp.Namespace}}
				Expect(k.onboarding().Delete(suiteCtx, kro)).To(Succeed())
				eventually(5*time.Minute, func(g Gomega) {
					err := k.onboarding().Get(suiteCtx, client.ObjectKeyFromObject(kro), kro)
					g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "still there: %s", describeKro(kro))
				})
			})
			Expect(k.om().StopKroControllerOnWorkload(&cp.Cluster)).To(Succeed())
			By(cp.Name + ": no request of the provider's is left in its platform namespace, and openmcp revoked what it granted")
			eventually(time.Minute, func(g Gomega) {
				var ars clustersv1alpha1.AccessRequestList
				g.Expect(k.platform().List(suiteCtx, &ars, client.InNamespace(platformNS(cp)), ours)).To(Succeed())
				g.Expect(ars.Items).To(BeEmpty())
				var crs clustersv1alpha1.ClusterRequestList
				g.Expect(k.platform().List(suiteCtx, &crs, client.InNamespace(platformNS(cp)), ours)).To(Succeed())
				g.Expect(crs.Items).To(BeEmpty())
				err := cp.Client.Get(suiteCtx, client.ObjectKey{Namespace: testenv.AccessNamespace, Name: kroSA}, &corev1.ServiceAccount{})
				g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "kro's grant on the ControlPlane is revoked: %v", err)
				err = wc.Client.Get(suiteCtx, client.ObjectKey{Namespace: testenv.AccessNamespace, Name: workloadSA}, &corev1.ServiceAccount{})
				g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the provider's grant on the workload cluster is revoked: %v", err)
				ns := &corev1.Namespace{}
				err = wc.Client.Get(suiteCtx, client.ObjectKey{Name: workloadNS(cp)}, ns)
				g.Expect(apierrors.IsNotFound(err) || !ns.DeletionTimestamp.IsZero()).To(BeTrue(), "namespace %s: %v", workloadNS(cp), err)
			})
			var roles rbacv1.ClusterRoleList
			Expect(cp.Client.List(suiteCtx, &roles, client.MatchingLabels{v1alpha1.LabelRole: v1alpha1.RoleKroParts})).To(Succeed())
			Expect(roles.Items).To(BeEmpty(), "kro's ClusterRoles on the ControlPlane")
		}
		By("no grant is left on the workload cluster")
		var sas corev1.ServiceAccountList
		Expect(wc.Client.List(suiteCtx, &sas, client.InNamespace(testenv.AccessNamespace), client.HasLabels{testenv.AccessServiceAccountLabel})).To(Succeed())
		Expect(sas.Items).To(BeEmpty())
		var left []string
		var crs clustersv1alpha1.ClusterRequestList
		Expect(k.platform().List(suiteCtx, &crs)).To(Succeed())
		for _, cr := range crs.Items {
			if cr.Spec.Purpose == clustersv1alpha1.PURPOSE_WORKLOAD {
				left = append(left, cr.Namespace+"/"+cr.Name)
			}
		}
		Expect(left).To(BeEmpty(), "ClusterRequests of purpose workload")
	})
}

// kroCredentialClient is a client with the credential the provider wrote for cp's kro on
// the workload cluster wc, its files laid out as kro's pod mounts them.
func kroCredentialClient(cp *env.ControlPlane, wc *env.Cluster) client.Client {
	GinkgoHelper()
	kubeconfig, files, err := env.KroCredential(suiteCtx, cp, &env.ControlPlane{Cluster: *wc})
	Expect(err).NotTo(HaveOccurred())
	dir := GinkgoT().TempDir()
	Expect(writeFiles(dir, map[string][]byte{"kubeconfig": kubeconfig}, files)).To(Succeed())
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(dir, "kubeconfig"))
	Expect(err).NotTo(HaveOccurred())
	c, err := client.New(cfg, client.Options{Scheme: clusters.Scheme})
	Expect(err).NotTo(HaveOccurred())
	return c
}

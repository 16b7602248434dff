//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/owned"
	"github.com/openmcp-project/service-provider-kro/test/e2e/env"
)

// kro on a workload cluster (issue 22): two tenants share one workload cluster (kwok),
// each with kro's real chart in a namespace of its own there, installed by real Flux; kro's
// controller runs as a process with the credential the provider prepared for it on the
// workload cluster, and makes an RGD and an instance Ready on each ControlPlane. One
// tenant's version runs kro's RBAC in aggregation mode: its credential is its own, and
// holds what the chart grants and nothing more.

const workloadVersion, workloadAggregatedVersion = "wl", "wl-aggregated"

var _ = Describe("kro on a workload cluster", Ordered, Label("workload"), func() {
	var (
		se  *env.Env
		cps []*env.ControlPlane
		wc  *env.ControlPlane
	)
	refs := []env.ControlPlaneRef{{Name: "wl-a", Namespace: "wl-a"}, {Name: "wl-b", Namespace: "wl-b"}}
	versionOf := map[string]string{"wl-a": workloadAggregatedVersion, "wl-b": workloadVersion}
	workloadNS := func(cp *env.ControlPlane) string {
		GinkgoHelper()
		ns, err := env.WorkloadNamespace(cp)
		Expect(err).NotTo(HaveOccurred())
		return ns
	}

	BeforeAll(func() {
		se = startRolloutEnv("workload", "workload", refs)
		cps = se.ControlPlanes
		var err error
		measure("workload: workload cluster up", func() {
			wc, err = se.AddWorkloadCluster(suiteCtx, "workload-1")
		})
		Expect(err).NotTo(HaveOccurred())
		for _, cp := range cps {
			Expect(se.Platform.Client.Create(suiteCtx, se.WorkloadSecret(cp, wc))).To(Succeed())
		}
		values := func(mode string) *apiextensionsv1.JSON {
			raw, _ := json.Marshal(map[string]any{"rbac": map[string]any{"mode": mode}, "imagePullSecrets": []map[string]string{{"name": env.PullSecretName}}})
			return &apiextensionsv1.JSON{Raw: raw}
		}
		updateProviderConfig(se, func(pc *v1alpha1.ProviderConfig) {
			pc.Spec.Versions = append(pc.Spec.Versions,
				v1alpha1.KroVersion{Version: workloadVersion, ChartVersion: "0.9.4", ChartURL: se.ChartURL, ChartPullSecret: env.PullSecretName,
					Placement: v1alpha1.PlacementWorkloadCluster, HelmValues: values("unrestricted")},
				v1alpha1.KroVersion{Version: workloadAggregatedVersion, ChartVersion: "0.9.4", ChartURL: se.ChartURL, ChartPullSecret: env.PullSecretName,
					Placement: v1alpha1.PlacementWorkloadCluster, HelmValues: values("aggregation")})
		})
	})

	It("installs kro for two tenants into namespaces of their own on one workload cluster", func() {
		measure("workload: Kros created → Ready on the workload cluster", func() {
			for _, cp := range cps {
				Expect(se.Onboarding.Client.Create(suiteCtx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: cp.Namespace}})).To(Succeed())
				kro := kroOf(cp)
				kro.Spec.Version = versionOf[cp.Name]
				Expect(se.Onboarding.Client.Create(suiteCtx, kro)).To(Succeed())
			}
			for _, cp := range cps {
				eventually(5*time.Minute, func(g Gomega) {
					kro := kroOf(cp)
					g.Expect(se.Onboarding.Client.Get(suiteCtx, client.ObjectKeyFromObject(kro), kro)).To(Succeed())
					g.Expect(kro.Status.Phase).To(Equal(v1alpha1.PhaseReady), describeKro(kro))
					g.Expect(kro.Status.Placement).To(Equal(v1alpha1.PlacementWorkloadCluster))
					for _, typ := range []string{v1alpha1.ConditionWorkloadClusterReady, v1alpha1.ConditionControlPlanePartsReady, v1alpha1.ConditionKroCredentialReady} {
						g.Expect(condition(kro, typ)).NotTo(BeNil(), "%s: %s", typ, describeKro(kro))
						g.Expect(condition(kro, typ).Status).To(Equal(metav1.ConditionTrue), describeKro(kro))
					}
				})
			}
		})
		for _, cp := range cps {
			ns := workloadNS(cp)
			By(cp.Name + ": kro's Deployment runs in " + ns + " on the workload cluster, reaching the ControlPlane with its mounted credential")
			var deps appsv1.DeploymentList
			Expect(wc.Client.List(suiteCtx, &deps, client.InNamespace(ns))).To(Succeed())
			Expect(deps.Items).To(HaveLen(1))
			pod := deps.Items[0].Spec.Template.Spec
			sa := &corev1.ServiceAccount{}
			Expect(wc.Client.Get(suiteCtx, client.ObjectKey{Namespace: ns, Name: pod.ServiceAccountName}, sa)).To(Succeed())
			Expect(sa.AutomountServiceAccountToken).To(HaveValue(BeFalse()), "no token for the workload cluster in kro's pod")
			Expect(pod.Containers[0].Env).To(ContainElement(corev1.EnvVar{Name: "KUBECONFIG", Value: "/etc/kro/controlplane/kubeconfig"}))
			Expect(pod.Volumes).To(ContainElement(HaveField("Secret.SecretName", owned.KroCredentialSecretName)))
			eventually(time.Minute, func(g Gomega) {
				d := &appsv1.Deployment{}
				g.Expect(wc.Client.Get(suiteCtx, client.ObjectKeyFromObject(&deps.Items[0]), d)).To(Succeed())
				g.Expect(d.Status.AvailableReplicas).To(BeEquivalentTo(1))
			})
			By(cp.Name + ": the image pull secret and kro's credential are in " + ns)
			for _, name := range []string{env.PullSecretName, owned.KroCredentialSecretName} {
				Expect(wc.Client.Get(suiteCtx, client.ObjectKey{Namespace: ns, Name: name}, &corev1.Secret{})).To(Succeed())
			}
			By(cp.Name + ": kro's CRDs and RBAC, and no Deployment, on the ControlPlane")
			for _, crd := range []string{env.RGDCRD, "graphrevisions.internal.kro.run"} {
				Expect(cp.Client.Get(suiteCtx, client.ObjectKey{Name: crd}, &apiextensionsv1.CustomResourceDefinition{})).To(Succeed())
			}
			Expect(cp.Client.Get(suiteCtx, client.ObjectKey{Namespace: owned.KroNamespace, Name: owned.KroServiceAccountName}, &corev1.ServiceAccount{})).To(Succeed())
			var roles rbacv1.ClusterRoleList
			Expect(cp.Client.List(suiteCtx, &roles, client.MatchingLabels{v1alpha1.LabelRole: v1alpha1.RoleKroParts})).To(Succeed())
			Expect(roles.Items).NotTo(BeEmpty())
			var cpDeps appsv1.DeploymentList
			Expect(client.IgnoreNotFound(cp.Client.List(suiteCtx, &cpDeps, client.InNamespace(owned.KroNamespace)))).To(Succeed())
			Expect(cpDeps.Items).To(BeEmpty(), "kro does not run in the ControlPlane")
		}
		By("the workload cluster has none of the chart's cluster-wide RBAC")
		var roles rbacv1.ClusterRoleList
		Expect(wc.Client.List(suiteCtx, &roles, client.HasLabels{"app.kubernetes.io/part-of"})).To(Succeed())
		for _, r := range roles.Items {
			Expect(r.Labels["app.kubernetes.io/part-of"]).NotTo(Equal("kro"), "ClusterRole %s", r.Name)
		}
	})

	It("runs kro with a credential of its own, enough for an RGD and an instance to become Ready", func() {
		for _, cp := range cps {
			By(cp.Name + ": the credential is kro's service account, not the provider's access")
			kroClient := kroCredentialClient(cp, &wc.Cluster)
			review := &authenticationv1.SelfSubjectReview{}
			Expect(kroClient.Create(suiteCtx, review)).To(Succeed())
			Expect(review.Status.UserInfo.Username).To(Equal("system:serviceaccount:kro-system:kro"))
			if versionOf[cp.Name] == workloadAggregatedVersion {
				By(cp.Name + ": in aggregation mode it may not read the ControlPlane's secrets")
				err := kroClient.List(suiteCtx, &corev1.SecretList{})
				Expect(apierrors.IsForbidden(err)).To(BeTrue(), "listing secrets: %v", err)
				// What kro's users grant it for their kinds, as the chart's aggregation asks.
				Expect(cp.Client.Create(suiteCtx, &rbacv1.ClusterRole{
					ObjectMeta: metav1.ObjectMeta{Name: "e2e-kro-instances", Labels: map[string]string{"rbac.kro.run/aggregate-to-controller": "true"}},
					Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"kro.run"}, Resources: []string{"*"}, Verbs: []string{"*"}}},
				})).To(Succeed())
			}
			Expect(se.StartKroControllerOnWorkload(suiteCtx, cp, wc)).To(Succeed())
		}
		measure("workload: RGD and instance applied → Ready", func() {
			for _, cp := range cps {
				Expect(cp.Client.Create(suiteCtx, rgdFor(cp))).To(Succeed())
			}
			for _, cp := range cps {
				eventually(3*time.Minute, func(g Gomega) {
					kro := getKroIn(g, se, cp)
					g.Expect(kro.Status.ResourceGraphDefinitions).NotTo(BeNil(), describeKro(kro))
					g.Expect(kro.Status.ResourceGraphDefinitions.Ready).To(Equal(int32(1)), "%+v", kro.Status.ResourceGraphDefinitions)
				})
				Eventually(func() error { return cp.Client.Create(suiteCtx, instanceOf(cp)) }).WithContext(suiteCtx).WithTimeout(time.Minute).Should(Succeed())
			}
			for _, cp := range cps {
				eventually(3*time.Minute, func(g Gomega) {
					inst := instanceOf(cp)
					g.Expect(cp.Client.Get(suiteCtx, client.ObjectKeyFromObject(inst), inst)).To(Succeed())
					g.Expect(instanceReady(inst)).To(BeTrue(), "instance %s: %v", inst.GetName(), inst.Object["status"])
					g.Expect(cp.Client.Get(suiteCtx, client.ObjectKey{Namespace: metav1.NamespaceDefault, Name: "app-" + cp.Name}, &corev1.ConfigMap{})).To(Succeed())
				})
			}
		})
	})

	It("moves a tenant to its ControlPlane and back under maxUnavailable 1, its RGD and instance keeping their UIDs", func() {
		cp := cps[1] // wl-b, alone on its version
		rgd, inst := rgdFor(cp), instanceOf(cp)
		Expect(cp.Client.Get(suiteCtx, client.ObjectKeyFromObject(rgd), rgd)).To(Succeed())
		Expect(cp.Client.Get(suiteCtx, client.ObjectKeyFromObject(inst), inst)).To(Succeed())
		uids := []types.UID{rgd.GetUID(), inst.GetUID()}
		keptUIDs := func() {
			GinkgoHelper()
			now := []types.UID{}
			for _, o := range []*unstructured.Unstructured{rgdFor(cp), instanceOf(cp)} {
				Expect(cp.Client.Get(suiteCtx, client.ObjectKeyFromObject(o), o)).To(Succeed())
				now = append(now, o.GetUID())
			}
			Expect(now).To(Equal(uids), "the RGD and the instance are the same objects")
		}
		// Two kros never run for the ControlPlane at once: kro's Deployment exists (not being
		// deleted) on at most one side whenever it is looked at.
		oneKro := func(g Gomega) (onCP, onWorkload bool) {
			var deps appsv1.DeploymentList
			g.Expect(client.IgnoreNotFound(cp.Client.List(suiteCtx, &deps, client.InNamespace(owned.KroNamespace)))).To(Succeed())
			onCP = len(deps.Items) > 0 && deps.Items[0].DeletionTimestamp.IsZero()
			g.Expect(client.IgnoreNotFound(wc.Client.List(suiteCtx, &deps, client.InNamespace(workloadNS(cp))))).To(Succeed())
			onWorkload = len(deps.Items) > 0 && deps.Items[0].DeletionTimestamp.IsZero()
			Expect(onCP && onWorkload).To(BeFalse(), "kro's Deployment on both sides at once")
			return onCP, onWorkload
		}
		move := func(to v1alpha1.Placement, what string) {
			GinkgoHelper()
			updateProviderConfig(se, func(pc *v1alpha1.ProviderConfig) {
				pc.Spec.Rollout = &v1alpha1.RolloutPolicy{MaxUnavailable: ptr.To(intstr.FromInt32(1)), HealthTimeout: &metav1.Duration{Duration: 4 * time.Minute}}
				for i := range pc.Spec.Versions {
					if pc.Spec.Versions[i].Version == workloadVersion {
						pc.Spec.Versions[i].Placement = to
					}
				}
			})
			stopped := false
			measure("workload: "+what, func() {
				eventually(6*time.Minute, func(g Gomega) {
					onCP, onWorkload := oneKro(g)
					// kro's controller runs here as a process: it stops with the release it
					// stands for, and starts with the new one.
					if !stopped && ((to == v1alpha1.PlacementControlPlane && !onWorkload) || (to == v1alpha1.PlacementWorkloadCluster && !onCP)) {
						stopped = true
						if to == v1alpha1.PlacementControlPlane {
							Expect(se.StopKroControllerOnWorkload(cp)).To(Succeed())
						} else {
							Expect(se.StopKroController(cp)).To(Succeed())
						}
					}
					kro := getKroIn(g, se, cp)
					g.Expect(kro.Status.Placement).To(Equal(to), describeKro(kro))
					g.Expect(kro.Status.Phase).To(Equal(v1alpha1.PhaseReady), describeKro(kro))
					g.Expect(stopped).To(BeTrue(), "kro left the old side")
				})
			})
			keptUIDs()
			if to == v1alpha1.PlacementControlPlane {
				Expect(se.StartKroController(suiteCtx, cp)).To(Succeed())
			} else {
				Expect(se.StartKroControllerOnWorkload(suiteCtx, cp, wc)).To(Succeed())
			}
			eventually(3*time.Minute, func(g Gomega) {
				pc := &v1alpha1.ProviderConfig{}
				g.Expect(se.Platform.Client.Get(suiteCtx, client.ObjectKey{Name: se.ProviderName}, pc)).To(Succeed())
				for _, vs := range pc.Status.Versions {
					if vs.Version == workloadVersion {
						g.Expect(vs.Rollout).To(Equal(v1alpha1.RolloutComplete), "%+v", vs)
						g.Expect(vs.Failed).To(BeEmpty())
					}
				}
				inst := instanceOf(cp)
				g.Expect(cp.Client.Get(suiteCtx, client.ObjectKeyFromObject(inst), inst)).To(Succeed())
				g.Expect(instanceReady(inst)).To(BeTrue(), "instance %s: %v", inst.GetName(), inst.Object["status"])
			})
		}
		move(v1alpha1.PlacementControlPlane, "moved to the ControlPlane")
		By("nothing of the tenant is left on the workload cluster")
		eventually(time.Minute, func(g Gomega) {
			ns := &corev1.Namespace{}
			err := wc.Client.Get(suiteCtx, client.ObjectKey{Name: workloadNS(cp)}, ns)
			g.Expect(apierrors.IsNotFound(err) || !ns.DeletionTimestamp.IsZero()).To(BeTrue(), "namespace %s: %v", workloadNS(cp), err)
		})
		Expect(apierrors.IsNotFound(cp.Client.Get(suiteCtx, client.ObjectKey{Namespace: owned.KroNamespace, Name: owned.KroServiceAccountName}, &corev1.ServiceAccount{}))).To(BeFalse(),
			"the chart's own ServiceAccount kro runs as on the ControlPlane")
		By("the other tenant stayed on the workload cluster throughout")
		Expect(getKroIn(Default, se, cps[0]).Status.Placement).To(Equal(v1alpha1.PlacementWorkloadCluster))
		eventually(2*time.Minute, func(g Gomega) {
			ns := &corev1.Namespace{}
			err := wc.Client.Get(suiteCtx, client.ObjectKey{Name: workloadNS(cp)}, ns)
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the namespace is gone before kro comes back to it: %v", err)
		})
		move(v1alpha1.PlacementWorkloadCluster, "moved back to the workload cluster")
	})

	workloadFaultSpecs(workloadKit{
		env: func() *env.Env { return se }, cps: func() []*env.ControlPlane { return cps },
		wc: func() *env.ControlPlane { return wc }, workloadNS: workloadNS,
	})

	It("guards the deletion, then leaves nothing on any cluster", func() {
		for _, cp := range cps {
			Expect(se.Onboarding.Client.Delete(suiteCtx, kroOf(cp))).To(Succeed())
		}
		By("blocked while an RGD and its instance exist")
		for _, cp := range cps {
			eventually(time.Minute, func(g Gomega) {
				kro := getKroIn(g, se, cp)
				blocked := condition(kro, v1alpha1.ConditionDeletionBlocked)
				g.Expect(blocked.Status).To(Equal(metav1.ConditionTrue), describeKro(kro))
			})
			deps := &appsv1.DeploymentList{}
			Expect(wc.Client.List(suiteCtx, deps, client.InNamespace(workloadNS(cp)))).To(Succeed())
			Expect(deps.Items).To(HaveLen(1), "kro keeps running while the deletion is blocked")
		}
		for _, cp := range cps {
			Expect(cp.Client.Delete(suiteCtx, instanceOf(cp))).To(Succeed())
		}
		for _, cp := range cps {
			eventually(time.Minute, func(g Gomega) {
				err := cp.Client.Get(suiteCtx, client.ObjectKeyFromObject(instanceOf(cp)), instanceOf(cp))
				g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "instance of %s still there: %v", cp.Name, err)
			})
			Expect(cp.Client.Delete(suiteCtx, rgdFor(cp))).To(Succeed())
		}
		measure("workload: Kros deleted", func() {
			eventually(5*time.Minute, func(g Gomega) {
				for _, cp := range cps {
					kro := &v1alpha1.Kro{}
					err := se.Onboarding.Client.Get(suiteCtx, client.ObjectKeyFromObject(kroOf(cp)), kro)
					g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "still there: %s", describeKro(kro))
				}
			})
		})
		for _, cp := range cps {
			Expect(se.StopKroControllerOnWorkload(cp)).To(Succeed())
			By(cp.Name + ": nothing of the tenant is left on the workload cluster")
			eventually(time.Minute, func(g Gomega) {
				ns := &corev1.Namespace{}
				err := wc.Client.Get(suiteCtx, client.ObjectKey{Name: workloadNS(cp)}, ns)
				g.Expect(apierrors.IsNotFound(err) || !ns.DeletionTimestamp.IsZero()).To(BeTrue(), "namespace %s: %v", workloadNS(cp), err)
			})
		}
		left, err := se.CheckLeftovers(suiteCtx, true, cps...)
		Expect(err).NotTo(HaveOccurred())
		Expect(left.Orphaned).To(BeEmpty(), "orphaned: %s", left.Names())
		fmt.Fprintf(GinkgoWriter, "workload: kept after the deletion: %s\n", left.Names())
	})
})

// getKroIn reads the Kro of a ControlPlane from an environment's onboarding cluster.
func getKroIn(g Gomega, se *env.Env, cp *env.ControlPlane) *v1alpha1.Kro {
	kro := kroOf(cp)
	g.Expect(se.Onboarding.Client.Get(suiteCtx, client.ObjectKeyFromObject(kro), kro)).To(Succeed())
	return kro
}

// instanceReady tells whether kro reports an instance Ready.
func instanceReady(u *unstructured.Unstructured) bool {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == "Ready" && m["status"] == "True" {
			return true
		}
	}
	return false
}

// writeFiles writes every file of the maps into dir.
func writeFiles(dir string, sets ...map[string][]byte) error {
	for _, files := range sets {
		for name, data := range files {
			if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
				return err
			}
		}
	}
	return nil
}

// instanceOf is the instance of cp's RGD (rgdFor) the workload specs create.
func instanceOf(cp *env.ControlPlane) *unstructured.Unstructured {
	return instanceOfName(cp, "app-"+cp.Name)
}

// instanceOfName is an instance of cp's RGD of that name, in namespace default; kro makes
// a ConfigMap of the same name for it.
func instanceOfName(cp *env.ControlPlane, name string) *unstructured.Unstructured {
	kind, _, _ := unstructured.NestedString(rgdFor(cp).Object, "spec", "schema", "kind")
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("kro.run/v1alpha1")
	u.SetKind(kind)
	u.SetNamespace(metav1.NamespaceDefault)
	u.SetName(name)
	_ = unstructured.SetNestedField(u.Object, name, "spec", "name")
	return u
}

//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/yaml"

	"github.com/openmcp-project/service-provider-kro/controllers/owned"
	"github.com/openmcp-project/service-provider-kro/test/e2e/env"
	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

// The kind specs run the provider the way a platform team deploys it: kind clusters from
// the offline node image (test/kind), the provider installed by the commands of
// docs/operations.md as a pod from the image `task image` builds, Flux's controllers as
// pods, and kro as a pod on each ControlPlane, installed by Flux from its real chart. The
// platform cluster is the onboarding cluster too. They run with E2E_CLUSTERS=kind alone.
// They share the faults' helpers, which act on fe.
var _ = Describe("on kind clusters", Ordered, Label("kind"), func() {
	var (
		ke       *env.Env
		cp1, cp2 *env.ControlPlane
	)
	providerPods := func(g Gomega) []corev1.Pod {
		var pods corev1.PodList
		g.Expect(ke.Platform.Client.List(suiteCtx, &pods, client.InNamespace(env.KindPodNamespace),
			client.MatchingLabels{"app.kubernetes.io/name": "service-provider-kro"})).To(Succeed())
		return pods.Items
	}
	kroDeployment := func(g Gomega, cp *env.ControlPlane) *appsv1.Deployment {
		var deps appsv1.DeploymentList
		g.Expect(cp.Client.List(suiteCtx, &deps, client.InNamespace(owned.KroNamespace))).To(Succeed())
		g.Expect(deps.Items).To(HaveLen(1), "kro's Deployment on %s", cp.Name)
		return &deps.Items[0]
	}
	expectKroRunning := func(g Gomega, cp *env.ControlPlane, chartVersion string) {
		d := kroDeployment(g, cp)
		g.Expect(d.Spec.Template.Spec.Containers[0].Image).To(Equal(ke.KroImageRepository() + ":" + chartVersion))
		g.Expect(d.Status.ObservedGeneration).To(Equal(d.Generation))
		g.Expect(d.Status.AvailableReplicas).To(Equal(int32(1)), "kro's Deployment on %s: %+v", cp.Name, d.Status)
		g.Expect(d.Status.UpdatedReplicas).To(Equal(int32(1)))
	}

	BeforeAll(func() {
		ctrllog.SetLogger(GinkgoLogr)
		var err error
		measure("kind: bring-up (node image, clusters, registry, images, Flux)", func() {
			ke, err = env.Start(suiteCtx, env.Options{Dir: filepath.Join(logDir, "kind"), Log: GinkgoWriter, Backend: env.BackendKind})
		})
		DeferCleanup(func() { Expect(ke.Stop()).To(Succeed()) })
		Expect(err).NotTo(HaveOccurred())
		for _, t := range ke.Timings {
			recordTiming("kind bring-up: "+t.Step, t.Duration)
		}
		fe = ke
		cp1, cp2 = ke.ControlPlane("cp-1"), ke.ControlPlane("cp-2")
		fmt.Fprintf(GinkgoWriter, "kind through the docker wrapper: %t\n", ke.DockerWrapped())
	})

	It("installs the provider from the release's bundles by the commands of docs/operations.md, its image pulled by digest with the ServiceAccount's pull secret", func() {
		var out string
		measure("kind: documented install from the release → provider Available", func() {
			var err error
			out, err = ke.InstallProvider(suiteCtx)
			Expect(err).NotTo(HaveOccurred(), out)
		})
		pods := providerPods(Default)
		Expect(pods).To(HaveLen(1))
		Expect(pods[0].Spec.Containers[0].Image).To(Equal(ke.Release.PinnedImage()))
		Expect(pods[0].Spec.ImagePullSecrets).NotTo(BeEmpty(), "the ServiceAccount's pull secret")
		Expect(pods[0].Status.Phase).To(Equal(corev1.PodRunning))
		Expect(pods[0].Status.ContainerStatuses[0].Ready).To(BeTrue())
		Expect(pods[0].Status.ContainerStatuses[0].ImageID).To(HaveSuffix(ke.Release.Digest), "the image the node pulled")
	})

	It("makes a Kro Ready on each ControlPlane, with kro running there as a pod", func() {
		measure("kind: Kros created → Ready, kro Available on both ControlPlanes", func() {
			createKro(cp1, "v0.9.3")
			createKro(cp2, "v0.9.4")
			waitUntil(5*time.Minute, time.Second, func(g Gomega) {
				expectKroReady(g, cp1, "0.9.3")
				expectKroReady(g, cp2, "0.9.4")
				expectKroRunning(g, cp1, "0.9.3")
				expectKroRunning(g, cp2, "0.9.4")
			})
		})
		for _, cp := range []*env.ControlPlane{cp1, cp2} {
			var pods corev1.PodList
			Expect(cp.Client.List(suiteCtx, &pods, client.InNamespace(owned.KroNamespace))).To(Succeed())
			Expect(pods.Items).To(HaveLen(1), "kro's pod on %s", cp.Name)
			Expect(pods.Items[0].Spec.ImagePullSecrets).To(ContainElement(corev1.LocalObjectReference{Name: env.PullSecretName}),
				"kro's pod pulls with the secret the provider copied")
			Expect(pods.Items[0].Status.ContainerStatuses[0].ImageID).To(HavePrefix(ke.KroImageRepository()+"@sha256:"), "pulled from the registry on %s", cp.Name)
		}
		mem, err := ke.KindNodeMemory(suiteCtx)
		Expect(err).NotTo(HaveOccurred())
		fmt.Fprintf(GinkgoWriter, "memory of the kind nodes with the provider, Flux and kro running:\n%s\n", mem)
	})

	It("counts an RGD Ready, and kro in its pod makes an instance Ready", func() {
		rgd := testenv.ConfigMapRGD("kind-app", "KindApp")
		Expect(cp2.Client.Create(suiteCtx, rgd)).To(Succeed())
		measure("kind: RGD applied → counted Ready in the Kro", func() {
			waitUntil(3*time.Minute, time.Second, func(g Gomega) {
				kro := getKroOf(g, cp2)
				g.Expect(kro.Status.ResourceGraphDefinitions).NotTo(BeNil(), describeKro(kro))
				g.Expect(kro.Status.ResourceGraphDefinitions.Ready).To(Equal(int32(1)), "%+v", kro.Status.ResourceGraphDefinitions)
			})
		})
		inst := kindInstance()
		Eventually(func() error { return cp2.Client.Create(suiteCtx, inst) }).WithContext(suiteCtx).WithTimeout(time.Minute).Should(Succeed())
		measure("kind: instance applied → Ready, its ConfigMap made", func() {
			waitUntil(3*time.Minute, time.Second, func(g Gomega) {
				got := kindInstance()
				g.Expect(cp2.Client.Get(suiteCtx, client.ObjectKeyFromObject(got), got)).To(Succeed())
				g.Expect(instanceReady(got)).To(BeTrue(), "instance: %v", got.Object["status"])
				g.Expect(cp2.Client.Get(suiteCtx, client.ObjectKey{Namespace: metav1.NamespaceDefault, Name: "kind-app"}, &corev1.ConfigMap{})).To(Succeed())
			})
		})
	})

	It("repairs a deleted pull secret copy on the ControlPlane", func() {
		key := client.ObjectKey{Namespace: owned.KroNamespace, Name: env.PullSecretName}
		old := &corev1.Secret{}
		Expect(cp2.Client.Get(suiteCtx, key, old)).To(Succeed())
		Expect(cp2.Client.Delete(suiteCtx, old)).To(Succeed())
		measure("kind: pull secret copy deleted → repaired", func() {
			waitUntil(time.Minute, 200*time.Millisecond, func(g Gomega) {
				s := &corev1.Secret{}
				g.Expect(cp2.Client.Get(suiteCtx, key, s)).To(Succeed())
				g.Expect(s.UID).NotTo(Equal(old.UID))
				g.Expect(s.Data).To(Equal(old.Data))
			})
		})
	})

	It("upgrades kro on a ControlPlane", func() {
		patchKroOf(cp1, `{"spec":{"version":"v0.9.4"}}`)
		measure("kind: upgrade v0.9.3 → v0.9.4 → Ready, kro's pod replaced", func() {
			waitUntil(5*time.Minute, time.Second, func(g Gomega) {
				expectKroReady(g, cp1, "0.9.4")
				expectKroRunning(g, cp1, "0.9.4")
			})
		})
	})

	It("converges when the provider's pod is deleted in the middle of a version change", func() {
		before := providerPods(Default)
		Expect(before).To(HaveLen(1))
		patchKroOf(cp2, `{"spec":{"version":"v0.9.3"}}`)
		waitUntil(time.Minute, 100*time.Millisecond, func(g Gomega) {
			kro := getKroOf(g, cp2)
			g.Expect(kro.Status.ObservedGeneration).To(Equal(kro.Generation), "the provider took the change up")
		})
		// In the middle: the HelmRelease has the new version, which is not installed yet.
		kro := getKroOf(Default, cp2)
		Expect(condition(kro, "Ready").Status).NotTo(Equal(metav1.ConditionTrue), "the change is still under way: %s", describeKro(kro))
		Expect(ke.Platform.Client.Delete(suiteCtx, &before[0])).To(Succeed())
		measure("kind: provider pod deleted mid-change → new pod Ready, Kro Ready at v0.9.3", func() {
			waitUntil(5*time.Minute, time.Second, func(g Gomega) {
				pods := providerPods(g)
				g.Expect(pods).To(HaveLen(1))
				g.Expect(pods[0].UID).NotTo(Equal(before[0].UID))
				g.Expect(pods[0].Status.ContainerStatuses).NotTo(BeEmpty())
				g.Expect(pods[0].Status.ContainerStatuses[0].Ready).To(BeTrue())
				expectKroReady(g, cp2, "0.9.3")
				expectKroRunning(g, cp2, "0.9.3")
			})
		})
	})

	itUpgradesInvisibly(func() *env.Env { return ke })

	It("answers its probes through its Service, and its metrics only to a caller allowed to read them", func() {
		for path, want := range map[string]string{
			"services/service-provider-kro:probes/proxy/healthz": "ok",
			"services/service-provider-kro:probes/proxy/readyz":  "ok",
		} {
			body, err := servicesProxy(ke, path)
			Expect(err).NotTo(HaveOccurred(), path)
			Expect(body).To(ContainSubstring(want), path)
		}
		// The API server's service proxy passes no token on: the metrics answer 401.
		_, err := servicesProxy(ke, "services/https:service-provider-kro:metrics/proxy/metrics")
		Expect(apierrors.IsUnauthorized(err)).To(BeTrue(), "through the Service without a token: %v", err)
		expectMetricsAccess(ke)
	})

	It("runs with the shipped RBAC and nothing more", func() {
		Expect(boundRoles(ke)).To(ConsistOf(shippedRoles()), "the roles bound to the provider's ServiceAccount")
		for _, r := range shippedRoles() {
			Expect(clusterRules(ke, r)).To(Equal(fileRules(r)), "rules of %s", r)
		}
	})

	It("blocks the deletion while an RGD exists, releases it once it is gone, and leaves nothing", func() {
		Expect(fe.Onboarding.Client.Delete(suiteCtx, kroOf(cp2))).To(Succeed())
		waitUntil(time.Minute, time.Second, func(g Gomega) { expectBlocked(g, cp2, "UserResourcesPresent", "kind-app") })
		Consistently(func(g Gomega) { expectKroRunning(g, cp2, "0.9.3") }).WithContext(suiteCtx).WithTimeout(5 * time.Second).Should(Succeed())
		// As a tenant would: the instance first, and the RGD once kro has finished it (kro
		// needs the RGD to delete an instance).
		Expect(cp2.Client.Delete(suiteCtx, kindInstance())).To(Succeed())
		waitUntil(2*time.Minute, time.Second, func(g Gomega) {
			err := cp2.Client.Get(suiteCtx, client.ObjectKeyFromObject(kindInstance()), kindInstance())
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the instance: %v", err)
		})
		Expect(cp2.Client.Delete(suiteCtx, testenv.ConfigMapRGD("kind-app", "KindApp"))).To(Succeed())
		Expect(fe.Onboarding.Client.Delete(suiteCtx, kroOf(cp1))).To(Succeed())
		measure("kind: RGD deleted → Kros gone, kro uninstalled", func() {
			waitGone(5*time.Minute, cp1, cp2)
		})
		for _, cp := range []*env.ControlPlane{cp1, cp2} {
			var deps appsv1.DeploymentList
			Expect(client.IgnoreNotFound(cp.Client.List(suiteCtx, &deps, client.InNamespace(owned.KroNamespace)))).To(Succeed())
			Expect(deps.Items).To(BeEmpty(), "kro's Deployment on %s", cp.Name)
			err := cp.Client.Get(suiteCtx, client.ObjectKey{Namespace: owned.KroNamespace, Name: env.PullSecretName}, &corev1.Secret{})
			Expect(apierrors.IsNotFound(err)).To(BeTrue(), "pull secret copy on %s: %v", cp.Name, err)
			for _, gvk := range []schema.GroupVersionKind{
				{Group: "helm.toolkit.fluxcd.io", Version: "v2", Kind: "HelmReleaseList"},
				{Group: "source.toolkit.fluxcd.io", Version: "v1", Kind: "OCIRepositoryList"},
			} {
				list := &unstructured.UnstructuredList{}
				list.SetGroupVersionKind(gvk)
				Expect(ke.Platform.Client.List(suiteCtx, list, client.InNamespace(cp.TenantNamespace))).To(Succeed())
				Expect(list.Items).To(BeEmpty(), "%s in %s", gvk.Kind, cp.TenantNamespace)
			}
		}
	})
})

func kindInstance() *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("kro.run/v1alpha1")
	u.SetKind("KindApp")
	u.SetNamespace(metav1.NamespaceDefault)
	u.SetName("kind-app")
	_ = unstructured.SetNestedField(u.Object, "kind-app", "spec", "name")
	return u
}

// servicesProxy GETs a path under the provider's namespace through the platform API
// server's service proxy, which reaches the Service's endpoints.
func servicesProxy(ke *env.Env, path string) (string, error) {
	cs, err := kubernetes.NewForConfig(ke.Platform.Config)
	if err != nil {
		return "", err
	}
	body, err := cs.CoreV1().RESTClient().Get().AbsPath("/api/v1/namespaces/" + env.KindPodNamespace + "/" + path).DoRaw(suiteCtx)
	return string(body), err
}

// roleRef names a (Cluster)Role: "ClusterRole/<name>" or "Role/<namespace>/<name>".
type roleRef = string

// boundRoles lists the roles bound to the provider's ServiceAccount anywhere on the
// platform (and onboarding) cluster.
func boundRoles(ke *env.Env) []roleRef {
	GinkgoHelper()
	isProvider := func(subjects []rbacv1.Subject) bool {
		for _, s := range subjects {
			if s.Kind == rbacv1.ServiceAccountKind && s.Namespace == env.KindPodNamespace && s.Name == "service-provider-kro" {
				return true
			}
		}
		return false
	}
	var out []roleRef
	var crbs rbacv1.ClusterRoleBindingList
	Expect(ke.Platform.Client.List(suiteCtx, &crbs)).To(Succeed())
	for _, b := range crbs.Items {
		if isProvider(b.Subjects) {
			out = append(out, b.RoleRef.Kind+"/"+b.RoleRef.Name)
		}
	}
	var rbs rbacv1.RoleBindingList
	Expect(ke.Platform.Client.List(suiteCtx, &rbs)).To(Succeed())
	for _, b := range rbs.Items {
		if isProvider(b.Subjects) {
			if b.RoleRef.Kind == "Role" {
				out = append(out, "Role/"+b.Namespace+"/"+b.RoleRef.Name)
			} else {
				out = append(out, b.RoleRef.Kind+"/"+b.RoleRef.Name)
			}
		}
	}
	return out
}

// clusterRules are the rules of a role as the cluster has them, as YAML.
func clusterRules(ke *env.Env, r roleRef) string {
	GinkgoHelper()
	parts := strings.Split(r, "/")
	var rules []rbacv1.PolicyRule
	if parts[0] == "ClusterRole" {
		cr := &rbacv1.ClusterRole{}
		Expect(ke.Platform.Client.Get(suiteCtx, client.ObjectKey{Name: parts[1]}, cr)).To(Succeed())
		rules = cr.Rules
	} else {
		role := &rbacv1.Role{}
		Expect(ke.Platform.Client.Get(suiteCtx, client.ObjectKey{Namespace: parts[1], Name: parts[2]}, role)).To(Succeed())
		rules = role.Rules
	}
	out, err := yaml.Marshal(rules)
	Expect(err).NotTo(HaveOccurred())
	return string(out)
}

// rulesOf finds the role r in a file of YAML documents and returns its rules as YAML.
func rulesOf(data []byte, r roleRef) string {
	GinkgoHelper()
	parts := strings.Split(r, "/")
	for _, doc := range strings.Split(string(data), "\n---") {
		var obj struct {
			Kind     string              `json:"kind"`
			Metadata metav1.ObjectMeta   `json:"metadata"`
			Rules    []rbacv1.PolicyRule `json:"rules"`
		}
		Expect(yaml.Unmarshal([]byte(doc), &obj)).To(Succeed())
		if obj.Kind == parts[0] && obj.Metadata.Name == parts[len(parts)-1] {
			out, err := yaml.Marshal(obj.Rules)
			Expect(err).NotTo(HaveOccurred())
			return string(out)
		}
	}
	Fail("no " + r + " in config/rbac")
	return ""
}

// shippedRoles are the roles config/rbac binds to the provider.
func shippedRoles() []roleRef {
	return []roleRef{
		"ClusterRole/service-provider-kro-onboarding",
		"ClusterRole/service-provider-kro-platform",
		"Role/" + env.KindPodNamespace + "/service-provider-kro-platform",
	}
}

// fileRules reads the rules of a shipped role from config/rbac.
func fileRules(r roleRef) string {
	GinkgoHelper()
	root, err := testenv.RepoRoot()
	Expect(err).NotTo(HaveOccurred())
	side := "platform"
	if strings.HasSuffix(r, "-onboarding") {
		side = "onboarding"
	}
	data, err := os.ReadFile(filepath.Join(root, "config", "rbac", side, "role.yaml"))
	Expect(err).NotTo(HaveOccurred())
	return rulesOf(data, r)
}

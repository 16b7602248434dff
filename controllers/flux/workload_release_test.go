package flux

import (
	"encoding/json"
	"testing"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/owned"
	"github.com/openmcp-project/service-provider-kro/controllers/reach"
	"github.com/openmcp-project/service-provider-kro/controllers/rollout"
)

func workloadTestRelease(g Gomega, values string, extras bool) (*helmv2.HelmRelease, map[string]any) {
	kro := &v1alpha1.Kro{ObjectMeta: metav1.ObjectMeta{Name: "cp-1", Namespace: "project-a"}}
	v := &v1alpha1.KroVersion{Version: "v1", ChartVersion: "0.9.4", Placement: v1alpha1.PlacementWorkloadCluster}
	if values != "" {
		v.HelmValues = &apiextensionsv1.JSON{Raw: []byte(values)}
	}
	hr := NewHelmRelease(kro, "kro", "mcp--tenant", v, reach.SecretKey{Name: "cp-kubeconfig", Key: owned.KubeconfigKey}, 0)
	ns, err := reach.WorkloadNamespace(types.NamespacedName{Namespace: "project-a", Name: "cp-1"})
	g.Expect(err).NotTo(HaveOccurred())
	w := &reach.WorkloadClusterAccess{Kubeconfig: reach.SecretKey{Name: "workload", Key: owned.KubeconfigKey}, Namespace: ns}
	g.Expect(placeOnWorkloadCluster(hr, w, extras)).To(Succeed())
	out := map[string]any{}
	g.Expect(json.Unmarshal(hr.Spec.Values.Raw, &out)).To(Succeed())
	return hr, out
}

func TestWorkloadReleaseTargetsTheTenantsNamespace(t *testing.T) {
	g := NewWithT(t)
	hr, _ := workloadTestRelease(g, "", true)
	ns := hr.Spec.TargetNamespace
	g.Expect(ns).To(HavePrefix("kro-"))
	g.Expect(hr.Spec.ReleaseName).To(Equal(ns), "one release per tenant namespace, named after it")
	g.Expect(hr.Spec.StorageNamespace).To(Equal(ns))
	g.Expect(hr.Spec.KubeConfig.SecretRef.Name).To(Equal("workload"))
	g.Expect(hr.Spec.Install.CRDs).To(Equal(helmv2.Skip), "kro's CRDs belong on the ControlPlane")
	g.Expect(hr.Spec.Install.CreateNamespace).To(BeFalse(), "the provider makes the namespace; under openmcp it may make no other")
	g.Expect(hr.Spec.Upgrade.CRDs).To(Equal(helmv2.Skip))

	other, _ := workloadTestRelease(g, "", true)
	g.Expect(other.Spec.TargetNamespace).To(Equal(ns), "stable")
	b, err := reach.WorkloadNamespace(types.NamespacedName{Namespace: "project-b", Name: "cp-1"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(b).NotTo(Equal(ns), "two tenants never share a namespace")
}

func TestWorkloadReleaseCutsOutClusterRBAC(t *testing.T) {
	g := NewWithT(t)
	hr, _ := workloadTestRelease(g, "", true)
	g.Expect(hr.Spec.PostRenderers).To(HaveLen(1))
	var kinds []string
	for _, p := range hr.Spec.PostRenderers[0].Kustomize.Patches {
		kinds = append(kinds, p.Target.Kind)
		if p.Target.Kind != "Deployment" {
			g.Expect(p.Patch).To(ContainSubstring("$patch: delete"))
		}
	}
	g.Expect(kinds).To(ConsistOf("ClusterRole", "ClusterRoleBinding"), "a chart with the values needs no Deployment patch")
}

func TestWorkloadValuesKeepThePlatformTeamsValues(t *testing.T) {
	g := NewWithT(t)
	_, v := workloadTestRelease(g, `{"deployment":{"extraEnv":[{"name":"HTTPS_PROXY","value":"http://proxy"},{"name":"KUBECONFIG","value":"/wrong"}],"replicaCount":2},"config":{"logLevel":"debug"}}`, true)
	dep := v["deployment"].(map[string]any)
	g.Expect(dep["replicaCount"]).To(BeEquivalentTo(2))
	g.Expect(dep["extraEnv"]).To(ConsistOf(
		map[string]any{"name": "HTTPS_PROXY", "value": "http://proxy"},
		map[string]any{"name": "KUBECONFIG", "value": kroAccessMountPath + "/kubeconfig"},
	), "the platform team's entries stay, a KUBECONFIG of theirs is replaced")
	g.Expect(dep["extraVolumes"]).To(ConsistOf(map[string]any{"name": kroAccessVolume, "secret": map[string]any{"secretName": owned.KroCredentialSecretName}}))
	g.Expect(dep["extraVolumeMounts"]).To(ConsistOf(map[string]any{"name": kroAccessVolume, "mountPath": kroAccessMountPath, "readOnly": true}))
	cfg := v["config"].(map[string]any)
	g.Expect(cfg["logLevel"]).To(Equal("debug"))
	g.Expect(cfg["leaderElectionNamespace"]).To(Equal(owned.KroNamespace), "kro's lease lives on the ControlPlane")
	g.Expect(v["serviceAccount"]).To(HaveKeyWithValue("automount", false), "no token for the workload cluster in kro's pod")
}

func TestWorkloadReleaseWithoutChartValuesPatchesTheDeployment(t *testing.T) {
	g := NewWithT(t)
	hr, v := workloadTestRelease(g, "", false)
	g.Expect(v).NotTo(HaveKey("deployment"), "the chart has no such values")
	var patch string
	for _, p := range hr.Spec.PostRenderers[0].Kustomize.Patches {
		if p.Target.Kind == "Deployment" {
			patch = p.Patch
		}
	}
	g.Expect(patch).NotTo(BeEmpty())
	d := &appsv1.Deployment{}
	g.Expect(yaml.UnmarshalStrict([]byte(patch), d)).To(Succeed(), "the patch is a valid Deployment")
	spec := d.Spec.Template.Spec
	g.Expect(spec.AutomountServiceAccountToken).To(HaveValue(BeFalse()))
	g.Expect(spec.Volumes).To(HaveLen(1))
	g.Expect(spec.Volumes[0].Secret.SecretName).To(Equal(owned.KroCredentialSecretName))
	g.Expect(spec.Containers).To(HaveLen(1))
	g.Expect(spec.Containers[0].Name).To(Equal(kroContainer))
	g.Expect(spec.Containers[0].Env[0].Value).To(Equal(kroAccessMountPath + "/kubeconfig"))
	g.Expect(spec.Containers[0].VolumeMounts[0].MountPath).To(Equal(kroAccessMountPath))
}

func TestPlacementNamesARevisionOnlyWhenNotTheDefault(t *testing.T) {
	g := NewWithT(t)
	v := &v1alpha1.KroVersion{Version: "v1", ChartVersion: "0.9.4"}
	unset, err := rollout.RevisionName("kro", v)
	g.Expect(err).NotTo(HaveOccurred())
	v.Placement = v1alpha1.PlacementControlPlane
	explicit, err := rollout.RevisionName("kro", v)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(explicit).To(Equal(unset), "the API server's default changes no revision: an upgrade of the provider rolls nothing out")
	v.Placement = v1alpha1.PlacementWorkloadCluster
	moved, err := rollout.RevisionName("kro", v)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(moved).NotTo(Equal(unset), "a move is a change of the version's artifacts, rolled out")
}

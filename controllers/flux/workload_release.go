package flux

import (
	"encoding/json"
	"fmt"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	"github.com/fluxcd/pkg/apis/kustomize"
	"github.com/fluxcd/pkg/apis/meta"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/openmcp-project/service-provider-kro/controllers/owned"
	"github.com/openmcp-project/service-provider-kro/controllers/reach"
	"github.com/openmcp-project/service-provider-kro/controllers/versions"
)

// How kro's release is shaped on a workload cluster:
//   - it goes into the tenant's namespace there, as a release of that namespace's name,
//     so that tenants sharing the cluster never collide;
//   - the chart's CRDs are skipped and its cluster-scoped RBAC is cut out by a
//     post-renderer: kro does not reconcile the workload cluster, and the provider puts
//     both on the ControlPlane, where kro needs them (controlplane_parts.go);
//   - kro reaches the ControlPlane through the kubeconfig in the credential secret,
//     mounted into its pod; its own service account token for the workload cluster is
//     not mounted, and its leader election lease lives on the ControlPlane.
//
// kro's chart offers values for the environment and the volumes from 0.9.4 on
// (deployment.extraEnv, extraVolumes, extraVolumeMounts); for a chart without them a
// post-renderer patches the Deployment instead.

const (
	// kroAccessVolume names the volume of the credential secret in kro's pod.
	kroAccessVolume = "controlplane-access"
	// kroAccessMountPath is where the credential secret is mounted in kro's container.
	kroAccessMountPath = "/etc/kro/controlplane"
	// kroContainer is the name of kro's container in the chart's Deployment.
	kroContainer = "kro"
)

// placeOnWorkloadCluster turns the HelmRelease of kro into one that installs kro into
// the tenant's namespace on the workload cluster. chartHasExtras says whether the chart
// has the deployment.extraEnv, extraVolumes and extraVolumeMounts values.
func placeOnWorkloadCluster(hr *helmv2.HelmRelease, w *reach.WorkloadClusterAccess, chartHasExtras bool) error {
	hr.Spec.KubeConfig = &meta.KubeConfigReference{SecretRef: &meta.SecretKeyReference{Name: w.Kubeconfig.Name, Key: w.Kubeconfig.Key}}
	hr.Spec.ReleaseName = w.Namespace
	hr.Spec.TargetNamespace = w.Namespace
	hr.Spec.StorageNamespace = w.Namespace
	hr.Spec.Install.CRDs = helmv2.Skip
	// The provider makes the namespace before the release (with kro's credential in it),
	// and may not create namespaces where openmcp confines it to that one.
	hr.Spec.Install.CreateNamespace = false
	hr.Spec.Upgrade.CRDs = helmv2.Skip
	values, err := workloadValues(hr.Spec.Values, chartHasExtras)
	if err != nil {
		return err
	}
	hr.Spec.Values = values
	patches := []kustomize.Patch{deletePatch("rbac.authorization.k8s.io", "v1", "ClusterRole"), deletePatch("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding")}
	if !chartHasExtras {
		patches = append(patches, kustomize.Patch{Target: &kustomize.Selector{Group: "apps", Kind: "Deployment"}, Patch: deploymentAccessPatch})
	}
	hr.Spec.PostRenderers = []helmv2.PostRenderer{{Kustomize: &helmv2.Kustomize{Patches: patches}}}
	return nil
}

// deletePatch removes every object of a kind from the rendered chart.
func deletePatch(group, version, kind string) kustomize.Patch {
	return kustomize.Patch{
		Target: &kustomize.Selector{Group: group, Kind: kind},
		Patch:  fmt.Sprintf("$patch: delete\napiVersion: %s/%s\nkind: %s\nmetadata:\n  name: any\n", group, version, kind),
	}
}

// deploymentAccessPatch mounts the credential and points kro at it, for a chart without
// the values to do so. Strategic merge keys containers, env and volumes by name.
var deploymentAccessPatch = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: any
spec:
  template:
    spec:
      automountServiceAccountToken: false
      volumes:
      - name: ` + kroAccessVolume + `
        secret:
          secretName: ` + owned.KroCredentialSecretName + `
      containers:
      - name: ` + kroContainer + `
        env:
        - name: KUBECONFIG
          value: ` + kroAccessMountPath + "/" + owned.KubeconfigKey + `
        volumeMounts:
        - name: ` + kroAccessVolume + `
          mountPath: ` + kroAccessMountPath + `
          readOnly: true
`

// workloadValues adds what kro needs on a workload cluster to the version's values: the
// platform team's values stay, lists of theirs are kept and extended.
func workloadValues(values *apiextensionsv1.JSON, chartHasExtras bool) (*apiextensionsv1.JSON, error) {
	v, err := versions.ValuesMap(values)
	if err != nil {
		return nil, err
	}
	set(v, false, "serviceAccount", "automount")
	set(v, owned.KroNamespace, "config", "leaderElectionNamespace")
	if chartHasExtras {
		appendTo(v, map[string]any{"name": "KUBECONFIG", "value": kroAccessMountPath + "/" + owned.KubeconfigKey}, "deployment", "extraEnv")
		appendTo(v, map[string]any{"name": kroAccessVolume, "secret": map[string]any{"secretName": owned.KroCredentialSecretName}}, "deployment", "extraVolumes")
		appendTo(v, map[string]any{"name": kroAccessVolume, "mountPath": kroAccessMountPath, "readOnly": true}, "deployment", "extraVolumeMounts")
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return &apiextensionsv1.JSON{Raw: raw}, nil
}

// set puts value at path, creating the maps on the way; a non-map on the way is replaced.
func set(m map[string]any, value any, path ...string) {
	mapAt(m, path[:len(path)-1]...)[path[len(path)-1]] = value
}

// appendTo appends item to the list at path, replacing an earlier item of the same name.
func appendTo(m map[string]any, item map[string]any, path ...string) {
	parent, key := mapAt(m, path[:len(path)-1]...), path[len(path)-1]
	list, _ := parent[key].([]any)
	out := make([]any, 0, len(list)+1)
	for _, e := range list {
		if em, ok := e.(map[string]any); ok && em["name"] == item["name"] {
			continue
		}
		out = append(out, e)
	}
	parent[key] = append(out, item)
}

// mapAt is the map at path below m, created on the way where missing (a non-map on the
// way is replaced).
func mapAt(m map[string]any, path ...string) map[string]any {
	for _, k := range path {
		next, ok := m[k].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[k] = next
		}
		m = next
	}
	return m
}

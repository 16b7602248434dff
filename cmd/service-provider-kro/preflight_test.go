package main

import (
	"bytes"
	"context"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/clusters"
	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

// permissiveCRD is a CRD of this API's names whose spec takes anything, as an earlier
// provider's lax schema did, so that the test can store objects this release refuses.
func permissiveCRD(g Gomega, kind string) *apiextensionsv1.CustomResourceDefinition {
	c := legacyCRD(g, kind)
	preserve := true
	c.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"] = apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: &preserve}
	c.Spec.Versions[0].Schema.OpenAPIV3Schema.XValidations = nil
	return c
}

// olderGroupCRD is the Kro CRD of the older API group.
func olderGroupCRD() *apiextensionsv1.CustomResourceDefinition {
	preserve := true
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "kroes." + olderGroup},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: olderGroup, Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "kroes", Singular: "kro", Kind: "Kro", ListKind: "KroList"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1alpha1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: &preserve}}}},
		},
	}
}

// TestPreflight: on an installation the earlier provider runs, with a ProviderConfig this
// release's CEL rules refuse, a Kro on a version not on offer, a missing pull secret and
// a Kro of the older API group, preflight names each with what to do and exits non-zero;
// once they are fixed it passes, and says what it takes over.
func TestPreflight(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	fluxCRDs, err := testenv.FluxCRDDirs(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	cs := startClusters(t,
		testenv.ClusterOptions{Name: "preflight-onboarding", CRDs: []*apiextensionsv1.CustomResourceDefinition{permissiveCRD(g, clusters.Onboarding), olderGroupCRD()}},
		testenv.ClusterOptions{Name: "preflight-platform", CRDs: []*apiextensionsv1.CustomResourceDefinition{permissiveCRD(g, clusters.Platform)}, CRDDirs: fluxCRDs},
	)
	onboarding, platform := cs[0], cs[1]
	obPath, pfPath := writeKubeconfigs(t, onboarding, platform)

	pc := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha1.GroupVersion.String(), "kind": "ProviderConfig", "metadata": map[string]any{"name": "kro"},
		"spec": map[string]any{"versions": []any{map[string]any{
			"version": "v0.9.4", "chartVersion": "0.9.4", "chartURL": "https://registry.example.com/kro/charts/kro", "chartPullSecret": "regcred",
		}}},
	}}
	g.Expect(platform.Client.Create(ctx, pc)).To(Succeed())
	g.Expect(onboarding.Client.Create(ctx, namespace("project-a"))).To(Succeed())
	for name, version := range map[string]string{"cp-1": "v0.9.4", "cp-2": "v0.8.0"} {
		g.Expect(onboarding.Client.Create(ctx, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": v1alpha1.GroupVersion.String(), "kind": "Kro",
			"metadata": map[string]any{"name": name, "namespace": "project-a"}, "spec": map[string]any{"version": version},
		}})).To(Succeed())
	}
	older := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": olderGroup + "/v1alpha1", "kind": "Kro",
		"metadata": map[string]any{"name": "cp-3", "namespace": "project-a"}, "spec": map[string]any{"version": "v0.9.4"},
	}}
	g.Expect(onboarding.Client.Create(ctx, older)).To(Succeed())
	tenant, err := clusters.TenantNamespace(types.NamespacedName{Namespace: "project-a", Name: "cp-1"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(platform.Client.Create(ctx, namespace(tenant))).To(Succeed())
	g.Expect(platform.Client.Create(ctx, testenv.EarlierInstallation{KroName: "cp-1", TenantNamespace: tenant, ChartURL: "oci://registry.example.com/kro/charts/kro", ChartVersion: "0.9.4"}.HelmRelease())).To(Succeed())
	g.Expect(platform.Client.Create(ctx, namespace("kro-provider"))).To(Succeed())

	preflight := []string{"preflight", "--onboarding-kubeconfig", obPath, "--platform-kubeconfig", pfPath, "--pod-namespace", "kro-provider"}
	var out bytes.Buffer
	err = dispatch(ctx, preflight, &out, &out)
	t.Logf("the report before the fixes:\n%s", out.String())
	g.Expect(err).To(MatchError(ContainSubstring("4 to fix before the switch")))
	for _, want := range []string{
		"FIX   1 Kro object of the older API group kro.services.openmcp.cloud on the onboarding cluster",
		`FIX   ProviderConfig "kro" does not pass this release's validation`,
		"chartURL must be an OCI URL",
		`FIX   1 Kro on a version ProviderConfig "kro" does not offer would wait with VersionNotOffered: project-a/cp-2 ("v0.8.0")`,
		// in the words of the ProviderConfig's status (pullsecrets.Copier.VersionProblems)
		`FIX   pull secrets: secret "regcred" (chart pull secret of version v0.9.4) not found in namespace kro-provider on the platform cluster: create it with type kubernetes.io/dockerconfigjson`,
		"note  1 installation of kro by the earlier provider (HelmRelease kro-helm-release)",
		"4 to fix before the switch",
	} {
		g.Expect(out.String()).To(ContainSubstring(want))
	}

	// The fixes, as the report says.
	g.Expect(onboarding.Client.Delete(ctx, older)).To(Succeed())
	g.Expect(unstructured.SetNestedField(pc.Object, "registry.example.com/kro/charts/kro", "spec", "versions", "0", "chartURL")).NotTo(Succeed(), "a list is set whole")
	versions := []any{map[string]any{"version": "v0.9.4", "chartVersion": "0.9.4", "chartURL": "registry.example.com/kro/charts/kro", "chartPullSecret": "regcred"}}
	g.Expect(unstructured.SetNestedSlice(pc.Object, versions, "spec", "versions")).To(Succeed())
	g.Expect(platform.Client.Update(ctx, pc)).To(Succeed())
	cp2 := &unstructured.Unstructured{}
	cp2.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("Kro"))
	g.Expect(onboarding.Client.Get(ctx, client.ObjectKey{Namespace: "project-a", Name: "cp-2"}, cp2)).To(Succeed())
	g.Expect(unstructured.SetNestedField(cp2.Object, "v0.9.4", "spec", "version")).To(Succeed())
	g.Expect(onboarding.Client.Update(ctx, cp2)).To(Succeed())
	g.Expect(platform.Client.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "regcred", Namespace: "kro-provider"}, Type: corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"auths":{}}`)},
	})).To(Succeed())

	out.Reset()
	g.Expect(dispatch(ctx, preflight, &out, &out)).To(Succeed(), out.String())
	t.Logf("the report after the fixes:\n%s", out.String())
	g.Expect(out.String()).NotTo(ContainSubstring("FIX"))
	g.Expect(out.String()).To(ContainSubstring("note  CRD kroes.kro.services.openmcp.cloud of the older API group kro.services.openmcp.cloud is on the onboarding cluster, with no objects: delete it"))
	g.Expect(out.String()).To(ContainSubstring(`ok    ProviderConfig "kro" passes this release's validation; it offers v0.9.4`))
	g.Expect(out.String()).To(ContainSubstring("ok    2 Kros, each asking for a version on offer"))
	g.Expect(out.String()).To(ContainSubstring("nothing to fix"))
}

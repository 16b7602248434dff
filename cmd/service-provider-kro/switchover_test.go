package main

import (
	"bytes"
	"context"
	"testing"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/clusters"
	"github.com/openmcp-project/service-provider-kro/config/crd"
	"github.com/openmcp-project/service-provider-kro/controllers/owned"
	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

// legacyCRD is a CRD of this API as an OpenControlPlane installation may already run
// it: the same names (kroes / providerconfigs), with the schema of an earlier provider
// (spec.version only; a status with required fields and a list this provider does not
// know), so that the switch-over test starts from objects this provider never wrote.
func legacyCRD(g Gomega, kind string) *apiextensionsv1.CustomResourceDefinition {
	crds, err := crd.ForCluster(kind)
	g.Expect(err).NotTo(HaveOccurred())
	old := crds[0].DeepCopy()
	v := &old.Spec.Versions[0]
	v.AdditionalPrinterColumns = v.AdditionalPrinterColumns[:1]
	preserve := true
	props := v.Schema.OpenAPIV3Schema.Properties
	if kind == clusters.Onboarding {
		spec := props["spec"]
		spec.Properties = map[string]apiextensionsv1.JSONSchemaProps{"version": {Type: "string"}}
		spec.XValidations = nil
		props["spec"] = spec
	}
	props["status"] = apiextensionsv1.JSONSchemaProps{
		Type: "object", Required: []string{"observedGeneration", "phase"},
		Properties: map[string]apiextensionsv1.JSONSchemaProps{
			"observedGeneration": {Type: "integer", Format: "int64"},
			"phase":              {Type: "string"},
			"resources":          {Type: "array", Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: &preserve}}},
		},
	}
	v.Schema.OpenAPIV3Schema.Properties = props
	return old
}

// TestSwitchOverFromAnEarlierProvider: a platform that runs this API with an earlier
// provider (same CRD names, older schema, objects with that provider's status) switches
// with `init` alone. The CRDs are replaced in place, nothing is deleted, and a Kro and a
// ProviderConfig created before the switch become Ready under this provider.
func TestSwitchOverFromAnEarlierProvider(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	fluxCRDs, err := testenv.FluxCRDDirs(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	kroCRDs, err := testenv.KroCRDDir(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	cs := startClusters(t,
		testenv.ClusterOptions{Name: "onboarding", CRDs: []*apiextensionsv1.CustomResourceDefinition{legacyCRD(g, clusters.Onboarding)}},
		testenv.ClusterOptions{Name: "platform", CRDs: []*apiextensionsv1.CustomResourceDefinition{legacyCRD(g, clusters.Platform)}, CRDDirs: fluxCRDs},
		testenv.ClusterOptions{Name: "controlplane", CRDDirs: []string{kroCRDs}},
	)
	onboarding, platform, cp := cs[0], cs[1], cs[2]
	obPath, pfPath := writeKubeconfigs(t, onboarding, platform)

	// What the earlier provider left: a ProviderConfig, a Kro with its status, and the
	// source pull secret. Written as unstructured objects: this provider's types play no
	// part before the switch.
	g.Expect(platform.Client.Create(ctx, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha1.GroupVersion.String(), "kind": "ProviderConfig", "metadata": map[string]any{"name": rbacProvider},
		"spec": map[string]any{"versions": []any{map[string]any{
			"version": "v0.9.4", "chartVersion": "0.9.4", "chartURL": "registry.example.com/kro/charts/kro",
		}}},
	}})).To(Succeed())
	g.Expect(onboarding.Client.Create(ctx, namespace("project-a"))).To(Succeed())
	legacy := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha1.GroupVersion.String(), "kind": "Kro",
		"metadata": map[string]any{"name": "cp-1", "namespace": "project-a"},
		"spec":     map[string]any{"version": "v0.9.4"},
	}}
	g.Expect(onboarding.Client.Create(ctx, legacy)).To(Succeed())
	legacy.Object["status"] = map[string]any{"observedGeneration": int64(1), "phase": "Ready",
		"resources": []any{map[string]any{"kind": "HelmRelease", "name": "kro", "phase": "Ready"}}}
	g.Expect(onboarding.Client.Status().Update(ctx, legacy)).To(Succeed())

	// The switch: init alone replaces both CRDs in place.
	var out, errOut bytes.Buffer
	g.Expect(dispatch(ctx, []string{"init", "--onboarding-kubeconfig", obPath, "--platform-kubeconfig", pfPath}, &out, &errOut)).To(Succeed(), errOut.String())
	g.Expect(out.String()).To(ContainSubstring("(applied kroes.kro.services.open-control-plane.io)"))
	g.Expect(out.String()).To(ContainSubstring("(applied providerconfigs.kro.services.open-control-plane.io)"))
	kro := &v1alpha1.Kro{}
	g.Expect(onboarding.Client.Get(ctx, client.ObjectKey{Namespace: "project-a", Name: "cp-1"}, kro)).To(Succeed(), "the Kro survived the switch")
	g.Expect(kro.UID).To(Equal(legacy.GetUID()))

	// The provider takes the objects over.
	g.Expect(platform.Client.Create(ctx, namespace("kro-provider"))).To(Succeed())
	runProvider(t, []string{"run", "--onboarding-kubeconfig", obPath, "--platform-kubeconfig", pfPath,
		"--pod-namespace", "kro-provider", "--metrics-bind-address", "0", "--health-probe-bind-address", "0"})
	tenant, err := owned.TenantNamespace(kro)
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func() error { return platform.Client.Get(ctx, client.ObjectKey{Name: tenant}, namespace(tenant)) }, rbacTimeout, rbacInterval).Should(Succeed())
	g.Expect(platform.Client.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "controlplane-access", Namespace: tenant, Labels: map[string]string{v1alpha1.LabelControlPlaneKubeconfig: "true"}},
		Data:       map[string][]byte{owned.KubeconfigKey: cp.Kubeconfig},
	})).To(Succeed())
	fluxKey := client.ObjectKey{Namespace: tenant, Name: rbacProvider}
	setReady(ctx, g, platform.Client, &sourcev1.OCIRepository{}, fluxKey)
	setReady(ctx, g, platform.Client, &helmv2.HelmRelease{}, fluxKey)
	g.Expect(testenv.PlayKroDeployment(ctx, cp.Client)).To(Succeed())
	g.Eventually(func(g Gomega) {
		got := &v1alpha1.Kro{}
		g.Expect(onboarding.Client.Get(ctx, client.ObjectKeyFromObject(kro), got)).To(Succeed())
		ready := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady)
		g.Expect(ready).NotTo(BeNil())
		g.Expect(ready.Status).To(Equal(metav1.ConditionTrue), ready.Message)
		g.Expect(got.Status.ObservedGeneration).To(Equal(got.Generation))
		g.Expect(got.Finalizers).To(ContainElement(v1alpha1.Finalizer))
	}, rbacTimeout, rbacInterval).Should(Succeed(), "the Kro created before the switch becomes Ready")
}

func namespace(name string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

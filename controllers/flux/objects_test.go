package flux

import (
	"testing"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/reach"
	"github.com/openmcp-project/service-provider-kro/controllers/versions"
)

func TestChartURL(t *testing.T) {
	for in, want := range map[string]string{
		"":                                "oci://registry.k8s.io/kro/charts/kro",
		"registry.example.com/charts/kro": "oci://registry.example.com/charts/kro",
		"oci://registry.example.com/kro":  "oci://registry.example.com/kro",
	} {
		if got := versions.ChartURL(&v1alpha1.KroVersion{ChartURL: in}); got != want {
			t.Errorf("chartURL(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestImagePullSecretNames(t *testing.T) {
	g := NewWithT(t)
	names, err := versions.ImagePullSecretNames(&v1alpha1.KroVersion{HelmValues: &apiextensionsv1.JSON{Raw: []byte(`{"imagePullSecrets":[{"name":"a"},{"name":"b"},{"name":"a"}]}`)}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(names).To(Equal([]string{"a", "b"}))

	names, err = versions.ImagePullSecretNames(&v1alpha1.KroVersion{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(names).To(BeEmpty())

	_, err = versions.ImagePullSecretNames(&v1alpha1.KroVersion{Version: "v1", HelmValues: &apiextensionsv1.JSON{Raw: []byte(`{"imagePullSecrets":"a"}`)}})
	g.Expect(err).To(MatchError(ContainSubstring("helmValues.imagePullSecrets of version \"v1\"")))
	_, err = versions.ImagePullSecretNames(&v1alpha1.KroVersion{Version: "v1", HelmValues: &apiextensionsv1.JSON{Raw: []byte(`{"imagePullSecrets":[{}]}`)}})
	g.Expect(err).To(MatchError(ContainSubstring("has no name")))
}

func TestBuilders(t *testing.T) {
	g := NewWithT(t)
	kro := &v1alpha1.Kro{ObjectMeta: metav1.ObjectMeta{Name: "cp", Namespace: "proj"}}
	v := &v1alpha1.KroVersion{Version: "v1", ChartVersion: "1.0.0", ChartURL: "example.com/kro"}

	repo := newOCIRepository(kro, "kro", "mcp--x", v, "", time.Minute)
	g.Expect(repo.Kind).To(Equal("OCIRepository"))
	g.Expect(repo.APIVersion).To(Equal("source.toolkit.fluxcd.io/v1"))
	g.Expect(repo.Spec.SecretRef).To(BeNil())
	g.Expect(repo.Spec.URL).To(Equal("oci://example.com/kro"))

	hr := NewHelmRelease(kro, "kro", "mcp--x", v, reach.SecretKey{Name: "access", Key: "kubeconfig"}, 2*time.Minute)
	g.Expect(hr.Kind).To(Equal("HelmRelease"))
	g.Expect(hr.Spec.Values).To(BeNil(), "no helmValues, no values")
	g.Expect(hr.Spec.Interval.Duration).To(Equal(2 * time.Minute))
	g.Expect(hr.Spec.Suspend).To(BeFalse())
	g.Expect(hr.Spec.DriftDetection).To(Equal(&helmv2.DriftDetection{Mode: helmv2.DriftDetectionEnabled}),
		"helm-controller puts back kro's objects that someone deleted or changed")

	src := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "regcred", Namespace: "provider", Labels: map[string]string{"foreign": "x"}},
		Type: corev1.SecretTypeDockerConfigJson, Data: map[string][]byte{".dockerconfigjson": []byte("{}")}}
	cp := NewSecretCopy(kro, "kro", v1alpha1.RoleImagePullSecret, src, "kro-system", "regcred")
	g.Expect(cp.Labels).NotTo(HaveKey("foreign"))
	g.Expect(cp.Labels).To(HaveKeyWithValue(v1alpha1.LabelRole, v1alpha1.RoleImagePullSecret))
	g.Expect(cp.Annotations).To(HaveKeyWithValue(v1alpha1.AnnotationSourceSecret, "regcred"))
	cp.Data[".dockerconfigjson"] = []byte("changed")
	g.Expect(string(src.Data[".dockerconfigjson"])).To(Equal("{}"), "the source is not touched")
}

package owned

import (
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/foreign"
)

func TestDerivedNamesAreValidAndBounded(t *testing.T) {
	g := NewWithT(t)
	long := &v1alpha1.Kro{ObjectMeta: metav1.ObjectMeta{Name: strings.Repeat("a", 253), Namespace: strings.Repeat("b", 63)}}

	ns, err := TenantNamespace(long)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(validation.IsDNS1123Label(ns)).To(BeEmpty())
	again, _ := TenantNamespace(long)
	g.Expect(again).To(Equal(ns), "stable")

	for _, src := range []string{"regcred", strings.Repeat("s", 253), strings.Repeat("s", 249) + ".x.y"} {
		name := ChartSecretCopyName("kro", src)
		g.Expect(validation.IsDNS1123Subdomain(name)).To(BeEmpty(), name)
		g.Expect(name).To(HavePrefix("kro-"))
	}
	g.Expect(ChartSecretCopyName("kro", "regcred")).To(Equal("kro-regcred"))
	g.Expect(ChartSecretCopyName("kro", strings.Repeat("s", 253))).NotTo(Equal(ChartSecretCopyName("kro", strings.Repeat("s", 252)+"t")), "hash keeps them apart")

	for k, v := range Labels(long, "kro", v1alpha1.RoleChartPullSecret) {
		g.Expect(validation.IsQualifiedName(k)).To(BeEmpty(), k)
		g.Expect(validation.IsValidLabelValue(v)).To(BeEmpty(), k+"="+v)
	}
	g.Expect(Annotations(long)).To(HaveKeyWithValue(v1alpha1.AnnotationKro, long.Namespace+"/"+long.Name))
	g.Expect(validation.IsDNS1035Label(FluxObjectName("kro"))).To(BeEmpty())
	g.Expect(foreign.LabelValue("cp-1")).To(Equal("cp-1"))
}

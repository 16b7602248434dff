package owned

import (
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
)

func trimmed(g Gomega, s *corev1.Secret) *corev1.Secret {
	out, err := TrimSecretCopy(s.DeepCopy())
	g.Expect(err).NotTo(HaveOccurred())
	return out.(*corev1.Secret)
}

// TestTrimSecretCopyKeepsADigest: the cached copy holds no data, only the provider's
// labels and annotations (bounded), and compares with the desired copy by its digest;
// applied twice it gives the same; a digest someone wrote into a secret never holds.
func TestTrimSecretCopyKeepsADigest(t *testing.T) {
	g := NewWithT(t)
	kro := &v1alpha1.Kro{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "kro"}}
	desired := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: KroNamespace, Name: "regcred", Labels: Labels(kro, "kro", v1alpha1.RoleImagePullSecret), Annotations: Annotations(kro)},
		Type:       corev1.SecretTypeDockerConfigJson,
		Data:       map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"auths":{}}`)},
	}
	live := desired.DeepCopy()
	live.UID, live.ResourceVersion = "u1", "7"
	live.Labels["tenant.example.com/x"] = "y"
	live.Annotations["tenant.example.com/big"] = strings.Repeat("b", 1<<20)
	live.Finalizers = []string{"tenant.example.com/f"}
	live.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}

	cached := trimmed(g, live)
	g.Expect(cached.Data).To(BeNil())
	g.Expect(cached.Labels).To(Equal(desired.Labels))
	g.Expect(cached.Annotations).To(HaveLen(2))
	g.Expect(cached.Finalizers).To(BeNil())
	g.Expect(cached.ManagedFields).To(BeNil())
	g.Expect(cached.UID).To(Equal(live.UID))
	g.Expect(trimmed(g, cached)).To(Equal(cached), "idempotent")
	g.Expect(secretUpToDate(cached, desired)).To(BeTrue())
	g.Expect(secretUpToDate(live, desired)).To(BeTrue(), "a secret read live compares by its data")

	changed := live.DeepCopy()
	changed.Data[corev1.DockerConfigJsonKey] = []byte(`{"auths":{"x":{}}}`)
	g.Expect(secretUpToDate(trimmed(g, changed), desired)).To(BeFalse())
	extra := live.DeepCopy()
	extra.Data["more"] = nil
	g.Expect(secretUpToDate(trimmed(g, extra), desired)).To(BeFalse(), "a key more")

	// Someone empties the copy and writes the digest it had: a new version, for which it does not hold.
	forged := live.DeepCopy()
	forged.Data, forged.ResourceVersion = nil, "8"
	forged.Annotations[annotationDataDigest] = cached.Annotations[annotationDataDigest]
	g.Expect(secretUpToDate(forged, desired)).To(BeFalse(), "read live")
	g.Expect(secretUpToDate(trimmed(g, forged), desired)).To(BeFalse(), "cached")

	long := live.DeepCopy()
	long.Annotations[v1alpha1.AnnotationKro] = strings.Repeat("k", 1<<20)
	g.Expect(len(trimmed(g, long).Annotations[v1alpha1.AnnotationKro])).To(Equal(maxOwnAnnotation))
	g.Expect(secretUpToDate(trimmed(g, long), desired)).To(BeFalse(), "a value cut never equals a desired one")

	g.Expect(SameSecretAsSource(&corev1.Secret{Type: desired.Type, Data: desired.Data}, desired)).To(BeTrue())
	g.Expect(SameSecretAsSource(&corev1.Secret{Type: desired.Type, Data: map[string][]byte{}}, desired)).To(BeFalse())
}

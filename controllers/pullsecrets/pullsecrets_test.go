package pullsecrets_test

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/pullsecrets"
	"github.com/openmcp-project/service-provider-kro/controllers/step"
	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

// TestSourceSecret reads pull secrets from the provider's namespace on a real API server:
// a missing one and one of the wrong type are problems for the platform team, named with
// what to do and never with the secret's content; a good one is returned.
func TestSourceSecret(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	cs, err := testenv.StartClusters(ctx, testenv.ClusterOptions{Name: "pullsecrets-platform"})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { testenv.StopClusters(cs...) })
	platform := cs[0].Client
	g.Expect(platform.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kro-provider"}})).To(Succeed())
	g.Expect(platform.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "kro-provider", Name: "opaque"},
		Data: map[string][]byte{"password": []byte("hunter2")}})).To(Succeed())
	g.Expect(platform.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "kro-provider", Name: "regcred"},
		Type: corev1.SecretTypeDockerConfigJson, Data: map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"auths":{}}`)}})).To(Succeed())
	c := &pullsecrets.Copier{Clients: step.Clients{Platform: platform, ProviderName: "kro", PodNamespace: "kro-provider"}}

	_, problem, err := c.SourceSecret(ctx, "missing", "chart pull secret", "v1")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(problem.Reason).To(Equal(v1alpha1.ReasonPullSecretMissing))
	g.Expect(problem.Message).To(ContainSubstring(`secret "missing" (chart pull secret of version v1) not found in namespace kro-provider`))
	g.Expect(problem.Message).To(ContainSubstring("create it with type " + string(corev1.SecretTypeDockerConfigJson)))

	_, problem, err = c.SourceSecret(ctx, "opaque", "image pull secret", "v1")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(problem.Reason).To(Equal(v1alpha1.ReasonPullSecretWrongType))
	g.Expect(problem.Message).To(ContainSubstring(`has type "Opaque"`))
	g.Expect(problem.Message).NotTo(ContainSubstring("hunter2"))

	secret, problem, err := c.SourceSecret(ctx, "regcred", "chart pull secret", "v1")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(problem).To(BeNil())
	g.Expect(secret.Name).To(Equal("regcred"))
}

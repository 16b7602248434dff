// Package credentialtest holds what the tests of kro's credential on a workload cluster
// share: who an API server takes a client for, and the credential read and laid out as
// kro reads it.
package credentialtest

import (
	"context"
	"os"
	"path/filepath"
	"time"

	"github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmcp-project/service-provider-kro/controllers/owned"
)

// RevocationTimeout bounds how long a deleted ServiceAccount's token keeps working:
// kube-apiserver caches a token's authentication for ten seconds.
const RevocationTimeout = 30 * time.Second

// WhoAmI asks the API server of cfg whom it takes the client for.
func WhoAmI(ctx context.Context, cfg *rest.Config) (string, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return "", err
	}
	review, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	return review.Status.UserInfo.Username, nil
}

// WriteFiles lays out the credential secret's keys as files in dir, as a mounted secret
// volume does, and returns the kubeconfig's path.
func WriteFiles(g gomega.Gomega, dir string, data map[string][]byte) string {
	for _, k := range []string{owned.KubeconfigKey, owned.KroCredentialTokenKey, owned.KroCredentialCAKey} {
		g.Expect(os.WriteFile(filepath.Join(dir, k), data[k], 0o600)).To(gomega.Succeed())
	}
	return filepath.Join(dir, owned.KubeconfigKey)
}

// Get reads kro's credential secret in namespace.
func Get(g gomega.Gomega, c client.Client, namespace string) *corev1.Secret {
	s := &corev1.Secret{}
	g.Expect(c.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: owned.KroCredentialSecretName}, s)).To(gomega.Succeed())
	return s
}

package testenv

import (
	"context"
	"fmt"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TokenKubeconfig creates a ServiceAccount in "default" bound to cluster-admin and returns
// a self-contained kubeconfig with a token for it. Deleting the ServiceAccount revokes the
// token at once (RevokeToken), which is how tests rotate credentials for real.
func (c *Cluster) TokenKubeconfig(ctx context.Context, name string) ([]byte, error) {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}}
	if err := c.Client.Create(ctx, sa); err != nil {
		return nil, fmt.Errorf("creating ServiceAccount %s: %w", name, err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "testenv-" + name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: "default"}},
	}
	if err := c.Client.Create(ctx, binding); client.IgnoreAlreadyExists(err) != nil {
		return nil, fmt.Errorf("binding ServiceAccount %s: %w", name, err)
	}
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(3600))}}
	if err := c.Client.SubResource("token").Create(ctx, sa, req); err != nil {
		return nil, fmt.Errorf("requesting a token for %s: %w", name, err)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[c.Name] = &clientcmdapi.Cluster{Server: c.Config.Host, CertificateAuthorityData: c.Config.CAData}
	cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: req.Status.Token}
	cfg.Contexts[c.Name] = &clientcmdapi.Context{Cluster: c.Name, AuthInfo: name}
	cfg.CurrentContext = c.Name
	return clientcmd.Write(*cfg)
}

// RevokeToken deletes the ServiceAccount behind a TokenKubeconfig; its tokens stop
// working immediately.
func (c *Cluster) RevokeToken(ctx context.Context, name string) error {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}}
	return c.Client.Delete(ctx, sa)
}

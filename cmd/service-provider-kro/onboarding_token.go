package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/openmcp-project/service-provider-kro/api/v1alpha1"
)

// tokenIssuer asks the onboarding cluster for tokens of the provider's ServiceAccount,
// each bound to a Secret of its own in the ServiceAccount's namespace.
//
// A bound token is valid only while its object exists: the API server looks the object
// up when it authenticates a request (and remembers a success for 10 s), so deleting the
// Secret revokes the token within seconds, long before it expires. Of the kinds a token can be bound to, a Secret is the one that fits a token
// used from outside the cluster: a Pod or a Node would tie it to something that has
// nothing to do with where it is used. The Secret holds nothing; it is owned by the
// ServiceAccount, so it goes with it.
type tokenIssuer struct {
	cs                        kubernetes.Interface
	namespace, serviceAccount string
	stderr                    io.Writer
}

// tokenLabels select the Secrets tokens are bound to.
var tokenLabels = map[string]string{v1alpha1.LabelManagedBy: v1alpha1.ManagedByValue, v1alpha1.LabelRole: v1alpha1.RoleOnboardingToken}

// issue makes a Secret and requests a token bound to it, valid for lifetime. It returns
// the token and the Secret's name.
func (t tokenIssuer) issue(ctx context.Context, lifetime time.Duration) (token, binding string, err error) {
	sa, err := t.cs.CoreV1().ServiceAccounts(t.namespace).Get(ctx, t.serviceAccount, metav1.GetOptions{})
	if err != nil {
		return "", "", fmt.Errorf("reading the ServiceAccount: %w", err)
	}
	now := time.Now()
	secret, err := t.cs.CoreV1().Secrets(t.namespace).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{
		GenerateName: t.serviceAccount + "-token-",
		Namespace:    t.namespace,
		Labels:       tokenLabels,
		Annotations: map[string]string{
			v1alpha1.AnnotationTokenIssued:  now.UTC().Format(time.RFC3339),
			v1alpha1.AnnotationTokenExpires: now.Add(lifetime).UTC().Format(time.RFC3339),
		},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "ServiceAccount", Name: sa.Name, UID: sa.UID}},
	}}, metav1.CreateOptions{})
	if err != nil {
		return "", "", fmt.Errorf("making the Secret to bind the token to: %w", err)
	}
	tr, err := t.cs.CoreV1().ServiceAccounts(t.namespace).CreateToken(ctx, sa.Name, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: ptr.To(int64(lifetime / time.Second)),
		BoundObjectRef:    &authenticationv1.BoundObjectReference{APIVersion: "v1", Kind: "Secret", Name: secret.Name, UID: secret.UID},
	}}, metav1.CreateOptions{})
	if err != nil {
		// No token was issued: its Secret goes again.
		t.revoke(ctx, secret.Name)
		return "", "", fmt.Errorf("requesting the token: %w", err)
	}
	expires := tr.Status.ExpirationTimestamp.Time
	if left := time.Until(expires); left < lifetime-time.Minute {
		fmt.Fprintf(t.stderr, "the API server caps the token: it expires at %s (in %s); write a new kubeconfig before then\n",
			expires.UTC().Format(time.RFC3339), left.Round(time.Minute))
		t.annotateExpiry(ctx, secret.Name, expires)
	}
	fmt.Fprintf(t.stderr, "a token of ServiceAccount %s/%s, valid until %s, bound to Secret %s/%s: deleting the Secret revokes it\n",
		t.namespace, sa.Name, expires.UTC().Format(time.RFC3339), t.namespace, secret.Name)
	return tr.Status.Token, secret.Name, nil
}

// annotateExpiry records when a capped token really expires, for dropExpired.
func (t tokenIssuer) annotateExpiry(ctx context.Context, binding string, expires time.Time) {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
		v1alpha1.AnnotationTokenExpires: expires.UTC().Format(time.RFC3339),
	}}})
	if err == nil {
		_, err = t.cs.CoreV1().Secrets(t.namespace).Patch(ctx, binding, types.MergePatchType, patch, metav1.PatchOptions{})
	}
	if err != nil {
		fmt.Fprintf(t.stderr, "warning: recording the token's expiry on Secret %s/%s: %v\n", t.namespace, binding, err)
	}
}

// revoke deletes a token's Secret, which revokes the token, and warns when it cannot.
func (t tokenIssuer) revoke(ctx context.Context, binding string) bool {
	err := t.cs.CoreV1().Secrets(t.namespace).Delete(ctx, binding, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		fmt.Fprintf(t.stderr, "warning: deleting Secret %s/%s, to revoke the token bound to it: %v\n", t.namespace, binding, err)
		return false
	}
	return true
}

// dropExpired deletes the Secrets of tokens that have expired, so that renewals leave
// nothing behind. A token that is still valid keeps its Secret: the provider may still be
// using it until it reads the new kubeconfig. Failures only warn: the new kubeconfig is
// written already.
func (t tokenIssuer) dropExpired(ctx context.Context) {
	list, err := t.cs.CoreV1().Secrets(t.namespace).List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(tokenLabels).String()})
	if err != nil {
		fmt.Fprintf(t.stderr, "warning: listing the Secrets of earlier tokens in %s: %v\n", t.namespace, err)
		return
	}
	for _, s := range list.Items {
		expires, err := time.Parse(time.RFC3339, s.Annotations[v1alpha1.AnnotationTokenExpires])
		if err != nil || time.Now().Before(expires) {
			continue
		}
		if t.revoke(ctx, s.Name) {
			fmt.Fprintf(t.stderr, "deleted Secret %s/%s of a token that expired at %s\n", t.namespace, s.Name, expires.UTC().Format(time.RFC3339))
		}
	}
}

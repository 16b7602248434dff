package main

import (
	"net/http"
	"strings"

	"github.com/go-logr/logr"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	authenticationclient "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authorizationclient "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/client-go/rest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// platformAuthFilter protects the metrics endpoint as controller-runtime's metrics
// filters do, against the platform cluster: the caller's bearer token is authenticated
// with a TokenReview, and the request (GET /metrics, a non-resource URL) authorized with
// a SubjectAccessReview for that user. It answers 401 without a valid token and 403
// without the right. (controller-runtime's own filter would pull k8s.io/apiserver into
// the binary, which grows it by 20 MB, for these two requests.)
func platformAuthFilter(platform *rest.Config) func(*rest.Config, *http.Client) (metricsserver.Filter, error) {
	return func(_ *rest.Config, _ *http.Client) (metricsserver.Filter, error) {
		authn, err := authenticationclient.NewForConfig(platform)
		if err != nil {
			return nil, err
		}
		authz, err := authorizationclient.NewForConfig(platform)
		if err != nil {
			return nil, err
		}
		return func(log logr.Logger, next http.Handler) (http.Handler, error) {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
				if !ok || token == "" {
					http.Error(w, "Unauthorized", http.StatusUnauthorized)
					return
				}
				review, err := authn.TokenReviews().Create(r.Context(), &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
				if err != nil {
					log.Error(err, "authenticating a metrics request failed")
					http.Error(w, "Authentication failed", http.StatusInternalServerError)
					return
				}
				if !review.Status.Authenticated {
					http.Error(w, "Unauthorized", http.StatusUnauthorized)
					return
				}
				user := review.Status.User
				extra := make(map[string]authorizationv1.ExtraValue, len(user.Extra))
				for k, v := range user.Extra {
					extra[k] = authorizationv1.ExtraValue(v)
				}
				access, err := authz.SubjectAccessReviews().Create(r.Context(), &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
					User: user.Username, UID: user.UID, Groups: user.Groups, Extra: extra,
					NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: r.URL.Path, Verb: strings.ToLower(r.Method)},
				}}, metav1.CreateOptions{})
				if err != nil {
					log.Error(err, "authorizing a metrics request failed")
					http.Error(w, "Authorization failed", http.StatusInternalServerError)
					return
				}
				if !access.Status.Allowed {
					http.Error(w, "Forbidden", http.StatusForbidden)
					return
				}
				next.ServeHTTP(w, r)
			}), nil
		}, nil
	}
}

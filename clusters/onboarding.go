package clusters

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"reflect"
	"sync"
	"time"

	"github.com/go-logr/logr"
	clustersv1alpha1 "github.com/openmcp-project/openmcp-operator/api/clusters/v1alpha1"
	"github.com/openmcp-project/openmcp-operator/lib/clusteraccess"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The local names of the provider's onboarding requests. openmcp's library names the
// ClusterRequest and the AccessRequest "<provider name>--<local name>" in the provider's
// namespace; init and run ask separately because they need different rights.
const (
	OnboardingInitRequest = "onboarding-init"
	OnboardingRunRequest  = "onboarding"
)

// OnboardingRequest asks openmcp for access to the onboarding cluster, as a service
// provider deployed by openmcp-operator must: nothing is mounted into its pod.
type OnboardingRequest struct {
	// Platform is a client of the platform cluster (the pod's own configuration).
	Platform client.Client
	// ProviderName names the requests, as openmcp's library does with a controller name.
	ProviderName string
	// Namespace is the provider's namespace on the platform cluster ($POD_NAMESPACE).
	Namespace string
	// LocalName is OnboardingInitRequest or OnboardingRunRequest.
	LocalName string
	// Rules are the rights asked for; the token openmcp issues carries exactly these.
	Rules []rbacv1.PolicyRule
	// Interval and Timeout bound the wait for openmcp to grant the requests.
	Interval, Timeout time.Duration
}

// OnboardingAccess is access to the onboarding cluster that can change while the
// provider runs: granted by openmcp in a secret on the platform cluster, or a kubeconfig
// file given with --onboarding-kubeconfig (see OnboardingFromFile).
type OnboardingAccess struct {
	// Config reaches the onboarding cluster. When the kubeconfig authenticates with a
	// bearer token, Config sends the token that Watch last read, so that a rotated token
	// takes effect without a restart.
	Config *rest.Config
	// Secret is the access secret openmcp wrote, in the provider's namespace; empty when
	// the access comes from File.
	Secret client.ObjectKey
	// File is the kubeconfig file the access comes from; empty under openmcp.
	File string

	source string                             // names Secret or File in messages
	parse  func([]byte) (*rest.Config, error) // turns the kubeconfig into a config
	token  *rotatingToken                     // nil when the kubeconfig does not use a bearer token
	base   *rest.Config                       // the connection without its token, to tell a token rotation from other changes
	loaded [sha256.Size]byte                  // the hash of the file's content in use
}

// Request creates (or updates) the ClusterRequest and the AccessRequest with openmcp's
// cluster-access library and waits until openmcp grants them.
func (r OnboardingRequest) Request(ctx context.Context, scheme *runtime.Scheme) (*OnboardingAccess, error) {
	mgr := clusteraccess.NewClusterAccessManager(r.Platform, r.ProviderName, r.Namespace).
		WithInterval(r.Interval).WithTimeout(r.Timeout)
	perms := []clustersv1alpha1.PermissionsRequest{{Rules: r.Rules}}
	_, err := mgr.CreateAndWaitForCluster(ctx, r.LocalName, clustersv1alpha1.PURPOSE_ONBOARDING, scheme, perms)
	name := OnboardingRequestName(r.ProviderName, r.LocalName)
	if err != nil {
		return nil, r.explain(ctx, name, err)
	}
	ar := &clustersv1alpha1.AccessRequest{}
	if err := r.Platform.Get(ctx, client.ObjectKey{Namespace: r.Namespace, Name: name}, ar); err != nil {
		return nil, fmt.Errorf("reading AccessRequest %s/%s: %w", r.Namespace, name, err)
	}
	secretName, err := GrantedSecret(ar)
	if err != nil {
		return nil, err
	}
	secret := &corev1.Secret{}
	key := client.ObjectKey{Namespace: r.Namespace, Name: secretName}
	if err := r.Platform.Get(ctx, key, secret); err != nil {
		return nil, fmt.Errorf("reading the onboarding access secret %s: %w", key, err)
	}
	return newOnboardingAccess(key, secret.Data[KubeconfigKey])
}

// OnboardingRequestName is the name openmcp's library gives the provider's onboarding
// ClusterRequest and AccessRequest for a local name.
func OnboardingRequestName(providerName, localName string) string {
	return clusteraccess.StableRequestNameFromLocalName(providerName, localName)
}

// explain turns the library's error into what an operator can act on: which request
// openmcp has not granted, or denied.
func (r OnboardingRequest) explain(ctx context.Context, name string, err error) error {
	key := client.ObjectKey{Namespace: r.Namespace, Name: name}
	cr := &clustersv1alpha1.ClusterRequest{}
	if getErr := r.Platform.Get(ctx, key, cr); getErr == nil {
		switch {
		case cr.Status.IsDenied():
			return fmt.Errorf("openmcp denied ClusterRequest %s for the onboarding cluster", key)
		case !cr.Status.IsGranted():
			return fmt.Errorf("openmcp did not grant ClusterRequest %s for the onboarding cluster within %s (phase %q): is a cluster provider serving purpose %q? %w",
				key, r.Timeout, cr.Status.Phase, clustersv1alpha1.PURPOSE_ONBOARDING, err)
		}
	}
	ar := &clustersv1alpha1.AccessRequest{}
	if getErr := r.Platform.Get(ctx, key, ar); getErr == nil {
		if _, grantErr := GrantedSecret(ar); grantErr != nil {
			return fmt.Errorf("onboarding access: %w (phase %q): %w", grantErr, ar.Status.Phase, err)
		}
	}
	return fmt.Errorf("onboarding access through openmcp (ClusterRequest and AccessRequest %s): %w", key, err)
}

func newOnboardingAccess(secret client.ObjectKey, kubeconfig []byte) (*OnboardingAccess, error) {
	if len(kubeconfig) == 0 {
		return nil, fmt.Errorf("the onboarding access secret %s has no key %q", secret, KubeconfigKey)
	}
	a := &OnboardingAccess{Secret: secret, source: "the onboarding access secret " + secret.String(), parse: clientcmd.RESTConfigFromKubeConfig}
	if err := a.load(kubeconfig); err != nil {
		return nil, err
	}
	return a, nil
}

// load sets Config from the kubeconfig, with its bearer token behind the rotating header.
func (a *OnboardingAccess) load(kubeconfig []byte) error {
	cfg, err := a.parse(kubeconfig)
	if err != nil {
		return fmt.Errorf("%s holds no usable kubeconfig: %w", a.source, err)
	}
	a.Config = withRateLimits(cfg)
	if cfg.BearerToken != "" && cfg.BearerTokenFile == "" && cfg.ExecProvider == nil && cfg.AuthProvider == nil {
		a.token = &rotatingToken{token: cfg.BearerToken}
		cfg.BearerToken = ""
		cfg.Wrap(a.token.wrap)
	}
	a.base, err = a.withoutToken(kubeconfig)
	return err
}

// withoutToken returns the connection the kubeconfig describes without its bearer token:
// server, TLS settings and any other kind of credential. Two kubeconfigs that differ only
// in their token (and in the names they give users and contexts) give equal results.
func (a *OnboardingAccess) withoutToken(kubeconfig []byte) (*rest.Config, error) {
	cfg, err := a.parse(kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.BearerToken = ""
	return cfg, nil
}

// Rotation is what a change of the onboarding access secret means for the process.
type Rotation int

const (
	// Unchanged means nothing that matters changed.
	Unchanged Rotation = iota
	// TokenRotated means only the bearer token changed; it is in use from now on.
	TokenRotated
	// RestartNeeded means the secret is gone, or the server, CA or kind of credential
	// changed: the process must start again to request access anew.
	RestartNeeded
)

// update takes a new content of the access secret or file.
func (a *OnboardingAccess) update(kubeconfig []byte) (Rotation, string) {
	if len(kubeconfig) == 0 {
		return RestartNeeded, a.source + " has no kubeconfig any more"
	}
	base, err := a.withoutToken(kubeconfig)
	if err != nil {
		return RestartNeeded, a.source + " holds no usable kubeconfig any more"
	}
	if !reflect.DeepEqual(base, a.base) || a.token == nil {
		return RestartNeeded, "the onboarding access in " + a.source + " changed beyond its token (server, CA or credential)"
	}
	cfg, err := a.parse(kubeconfig)
	if err != nil || cfg.BearerToken == "" {
		return RestartNeeded, a.source + " has a kubeconfig without a token now"
	}
	if !a.token.set(cfg.BearerToken) {
		return Unchanged, ""
	}
	return TokenRotated, "the onboarding token was rotated; using the new one"
}

// Watch follows the access secret on the platform cluster, or the kubeconfig file, until
// ctx ends. A rotated token takes effect at once; anything else that changes the access
// calls restart, because a running manager cannot move its caches to another server or
// credential. platform is not used for a file.
func (a *OnboardingAccess) Watch(ctx context.Context, platform *rest.Config, log logr.Logger, restart func(reason string)) error {
	if a.File != "" {
		return a.watchFile(ctx, log, restart)
	}
	c, err := cache.New(platform, cache.Options{ByObject: map[client.Object]cache.ByObject{
		&corev1.Secret{}: {
			Namespaces: map[string]cache.Config{a.Secret.Namespace: {}},
			Field:      fields.OneTermEqualSelector("metadata.name", a.Secret.Name),
		},
	}})
	if err != nil {
		return err
	}
	inf, err := c.GetInformer(ctx, &corev1.Secret{})
	if err != nil {
		return err
	}
	handle := func(obj any) {
		s, ok := obj.(*corev1.Secret)
		if !ok {
			return
		}
		switch rot, why := a.update(s.Data[KubeconfigKey]); rot {
		case TokenRotated:
			log.Info(why, "secret", a.Secret.String())
		case RestartNeeded:
			restart(why)
		}
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    handle,
		UpdateFunc: func(_, obj any) { handle(obj) },
		DeleteFunc: func(any) { restart("the onboarding access secret " + a.Secret.String() + " was deleted") },
	}); err != nil {
		return err
	}
	return c.Start(ctx)
}

// rotatingToken sets the Authorization header from a token that can change while
// clients and watches built on the config keep running.
type rotatingToken struct {
	mu    sync.RWMutex
	token string
}

func (t *rotatingToken) get() string {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.token
}

// set reports whether the token changed.
func (t *rotatingToken) set(token string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.token == token {
		return false
	}
	t.token = token
	return true
}

func (t *rotatingToken) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		if req.Header.Get("Authorization") != "" {
			return rt.RoundTrip(req)
		}
		req = req.Clone(req.Context())
		req.Header.Set("Authorization", "Bearer "+t.get())
		return rt.RoundTrip(req)
	})
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

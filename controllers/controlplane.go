package controllers

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/source"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
)

// controlPlaneTimeout bounds every request to a ControlPlane.
const controlPlaneTimeout = 30 * time.Second

// SecretKey points at one key of a Secret.
type SecretKey struct {
	Name string
	Key  string
}

// ControlPlaneAccess is how the provider and Flux reach a ControlPlane.
type ControlPlaneAccess struct {
	// Client talks to the ControlPlane.
	Client client.Client
	// Kubeconfig is the secret in the tenant namespace that Flux uses to reach the ControlPlane.
	Kubeconfig SecretKey
}

// ControlPlanes gives access to the tenants' ControlPlanes. The standalone
// implementation reads labelled kubeconfig secrets; openmcp mode will request access.
type ControlPlanes interface {
	// Access returns the access to the Kro's ControlPlane (the one of the same name and
	// namespace). It returns a *NotAvailableError while there is none.
	Access(ctx context.Context, kro *v1alpha1.Kro) (*ControlPlaneAccess, error)
	// Source reports changes of the access to a ControlPlane as events on objects in its
	// tenant namespace, for the handler to map back to Kros.
	Source(h handler.EventHandler) source.Source
}

// NotAvailableError says that a ControlPlane cannot be reached yet, and what is awaited.
type NotAvailableError struct {
	// Message says what is awaited, for a condition.
	Message string
	// Gone is true when there is no access at all, as opposed to access that does not work.
	// A ControlPlane that is gone cannot be cleaned up, so deletion does not wait for it.
	Gone bool
}

func (e *NotAvailableError) Error() string { return e.Message }

// asNotAvailable unwraps a *NotAvailableError.
func asNotAvailable(err error) (*NotAvailableError, bool) {
	var na *NotAvailableError
	ok := errors.As(err, &na)
	return na, ok
}

// StandaloneControlPlanes finds each ControlPlane's kubeconfig in a secret in its tenant
// namespace labelled LabelControlPlaneKubeconfig=true, under the key KubeconfigKey. It
// keeps its own cache of just those secrets; add it to the manager to start it.
type StandaloneControlPlanes struct {
	cache  cache.Cache
	scheme *runtime.Scheme

	mu      sync.Mutex
	clients map[string]cachedClient // by tenant namespace
}

type cachedClient struct {
	kubeconfig [sha256.Size]byte
	client     client.Client
}

// NewStandaloneControlPlanes creates the ControlPlane access of standalone mode on the
// platform cluster's config.
func NewStandaloneControlPlanes(platform *rest.Config, scheme *runtime.Scheme) (*StandaloneControlPlanes, error) {
	c, err := cache.New(platform, cache.Options{
		Scheme: scheme,
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Secret{}: {Label: labels.SelectorFromSet(labels.Set{LabelControlPlaneKubeconfig: "true"})},
		},
	})
	if err != nil {
		return nil, fmt.Errorf("creating the cache of ControlPlane kubeconfig secrets: %w", err)
	}
	return &StandaloneControlPlanes{cache: c, scheme: scheme, clients: map[string]cachedClient{}}, nil
}

// Start runs the cache until ctx ends.
func (s *StandaloneControlPlanes) Start(ctx context.Context) error { return s.cache.Start(ctx) }

// Source watches the kubeconfig secrets.
func (s *StandaloneControlPlanes) Source(h handler.EventHandler) source.Source {
	return source.Kind[client.Object](s.cache, &corev1.Secret{}, h)
}

// Access builds a client from the tenant namespace's kubeconfig secret; clients are
// reused for as long as the kubeconfig stays the same.
func (s *StandaloneControlPlanes) Access(ctx context.Context, kro *v1alpha1.Kro) (*ControlPlaneAccess, error) {
	tenantNamespace, err := TenantNamespace(kro)
	if err != nil {
		return nil, err
	}
	list := &corev1.SecretList{}
	if err := s.cache.List(ctx, list, client.InNamespace(tenantNamespace), client.MatchingLabels{LabelControlPlaneKubeconfig: "true"}); err != nil {
		return nil, fmt.Errorf("listing kubeconfig secrets in %s: %w", tenantNamespace, err)
	}
	if len(list.Items) == 0 {
		s.forget(tenantNamespace)
		return nil, &NotAvailableError{Gone: true, Message: fmt.Sprintf(
			"waiting for the ControlPlane's kubeconfig: a Secret in namespace %s on the platform cluster labelled %s=true with the key %q",
			tenantNamespace, LabelControlPlaneKubeconfig, KubeconfigKey)}
	}
	sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].Name < list.Items[j].Name })
	secret := &list.Items[0]
	data := secret.Data[KubeconfigKey]
	if len(data) == 0 {
		return nil, &NotAvailableError{Message: fmt.Sprintf("the ControlPlane's kubeconfig secret %s/%s has no key %q", secret.Namespace, secret.Name, KubeconfigKey)}
	}
	c, err := s.client(tenantNamespace, data)
	if err != nil {
		return nil, &NotAvailableError{Message: fmt.Sprintf("the ControlPlane's kubeconfig secret %s/%s holds no usable kubeconfig: %s", secret.Namespace, secret.Name, summarize(err))}
	}
	return &ControlPlaneAccess{Client: c, Kubeconfig: SecretKey{Name: secret.Name, Key: KubeconfigKey}}, nil
}

func (s *StandaloneControlPlanes) client(tenantNamespace string, kubeconfig []byte) (client.Client, error) {
	key := sha256.Sum256(kubeconfig)
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.clients[tenantNamespace]; ok && c.kubeconfig == key {
		return c.client, nil
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		return nil, err
	}
	// An unreachable ControlPlane must not hold a reconcile for long.
	cfg.Timeout = controlPlaneTimeout
	c, err := client.New(cfg, client.Options{Scheme: s.scheme})
	if err != nil {
		return nil, err
	}
	s.clients[tenantNamespace] = cachedClient{kubeconfig: key, client: c}
	return c, nil
}

// forget drops the client of a ControlPlane whose access is gone.
func (s *StandaloneControlPlanes) forget(tenantNamespace string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.clients, tenantNamespace)
}

// Package reach is how the provider reaches the clusters of a Kro: the ControlPlane through
// its kubeconfig (a labelled secret, or an AccessRequest under openmcp), the workload
// cluster kro may run on, and the live cluster it engages for each; and where kro runs
// (Site). It holds the access, not what is done with it.
package reach

import (
	"context"
	"errors"
	"fmt"
	"sort"

	krov1alpha1 "github.com/kubernetes-sigs/kro/api/v1alpha1"
	clustersv1alpha1 "github.com/openmcp-project/openmcp-operator/api/clusters/v1alpha1"
	openmcpconst "github.com/openmcp-project/openmcp-operator/api/constants"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/source"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/clusters"
	"github.com/openmcp-project/service-provider-kro/controllers/guard"
	"github.com/openmcp-project/service-provider-kro/controllers/owned"
	"github.com/openmcp-project/service-provider-kro/providers/controlplane"
)

// SecretKey points at one key of a Secret.
type SecretKey struct {
	Name string
	Key  string
}

// ControlPlaneAccess is how the provider and Flux reach a ControlPlane.
type ControlPlaneAccess struct {
	// Cluster is the engaged ControlPlane.
	Cluster cluster.Cluster
	// Client talks to the ControlPlane; reads of the provider's secrets in kro-system and
	// of ResourceGraphDefinitions come from the ControlPlane's live cache.
	Client client.Client
	// Reader reads the ControlPlane without the cache, for what the provider did not
	// create (the cache holds only the provider's own secrets).
	Reader client.Reader
	// Kubeconfig is the secret in the tenant namespace that Flux uses to reach the ControlPlane.
	Kubeconfig SecretKey
	// ResourceGraphDefinitions lists the ControlPlane's RGDs from its cache, sorted by
	// name. It fails with errRGDsUnknown while the provider cannot tell yet.
	ResourceGraphDefinitions func(context.Context) ([]krov1alpha1.ResourceGraphDefinition, error)
	// Instances counts the instances of the CRDs kro generated, from the API server.
	Instances func(context.Context) ([]guard.InstanceCount, error)
}

// RgdCRDName is the CRD that kro's chart installs; until it exists a ControlPlane has no
// ResourceGraphDefinitions to watch.
const RgdCRDName = "resourcegraphdefinitions.kro.run"

// ErrRGDsUnknown says that the ControlPlane has not been checked for kro's CRD yet.
var ErrRGDsUnknown = errors.New("the provider is still checking the ControlPlane for kro's CRD")

// errRGDsNotSynced: kro's CRD exists but the provider's RGD watch has not synced yet,
// which counts as unknown (errors.Is(err, errRGDsUnknown)).
var errRGDsNotSynced error = rgdsNotSyncedError{}

type rgdsNotSyncedError struct{}

func (rgdsNotSyncedError) Error() string {
	return "kro's CRD " + RgdCRDName + " exists but the provider's watch of ResourceGraphDefinitions has not synced yet"
}

func (rgdsNotSyncedError) Is(target error) bool { return target == ErrRGDsUnknown }

// ControlPlanes gives access to the tenants' ControlPlanes.
type ControlPlanes interface {
	// Access returns the access to a Kro's ControlPlane. It returns a *NotAvailableError
	// while there is none.
	Access(ctx context.Context, kro *v1alpha1.Kro) (*ControlPlaneAccess, error)
	// Release ends the access to a Kro's ControlPlane once the Kro is gone: the cluster is
	// disengaged and whatever was requested for it is withdrawn. It tells whether all is
	// withdrawn; when not, it is to be called again once what it waits for is gone (a
	// watch of the requests brings the Kro back).
	Release(ctx context.Context, kro *v1alpha1.Kro) (bool, error)
	// WorkloadCluster returns the access to the workload cluster a Kro's kro runs on, for
	// a version placed on one. It returns a *NotAvailableError while there is none. Only
	// with ask does it ask for one where that takes a request (openmcp): a Kro that leaves
	// its workload cluster reaches what is there, and asks for nothing new.
	WorkloadCluster(ctx context.Context, kro *v1alpha1.Kro, ask bool) (*WorkloadClusterAccess, error)
	// DisengageWorkloadCluster drops the connection to a Kro's workload cluster, and
	// nothing else.
	DisengageWorkloadCluster(ctx context.Context, kro types.NamespacedName)
	// ReleaseWorkloadCluster disengages a Kro's workload cluster and withdraws what was
	// requested for it (openmcp), once kro has left it. It tells whether all is
	// withdrawn, as Release does.
	ReleaseWorkloadCluster(ctx context.Context, kro types.NamespacedName) (bool, error)
	// KroAccess is how kro gets its own access to ControlPlanes where openmcp grants it,
	// or nil where the provider issues it (standalone: kro_credential.go).
	KroAccess() KroAccess
	// Disengage drops this replica's connection to a Kro's ControlPlane, and nothing
	// else: another replica owns it now (--sharding).
	Disengage(ctx context.Context, kro types.NamespacedName)
	// Sources report what concerns a Kro's ControlPlane: changes of its access (the
	// kubeconfig secret, the AccessRequest) and of what is watched on it.
	Sources(inTenantNamespace handler.EventHandler) []source.Source
}

// NotAvailableError says that a ControlPlane cannot be reached yet, and what is awaited.
type NotAvailableError struct {
	// Message says what is awaited, for a condition.
	Message string
	// Gone is true when the ControlPlane is gone for good, by an authoritative signal:
	// under openmcp a denied AccessRequest, or a ClusterRequest or Cluster that is gone or
	// being deleted. A ControlPlane that is gone cannot be cleaned up, so a deletion does
	// not wait for it.
	Gone bool
	// Missing is true when there is no access at the moment (standalone: no kubeconfig
	// secret), which is not proof that the ControlPlane is gone: a secret may be replaced
	// by delete-and-recreate. A deletion waits for a grace period before it counts as gone.
	Missing bool
	// Connecting is true while the first connection with a new kubeconfig is under way
	// (after a start of the provider, or a rotation): nothing is known yet, good or bad.
	Connecting bool
	// Reason is the condition reason that names the situation; empty means
	// v1alpha1.ReasonReconciling (something is awaited).
	Reason string
}

func (e *NotAvailableError) Error() string { return e.Message }

// ConditionReason is the condition reason for the situation.
func (e *NotAvailableError) ConditionReason() string {
	if e.Reason != "" {
		return e.Reason
	}
	return v1alpha1.ReasonReconciling
}

// AsNotAvailable unwraps a *NotAvailableError.
func AsNotAvailable(err error) (*NotAvailableError, bool) {
	var na *NotAvailableError
	ok := errors.As(err, &na)
	return na, ok
}

// AccessMode says where ControlPlane kubeconfigs come from.
type AccessMode string

const (
	// AccessStandalone means: a secret in the tenant namespace labelled
	// v1alpha1.LabelControlPlaneKubeconfig=true holds the kubeconfig under KubeconfigKey.
	AccessStandalone AccessMode = "standalone"
	// AccessOpenMCP means: the provider requests access with an openmcp AccessRequest and uses
	// the secret openmcp names in its status once granted.
	AccessOpenMCP AccessMode = "openmcp"
)

// Engaged engages one cluster per ControlPlane with the multicluster
// provider, from the kubeconfig its access mode finds, and reads RGDs from that
// cluster's live cache.
type Engaged struct {
	Mode         AccessMode
	ProviderName string
	Platform     client.Client // cached: AccessRequests
	Reader       client.Reader // uncached: openmcp's access secrets are not cached
	Kubeconfigs  cache.Cache   // see accessCache
	// WorkloadKubeconfigs watches the labelled workload cluster kubeconfigs (standalone).
	WorkloadKubeconfigs cache.Cache
	Provider            *controlplane.Provider
	Events              *controlplane.Events
}

// AccessCache watches where ControlPlane kubeconfigs come from on the platform cluster:
// the labelled kubeconfig secrets (standalone) or the provider's AccessRequests (openmcp).
func AccessCache(platform cluster.Cluster, mode AccessMode, providerName string) (cache.Cache, error) {
	byObject := map[client.Object]cache.ByObject{
		&corev1.Secret{}: {Label: labels.SelectorFromSet(labels.Set{v1alpha1.LabelControlPlaneKubeconfig: "true"})},
	}
	if mode == AccessOpenMCP {
		byObject = map[client.Object]cache.ByObject{
			&clustersv1alpha1.AccessRequest{}: {Label: labels.SelectorFromSet(labels.Set{openmcpconst.ManagedByLabel: providerName})},
			// A ControlPlane's ClusterRequest being deleted or gone tells a deletion that the
			// ControlPlane is going for good; there is one per ControlPlane.
			&clustersv1alpha1.ClusterRequest{}: {},
			// openmcp's access secrets carry no label of ours, so the provider follows the
			// metadata of every secret (no data) to see a rotation the moment it happens.
			accessSecretMetadata(): {},
		}
	}
	return cache.New(platform.GetConfig(), cache.Options{Scheme: platform.GetScheme(), ByObject: byObject, DefaultTransform: owned.CompactManagedFields})
}

// accessSecretMetadata is the metadata of a Secret, for a metadata-only informer.
func accessSecretMetadata() *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	return m
}

// Sources report changes of the ControlPlanes' access and of what is watched on them.
func (c *Engaged) Sources(inTenantNamespace handler.EventHandler) []source.Source {
	srcs := []source.Source{c.Events.Source()}
	switch c.Mode {
	case AccessOpenMCP:
		// A granted (or re-granted) AccessRequest brings the Kro back, and so does a
		// change of any secret in the tenant namespace: openmcp's cluster providers rotate
		// the access secret in place, and the reconcile reads it and re-engages.
		srcs = append(srcs,
			source.Kind[client.Object](c.Kubeconfigs, &clustersv1alpha1.AccessRequest{}, inTenantNamespace),
			source.Kind[client.Object](c.Kubeconfigs, &clustersv1alpha1.ClusterRequest{}, inTenantNamespace),
			source.Kind[client.Object](c.Kubeconfigs, accessSecretMetadata(), inTenantNamespace, predicate.ResourceVersionChangedPredicate{}))
	default:
		srcs = append(srcs, source.Kind[client.Object](c.Kubeconfigs, &corev1.Secret{}, inTenantNamespace))
		if c.WorkloadKubeconfigs != nil {
			srcs = append(srcs, source.Kind[client.Object](c.WorkloadKubeconfigs, &corev1.Secret{}, inTenantNamespace))
		}
	}
	return srcs
}

// Access engages the Kro's ControlPlane, or says why it cannot be reached yet.
func (c *Engaged) Access(ctx context.Context, kro *v1alpha1.Kro) (*ControlPlaneAccess, error) {
	tenantNamespace, err := owned.TenantNamespace(kro)
	if err != nil {
		return nil, err
	}
	name := controlplane.ClusterName(client.ObjectKeyFromObject(kro))
	secret, kubeconfig, err := c.kubeconfig(ctx, kro, tenantNamespace)
	if na, ok := AsNotAvailable(err); ok && (na.Gone || na.Missing) {
		c.Provider.Remove(ctx, name)
	}
	if err != nil {
		return nil, err
	}
	cl, err := c.engaged(ctx, name, kubeconfig, "ControlPlane", fmt.Sprintf("secret %s/%s", tenantNamespace, secret), v1alpha1.ReasonControlPlaneUnreachable)
	if err != nil {
		return nil, err
	}
	return &ControlPlaneAccess{
		Cluster:    cl,
		Client:     cl.GetClient(),
		Reader:     cl.GetAPIReader(),
		Kubeconfig: SecretKey{Name: secret, Key: owned.KubeconfigKey},
		ResourceGraphDefinitions: func(ctx context.Context) ([]krov1alpha1.ResourceGraphDefinition, error) {
			switch c.Events.KindWatch(name, cl) {
			case controlplane.KindNoCRD:
				// The watch of kro's CRD may lag behind, and the RGD informer syncs only
				// after the CRD is there: a CRD that exists already means RGDs may exist
				// that the cache does not show yet. Only a CRD that is absent (or going)
				// means none.
				crd := &metav1.PartialObjectMetadata{}
				crd.SetGroupVersionKind(apiextensionsv1.SchemeGroupVersion.WithKind("CustomResourceDefinition"))
				err := cl.GetAPIReader().Get(ctx, client.ObjectKey{Name: RgdCRDName}, crd)
				switch {
				case apierrors.IsNotFound(err):
					return nil, nil
				case err != nil:
					return nil, fmt.Errorf("reading CRD %s: %w", RgdCRDName, err)
				case !crd.DeletionTimestamp.IsZero():
					return nil, nil
				}
				return nil, errRGDsNotSynced
			case controlplane.KindWatching:
				list := &krov1alpha1.ResourceGraphDefinitionList{}
				if err := cl.GetClient().List(ctx, list); err != nil {
					return nil, fmt.Errorf("listing ResourceGraphDefinitions: %w", err)
				}
				sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].Name < list.Items[j].Name })
				return list.Items, nil
			default:
				return nil, ErrRGDsUnknown
			}
		},
		Instances: func(ctx context.Context) ([]guard.InstanceCount, error) { return guard.InstancesOf(ctx, cl) },
	}, nil
}

// Disengage stops the engagement of the Kro's ControlPlane.
func (c *Engaged) Disengage(ctx context.Context, kro types.NamespacedName) {
	c.Provider.Remove(ctx, controlplane.ClusterName(kro))
	c.DisengageWorkloadCluster(ctx, kro)
}

// Release disengages the Kro's ControlPlane and withdraws what the provider requested for it.
func (c *Engaged) Release(ctx context.Context, kro *v1alpha1.Kro) (bool, error) {
	key := client.ObjectKeyFromObject(kro)
	c.Provider.Remove(ctx, controlplane.ClusterName(key))
	withdrawn, err := c.ReleaseWorkloadCluster(ctx, key)
	if err != nil || c.Mode != AccessOpenMCP {
		return withdrawn, err
	}
	if err := c.withdrawKroAccess(ctx, key); err != nil {
		return false, err
	}
	ar, err := clusters.NewAccessRequest(c.ProviderName, key)
	if err != nil {
		return false, err
	}
	if err := c.Platform.Delete(ctx, ar); client.IgnoreNotFound(err) != nil {
		return false, fmt.Errorf("deleting AccessRequest %s/%s: %w", ar.Namespace, ar.Name, err)
	}
	return withdrawn, nil
}

// kubeconfig finds the ControlPlane's kubeconfig secret and its content.
func (c *Engaged) kubeconfig(ctx context.Context, kro *v1alpha1.Kro, tenantNamespace string) (string, []byte, error) {
	if c.Mode == AccessOpenMCP {
		return c.openmcpKubeconfig(ctx, kro)
	}
	secret, err := firstSecret(ctx, c.Kubeconfigs, tenantNamespace)
	if err != nil || secret != nil {
		return secretKubeconfig(secret, err, "the ControlPlane's")
	}
	return "", nil, &NotAvailableError{Missing: true, Reason: v1alpha1.ReasonControlPlaneAccessMissing, Message: fmt.Sprintf(
		"waiting for the ControlPlane's kubeconfig: a Secret in namespace %s on the platform cluster labelled %s=true with the key %q",
		tenantNamespace, v1alpha1.LabelControlPlaneKubeconfig, owned.KubeconfigKey)}
}

// openmcpKubeconfig keeps the ControlPlane's AccessRequest in place and reads the secret
// openmcp wrote for it once granted.
func (c *Engaged) openmcpKubeconfig(ctx context.Context, kro *v1alpha1.Kro) (string, []byte, error) {
	desired, err := clusters.NewAccessRequest(c.ProviderName, client.ObjectKeyFromObject(kro))
	if err != nil {
		return "", nil, err
	}
	if !kro.DeletionTimestamp.IsZero() {
		// Only a deletion needs to know whether the ControlPlane itself is going: then
		// nothing on it is worth an uninstall or a guard.
		if na, err := c.controlPlaneGone(ctx, desired); na != nil || err != nil {
			return "", nil, errors.Join(err, errOrNil(na))
		}
	}
	return c.grantedKubeconfig(ctx, desired, true, "the ControlPlane's", func(ar *clustersv1alpha1.AccessRequest) *NotAvailableError {
		// openmcp does not revisit a denied request: the access is gone for good.
		return &NotAvailableError{Gone: true, Reason: v1alpha1.ReasonAccessDenied, Message: fmt.Sprintf(
			"openmcp denied AccessRequest %s/%s, so the ControlPlane cannot be reached; its conditions say why (kubectl -n %s get accessrequest %s -o yaml)",
			ar.Namespace, ar.Name, ar.Namespace, ar.Name)}
	})
}

// grantedKubeconfig keeps an AccessRequest of the provider's as desired (with ask, it is
// applied when missing, or when its token's rights differ) and reads the secret openmcp
// wrote for it once granted. denied says what a denied request means.
func (c *Engaged) grantedKubeconfig(ctx context.Context, desired *clustersv1alpha1.AccessRequest, ask bool, whose string,
	denied func(*clustersv1alpha1.AccessRequest) *NotAvailableError) (string, []byte, error) {
	ar, err := c.grantedAccessRequest(ctx, desired, ask)
	if err != nil {
		return "", nil, err
	}
	if ar.Status.IsDenied() {
		return "", nil, denied(ar)
	}
	name, err := clusters.GrantedSecret(ar)
	if err != nil {
		return "", nil, &NotAvailableError{Message: err.Error()}
	}
	secret := &corev1.Secret{}
	if err := c.Reader.Get(ctx, types.NamespacedName{Namespace: ar.Namespace, Name: name}, secret); err != nil {
		if apierrors.IsNotFound(err) {
			return "", nil, &NotAvailableError{Message: fmt.Sprintf("AccessRequest %s/%s names secret %s, which does not exist", ar.Namespace, ar.Name, name)}
		}
		return "", nil, fmt.Errorf("reading access secret %s/%s: %w", ar.Namespace, name, err)
	}
	return secretKubeconfig(secret, nil, whose)
}

// grantedAccessRequest returns the AccessRequest as the cache has it, after applying
// desired when it is missing (then it returns a *NotAvailableError: openmcp has yet to
// grant it) or asks for other rights than desired. Without ask it applies nothing, and
// one that is missing or being deleted is Missing: asking again for what the provider
// has just withdrawn would have openmcp grant it anew, and create the namespaces its
// rights name, after the provider cleaned up.
func (c *Engaged) grantedAccessRequest(ctx context.Context, desired *clustersv1alpha1.AccessRequest, ask bool) (*clustersv1alpha1.AccessRequest, error) {
	ar := &clustersv1alpha1.AccessRequest{}
	err := c.Kubeconfigs.Get(ctx, client.ObjectKeyFromObject(desired), ar)
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("reading AccessRequest %s/%s: %w", desired.Namespace, desired.Name, err)
	}
	if !ask && (err != nil || !ar.DeletionTimestamp.IsZero()) {
		return nil, &NotAvailableError{Missing: true, Message: fmt.Sprintf("AccessRequest %s/%s is withdrawn", desired.Namespace, desired.Name)}
	}
	if err == nil && equality.Semantic.DeepEqual(ar.Spec.Token, desired.Spec.Token) {
		return ar, nil
	}
	if err := owned.Apply(ctx, c.Platform, desired); err != nil {
		return nil, fmt.Errorf("requesting access with AccessRequest %s/%s: %w", desired.Namespace, desired.Name, err)
	}
	return nil, &NotAvailableError{Message: fmt.Sprintf("waiting for openmcp to grant AccessRequest %s/%s", desired.Namespace, desired.Name)}
}

// controlPlaneGone reads the ControlPlane's ClusterRequest, which the AccessRequest
// refers to (from the cache, whose watch brings the Kro back when it changes), and the
// Cluster it was granted (uncached, only during a deletion): either one gone or being
// deleted means the ControlPlane is going for good. It returns nil when both are there.
func (c *Engaged) controlPlaneGone(ctx context.Context, ar *clustersv1alpha1.AccessRequest) (*NotAvailableError, error) {
	ref := ar.Spec.RequestRef
	cr := &clustersv1alpha1.ClusterRequest{}
	switch err := c.Kubeconfigs.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, cr); {
	case apierrors.IsNotFound(err):
		return goneBecause("its ClusterRequest %s/%s is gone", ref.Namespace, ref.Name), nil
	case err != nil:
		return nil, fmt.Errorf("reading ClusterRequest %s/%s: %w", ref.Namespace, ref.Name, err)
	case !cr.DeletionTimestamp.IsZero():
		return goneBecause("its ClusterRequest %s/%s is being deleted", ref.Namespace, ref.Name), nil
	case cr.Status.Cluster == nil:
		return nil, nil
	}
	cref := cr.Status.Cluster
	cl := &clustersv1alpha1.Cluster{}
	switch err := c.Reader.Get(ctx, client.ObjectKey{Namespace: cref.Namespace, Name: cref.Name}, cl); {
	case apierrors.IsNotFound(err):
		return goneBecause("its Cluster %s/%s is gone", cref.Namespace, cref.Name), nil
	case err != nil:
		return nil, fmt.Errorf("reading Cluster %s/%s: %w", cref.Namespace, cref.Name, err)
	case !cl.DeletionTimestamp.IsZero():
		return goneBecause("its Cluster %s/%s is being deleted", cref.Namespace, cref.Name), nil
	}
	return nil, nil
}

func goneBecause(format string, args ...any) *NotAvailableError {
	return &NotAvailableError{Gone: true, Reason: v1alpha1.ReasonControlPlaneGone, Message: "the ControlPlane is going away: " + fmt.Sprintf(format, args...)}
}

// errOrNil turns a nil *NotAvailableError into a nil error.
func errOrNil(na *NotAvailableError) error {
	if na == nil {
		return nil
	}
	return na
}

// secretKubeconfig is the kubeconfig in a secret found by firstSecret (or its error);
// whose names the cluster for the message of a secret without one ("the ControlPlane's").
func secretKubeconfig(secret *corev1.Secret, err error, whose string) (string, []byte, error) {
	if err != nil {
		return "", nil, err
	}
	data := secret.Data[owned.KubeconfigKey]
	if len(data) == 0 {
		return secret.Name, nil, &NotAvailableError{Message: fmt.Sprintf("%s kubeconfig secret %s/%s has no key %q", whose, secret.Namespace, secret.Name, owned.KubeconfigKey)}
	}
	return secret.Name, data, nil
}

// firstSecret is the first by name of the secrets a cache holds in namespace, or nil.
func firstSecret(ctx context.Context, c cache.Cache, namespace string) (*corev1.Secret, error) {
	list := &corev1.SecretList{}
	if err := c.List(ctx, list, client.InNamespace(namespace)); err != nil {
		return nil, fmt.Errorf("listing kubeconfig secrets in %s: %w", namespace, err)
	}
	if len(list.Items) == 0 {
		return nil, nil
	}
	sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].Name < list.Items[j].Name })
	return &list.Items[0], nil
}

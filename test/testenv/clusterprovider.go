package testenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	clustersv1alpha1 "github.com/openmcp-project/openmcp-operator/api/clusters/v1alpha1"
	commonapi "github.com/openmcp-project/openmcp-operator/api/common"
	apiconst "github.com/openmcp-project/openmcp-operator/api/constants"
)

// The cluster provider's names on the platform cluster.
const (
	// ClusterProviderName is the providerRef of the emulator's ClusterProfiles: the
	// AccessRequest controller of openmcp-operator labels AccessRequests with it.
	ClusterProviderName = "testenv"
	// ProfileOnboarding and ProfileMCP are the emulator's ClusterProfiles: Clusters of the
	// first are the environment's onboarding cluster, Clusters of the second one of its
	// ControlPlanes.
	ProfileOnboarding = "testenv-onboarding"
	ProfileMCP        = "testenv-mcp"
	// ProfileWorkload is the emulator's ClusterProfile for workload clusters: its Clusters
	// are the environment's workload cluster, which the scheduler shares.
	ProfileWorkload = "testenv-workload"
	// AccessNamespace is the namespace of the ServiceAccounts behind granted access, on
	// each target cluster.
	AccessNamespace = "openmcp-access"
	// AccessServiceAccountLabel is on every ServiceAccount, role and binding of a grant, with
	// the ServiceAccount's name.
	AccessServiceAccountLabel = "testenv.openmcp.cloud/serviceaccount"

	clusterFinalizer       = "testenv.openmcp.cloud/cluster"
	accessFinalizer        = "testenv.openmcp.cloud/access"
	backingAnnotation      = "testenv.openmcp.cloud/backing-cluster"
	serviceAccountAnnot    = AccessServiceAccountLabel
	accessLabel            = "testenv.openmcp.cloud/access-request"
	cpNameLabel            = apiconst.MetadataAnnotationLabelPrefix + "cp-name"
	defaultAccessTokenTTL  = time.Hour
	clusterProviderPolling = 300 * time.Millisecond
)

// SchedulerConfig is openmcp-operator's configuration that makes its scheduler put
// onboarding ClusterRequests on one shared Cluster of ProfileOnboarding, give every
// ControlPlane (purpose mcp) an exclusive Cluster of ProfileMCP, and put every request
// of purpose workload on one Cluster of ProfileWorkload that all share.
const SchedulerConfig = `scheduler:
  scope: Cluster
  purposeMappings:
    onboarding:
      template:
        metadata:
          name: onboarding
          namespace: ` + OpenMCPNamespace + `
        spec:
          profile: ` + ProfileOnboarding + `
          tenancy: Shared
    mcp:
      template:
        spec:
          profile: ` + ProfileMCP + `
          tenancy: Exclusive
    workload:
      tenancyCount: 0
      template:
        metadata:
          name: workload
          namespace: ` + OpenMCPNamespace + `
        spec:
          profile: ` + ProfileWorkload + `
          tenancy: Shared
`

// TargetCluster is a real cluster the emulator hands out.
type TargetCluster struct {
	// Name identifies it; for a ControlPlane, the name its ControlPlane object has.
	Name string
	// Config authenticates as a cluster admin.
	Config *rest.Config
}

// ClusterProviderOptions configures StartClusterProvider.
type ClusterProviderOptions struct {
	// Platform is the platform cluster (where Clusters and AccessRequests live).
	Platform *rest.Config
	// Onboarding backs every Cluster of ProfileOnboarding.
	Onboarding TargetCluster
	// Workload backs every Cluster of ProfileWorkload; none when its Config is nil.
	Workload TargetCluster
	// ControlPlanes back the Clusters of ProfileMCP: the one whose Name is the ControlPlane's
	// name (from the Cluster's metadata.open-control-plane.io/cp-name label), else the first
	// one not in use.
	ControlPlanes []TargetCluster
	// TokenTTL is how long issued tokens are valid; default one hour.
	TokenTTL time.Duration
	// Log receives a line per grant, rotation and revocation.
	Log io.Writer
}

// ClusterProvider plays an openmcp cluster provider on the platform cluster: it owns three
// ClusterProfiles, makes the Clusters openmcp-operator's scheduler creates for them Ready
// (backed by the environment's real API servers), and grants the AccessRequests openmcp's
// AccessRequest controller labels for it. A grant is a ServiceAccount on the target cluster
// with exactly the requested permissions (a ClusterRole or Role per spec.token.permissions,
// bindings for spec.token.roleRefs) and a kubeconfig with a TokenRequest token for it,
// written to a secret in the AccessRequest's namespace (key "kubeconfig", plus "token",
// "host", "ca.crt", "creationTimestamp" and "expirationTimestamp" in Unix seconds).
// Deleting an AccessRequest revokes its ServiceAccount; RotateAccess issues a new one.
type ClusterProvider struct {
	opts     ClusterProviderOptions
	platform client.Client
	targets  map[string]client.Client
	cancel   context.CancelFunc
	done     chan struct{}

	mu      sync.Mutex
	lastErr error
	rotate  map[client.ObjectKey]chan error
}

// StartClusterProvider creates the ClusterProfiles and starts reconciling. openmcp-operator's
// CRDs must be installed on the platform cluster. Stop it with Stop.
func StartClusterProvider(ctx context.Context, opts ClusterProviderOptions) (*ClusterProvider, error) {
	if opts.TokenTTL == 0 {
		opts.TokenTTL = defaultAccessTokenTTL
	}
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	pc, err := client.New(opts.Platform, client.Options{Scheme: OpenMCPScheme})
	if err != nil {
		return nil, err
	}
	p := &ClusterProvider{opts: opts, platform: pc, targets: map[string]client.Client{}, rotate: map[client.ObjectKey]chan error{}}
	for _, t := range p.all() {
		if p.targets[t.Name], err = client.New(t.Config, client.Options{Scheme: OpenMCPScheme}); err != nil {
			return nil, err
		}
	}
	for _, name := range []string{ProfileOnboarding, ProfileMCP, ProfileWorkload} {
		profile := &clustersv1alpha1.ClusterProfile{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: clustersv1alpha1.ClusterProfileSpec{
				ProviderRef:       commonapi.LocalObjectReference{Name: ClusterProviderName},
				ProviderConfigRef: commonapi.LocalObjectReference{Name: "default"},
				SupportedVersions: []clustersv1alpha1.SupportedK8sVersion{{Version: KubernetesVersion[1:]}},
			},
		}
		if err := pc.Create(ctx, profile); client.IgnoreAlreadyExists(err) != nil {
			return nil, fmt.Errorf("creating ClusterProfile %s: %w", name, err)
		}
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	p.cancel, p.done = cancel, make(chan struct{})
	go p.loop(runCtx)
	return p, nil
}

// Stop stops reconciling; what was granted stays.
func (p *ClusterProvider) Stop() error {
	if p == nil || p.cancel == nil {
		return nil
	}
	p.cancel()
	<-p.done
	return nil
}

// LastError is the last error a reconcile ran into (nil once one succeeds again).
func (p *ClusterProvider) LastError() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lastErr
}

// RotateAccess issues a new ServiceAccount and token for a granted AccessRequest, writes
// them to its secret and then deletes the old ServiceAccount, which revokes the old token
// at once, as a cluster provider refreshing an expiring credential does.
func (p *ClusterProvider) RotateAccess(ctx context.Context, key client.ObjectKey) error {
	done := make(chan error, 1)
	p.mu.Lock()
	p.rotate[key] = done
	p.mu.Unlock()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		p.mu.Lock()
		delete(p.rotate, key)
		p.mu.Unlock()
		return ctx.Err()
	}
}

func (p *ClusterProvider) loop(ctx context.Context) {
	defer close(p.done)
	for {
		err := errors.Join(p.reconcileClusters(ctx), p.reconcileAccessRequests(ctx))
		if ctx.Err() != nil {
			return
		}
		p.mu.Lock()
		repeated := err != nil && p.lastErr != nil && err.Error() == p.lastErr.Error()
		p.lastErr = err
		p.mu.Unlock()
		if err != nil && !repeated {
			fmt.Fprintf(p.opts.Log, "clusterprovider: %v\n", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(clusterProviderPolling):
		}
	}
}

func (p *ClusterProvider) reconcileClusters(ctx context.Context) error {
	var list clustersv1alpha1.ClusterList
	if err := p.platform.List(ctx, &list); err != nil {
		return err
	}
	var errs []error
	for i := range list.Items {
		c := &list.Items[i]
		if c.Spec.Profile != ProfileOnboarding && c.Spec.Profile != ProfileMCP && c.Spec.Profile != ProfileWorkload {
			continue
		}
		if err := p.reconcileCluster(ctx, c, list.Items); err != nil {
			errs = append(errs, fmt.Errorf("cluster %s/%s: %w", c.Namespace, c.Name, err))
		}
	}
	return errors.Join(errs...)
}

func (p *ClusterProvider) reconcileCluster(ctx context.Context, c *clustersv1alpha1.Cluster, all []clustersv1alpha1.Cluster) error {
	if !c.DeletionTimestamp.IsZero() {
		// A real provider would tear the cluster down; the environment's clusters stay.
		if controllerutil.ContainsFinalizer(c, clusterFinalizer) {
			old := c.DeepCopy()
			controllerutil.RemoveFinalizer(c, clusterFinalizer)
			if err := p.platform.Patch(ctx, c, client.MergeFrom(old)); err != nil {
				return err
			}
			fmt.Fprintf(p.opts.Log, "clusterprovider: released Cluster %s/%s (%s)\n", c.Namespace, c.Name, c.Annotations[backingAnnotation])
		}
		return nil
	}
	backing := c.Annotations[backingAnnotation]
	if backing == "" || !controllerutil.ContainsFinalizer(c, clusterFinalizer) {
		var err error
		if backing == "" {
			if backing, err = p.chooseBacking(c, all); err != nil {
				return err
			}
		}
		old := c.DeepCopy()
		controllerutil.AddFinalizer(c, clusterFinalizer)
		metav1.SetMetaDataAnnotation(&c.ObjectMeta, backingAnnotation, backing)
		if err := p.platform.Patch(ctx, c, client.MergeFrom(old)); err != nil {
			return err
		}
		fmt.Fprintf(p.opts.Log, "clusterprovider: Cluster %s/%s is %s\n", c.Namespace, c.Name, backing)
	}
	if c.Status.Phase == clustersv1alpha1.CLUSTER_PHASE_READY && c.Status.ObservedGeneration == c.Generation {
		return nil
	}
	cfg := p.targetConfig(backing)
	if cfg == nil {
		return fmt.Errorf("unknown backing cluster %q", backing)
	}
	old := c.DeepCopy()
	c.Status.Phase = clustersv1alpha1.CLUSTER_PHASE_READY
	c.Status.ObservedGeneration = c.Generation
	c.Status.Endpoints = clustersv1alpha1.Endpoints{{Name: clustersv1alpha1.APISERVER_ENDPOINT_EXTERNAL, URL: cfg.Host}}
	apimeta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{
		Type: "Ready", Status: metav1.ConditionTrue, Reason: "ClusterReady",
		Message: "backed by the test environment's cluster " + backing, ObservedGeneration: c.Generation,
	})
	return p.platform.Status().Patch(ctx, c, client.MergeFrom(old))
}

func (p *ClusterProvider) chooseBacking(c *clustersv1alpha1.Cluster, all []clustersv1alpha1.Cluster) (string, error) {
	switch c.Spec.Profile {
	case ProfileOnboarding:
		return p.opts.Onboarding.Name, nil
	case ProfileWorkload:
		if p.opts.Workload.Config == nil {
			return "", fmt.Errorf("the environment has no workload cluster")
		}
		return p.opts.Workload.Name, nil
	}
	used := map[string]bool{}
	for _, o := range all {
		if o.UID != c.UID && o.DeletionTimestamp.IsZero() && o.Spec.Profile == ProfileMCP {
			used[o.Annotations[backingAnnotation]] = true
		}
	}
	want := c.Labels[cpNameLabel]
	for _, t := range p.opts.ControlPlanes {
		if t.Name == want && !used[t.Name] {
			return t.Name, nil
		}
	}
	for _, t := range p.opts.ControlPlanes {
		if !used[t.Name] {
			return t.Name, nil
		}
	}
	return "", fmt.Errorf("no free ControlPlane cluster for it (the environment has %d)", len(p.opts.ControlPlanes))
}

// all are the clusters the emulator hands out.
func (p *ClusterProvider) all() []TargetCluster {
	all := append([]TargetCluster{p.opts.Onboarding}, p.opts.ControlPlanes...)
	if p.opts.Workload.Config != nil {
		all = append(all, p.opts.Workload)
	}
	return all
}

func (p *ClusterProvider) targetConfig(name string) *rest.Config {
	for _, t := range p.all() {
		if t.Name == name {
			return t.Config
		}
	}
	return nil
}

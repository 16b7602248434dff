// Package controlplane is a multicluster-runtime cluster provider with one cluster per
// tenant ControlPlane. The Kro reconciler, which knows where each ControlPlane's kubeconfig
// comes from (a labelled secret, or a granted openmcp AccessRequest), hands the kubeconfig
// to Ensure; the provider engages a cluster with a live cache for it, probes it when it
// has gone quiet, re-engages it when the kubeconfig changes and disengages it on Remove.
//
// Engagement happens in a goroutine per ControlPlane, so that an unreachable ControlPlane
// never slows the others down, and each cluster's context derives from the provider's
// long-lived context, never from a reconcile's.
package controlplane

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
)

// Phase is where a ControlPlane's engagement stands.
type Phase string

// The phases of a ControlPlane's engagement.
const (
	// Absent: the provider has no kubeconfig for the ControlPlane.
	Absent Phase = "Absent"
	// Connecting: the kubeconfig is new and the first connection is under way.
	Connecting Phase = "Connecting"
	// Engaged: the ControlPlane answers and its cache is live.
	Engaged Phase = "Engaged"
	// Unreachable: the ControlPlane does not answer, or refuses the credentials.
	Unreachable Phase = "Unreachable"
)

// State is a ControlPlane's engagement as the provider last saw it.
type State struct {
	Phase Phase
	// Message summarises the last error while Unreachable.
	Message string
	// Since is when Phase last changed.
	Since time.Time
}

// Options configures the provider.
type Options struct {
	// ClusterOptions configure each ControlPlane's cluster.Cluster (scheme, what its
	// cache holds).
	ClusterOptions []cluster.Option
	// ClusterOptionsFor, when set and not nil for a cluster, replaces ClusterOptions for
	// that cluster: a workload cluster's cache holds the tenant's namespace there, not a
	// ControlPlane's kro-system.
	ClusterOptionsFor func(multicluster.ClusterName) []cluster.Option
	// QuietPeriod is how long an engaged ControlPlane may stay quiet (no answer to its
	// cluster's requests, no event or bookmark on its watches) before it is asked whether
	// it still answers. A request of the cluster's that fails has it asked at once.
	// Default 90s: the API server sends each watch a bookmark every minute, so a
	// reachable ControlPlane is never quiet that long, and a connection that stops
	// answering is closed by client-go's HTTP/2 health check within 45s, which fails
	// the watches on it.
	QuietPeriod time.Duration
	// ProbeInterval is how often an unreachable ControlPlane is asked again. Default 15s.
	ProbeInterval time.Duration
	// ProbeTimeout bounds one probe. Default 5s.
	ProbeTimeout time.Duration
	// MinBackoff and MaxBackoff bound the wait between two connection attempts to an
	// unreachable ControlPlane. Defaults 1s and 2m.
	MinBackoff, MaxBackoff time.Duration
	// OnChange is told the name of a ControlPlane whose State changed. It must not block.
	OnChange func(multicluster.ClusterName)
	// Log is the provider's logger.
	Log logr.Logger
}

// Provider engages one cluster per ControlPlane. It implements multicluster.Provider and
// multicluster.ProviderRunnable.
type Provider struct {
	opts Options

	mu       sync.Mutex
	ctx      context.Context // the provider's long-lived context, set by Start before ready closes
	aware    multicluster.Aware
	clusters map[multicluster.ClusterName]*entry
	indexers []indexer
	ready    chan struct{} // closed once Start has run
	probes   [causes]atomic.Int64
}

type indexer struct {
	obj     client.Object
	field   string
	extract client.IndexerFunc
}

// entry is one engagement: one kubeconfig, one goroutine, one cluster at a time.
type entry struct {
	hash   string
	cancel context.CancelFunc
	done   chan struct{} // closed when the goroutine has ended and its cluster stopped

	// guarded by Provider.mu
	cluster cluster.Cluster
	state   State
}

var (
	_ multicluster.Provider         = &Provider{}
	_ multicluster.ProviderRunnable = &Provider{}
)

// New returns a provider; the multicluster manager starts it.
func New(opts Options) *Provider {
	if opts.QuietPeriod == 0 {
		opts.QuietPeriod = 90 * time.Second
	}
	if opts.ProbeInterval == 0 {
		opts.ProbeInterval = 15 * time.Second
	}
	if opts.ProbeTimeout == 0 {
		opts.ProbeTimeout = 5 * time.Second
	}
	if opts.MinBackoff == 0 {
		opts.MinBackoff = time.Second
	}
	if opts.MaxBackoff == 0 {
		opts.MaxBackoff = 2 * time.Minute
	}
	if opts.OnChange == nil {
		opts.OnChange = func(multicluster.ClusterName) {}
	}
	if opts.Log.GetSink() == nil {
		opts.Log = logr.Discard()
	}
	return &Provider{opts: opts, clusters: map[multicluster.ClusterName]*entry{}, ready: make(chan struct{})}
}

// Start records the long-lived context and the component to engage clusters with, then
// blocks until ctx ends and every cluster has stopped.
func (p *Provider) Start(ctx context.Context, aware multicluster.Aware) error {
	p.mu.Lock()
	p.ctx, p.aware = ctx, aware
	close(p.ready)
	p.mu.Unlock()

	<-ctx.Done()
	p.mu.Lock()
	var done []chan struct{}
	for name, e := range p.clusters {
		e.cancel()
		done = append(done, e.done)
		delete(p.clusters, name)
	}
	p.mu.Unlock()
	for _, d := range done {
		<-d
	}
	return nil
}

// Get returns the engaged cluster of a ControlPlane, or multicluster.ErrClusterNotFound.
func (p *Provider) Get(_ context.Context, name multicluster.ClusterName) (cluster.Cluster, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e, ok := p.clusters[name]; ok && e.cluster != nil {
		return e.cluster, nil
	}
	return nil, multicluster.ErrClusterNotFound
}

// IndexField registers an index on every engaged cluster, now and later.
func (p *Provider) IndexField(ctx context.Context, obj client.Object, field string, extract client.IndexerFunc) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.indexers = append(p.indexers, indexer{obj, field, extract})
	for name, e := range p.clusters {
		if e.cluster == nil {
			continue
		}
		if err := e.cluster.GetFieldIndexer().IndexField(ctx, obj, field, extract); err != nil {
			return fmt.Errorf("indexing %s on ControlPlane %s: %w", field, name, err)
		}
	}
	return nil
}

// Ensure makes the provider engage the ControlPlane with this kubeconfig. The same
// kubeconfig again changes nothing; a different one replaces the cluster (the old cache
// and its goroutines end). It returns the current state at once, never waiting for the
// ControlPlane; a kubeconfig that cannot be parsed is an error.
func (p *Provider) Ensure(name multicluster.ClusterName, kubeconfig []byte) (State, error) {
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		return State{Phase: Absent}, fmt.Errorf("the kubeconfig cannot be parsed: %s", summarize(err))
	}
	sum := sha256.Sum256(kubeconfig)
	hash := hex.EncodeToString(sum[:])

	p.mu.Lock()
	defer p.mu.Unlock()
	if old, ok := p.clusters[name]; ok {
		if old.hash == hash {
			return old.state, nil
		}
		old.cancel() // its goroutine stops the old cluster; the new one starts beside it
		p.opts.Log.Info("kubeconfig changed, re-engaging", "controlPlane", name)
	}
	// The cluster's context derives from Start's. Before Start has run there is none: then
	// it starts from the background, and run ties it to Start's context once that comes.
	parent := p.ctx
	if parent == nil {
		parent = context.Background()
	}
	ctx, cancel := context.WithCancel(parent)
	e := &entry{hash: hash, cancel: cancel, done: make(chan struct{}), state: State{Phase: Connecting, Since: time.Now()}}
	p.clusters[name] = e
	go p.run(ctx, name, cfg, e)
	return e.state, nil
}

// Remove disengages a ControlPlane and waits until its cluster has stopped, or until ctx
// ends (the cluster then stops on its own).
func (p *Provider) Remove(ctx context.Context, name multicluster.ClusterName) {
	p.mu.Lock()
	e, ok := p.clusters[name]
	if ok {
		delete(p.clusters, name)
		e.cancel()
	}
	p.mu.Unlock()
	if !ok {
		return
	}
	select {
	case <-e.done:
		p.opts.Log.Info("disengaged", "controlPlane", name)
	case <-ctx.Done():
		p.opts.Log.Info("disengaging, not waiting for the cluster to stop", "controlPlane", name, "reason", ctx.Err().Error())
	}
	p.opts.OnChange(name)
}

// run connects, engages and then probes one ControlPlane until ctx ends.
func (p *Provider) run(ctx context.Context, name multicluster.ClusterName, cfg *rest.Config, e *entry) {
	var stop func()
	defer func() {
		if stop != nil {
			stop()
		}
		close(e.done)
	}()
	log := p.opts.Log.WithValues("controlPlane", name)

	// Clusters live as long as the provider (or until removed), never shorter: wait for
	// Start to hand over its context, then end with it.
	select {
	case <-p.ready:
	case <-ctx.Done():
		return
	}
	stopWithProvider := context.AfterFunc(p.ctx, e.cancel)
	defer stopWithProvider()

	backoff := newBackoff(p.opts.MinBackoff, p.opts.MaxBackoff)
	live := newLiveness()
	for stop == nil {
		var err error
		if stop, err = p.engage(ctx, name, cfg, live, e); err != nil {
			if ctx.Err() != nil {
				return
			}
			pause := backoff.Step()
			log.Info("ControlPlane not reachable, retrying", "in", pause, "reason", summarize(err))
			p.setState(name, e, State{Phase: Unreachable, Message: summarize(err)})
			if !sleep(ctx, pause) {
				return
			}
		}
	}
	log.Info("engaged")
	p.setState(name, e, State{Phase: Engaged})
	p.watchOver(ctx, name, cfg, live, e)
}

// watchOver keeps an engaged ControlPlane's phase true until ctx ends. The cache keeps
// serving what it last saw when a ControlPlane goes away, so the ControlPlane itself must
// show that it answers: by its own traffic (the cluster's requests, its watches' events
// and bookmarks) or, once that has been quiet for QuietPeriod, by a probe. A request of
// the cluster's that fails calls for a probe at once. While Unreachable, it is probed
// every ProbeInterval whatever else it says.
func (p *Provider) watchOver(ctx context.Context, name multicluster.ClusterName, cfg *rest.Config, live *liveness, e *entry) {
	quietPeriod := p.opts.QuietPeriod
	t := time.NewTimer(quietPeriod)
	defer t.Stop()
	reachable := true
	for {
		cause := causeUnreachable
		select {
		case <-ctx.Done():
			return
		case <-live.trouble:
			if !reachable {
				continue // the timer probes an unreachable ControlPlane
			}
			cause = causeFailure
		case <-t.C:
			if reachable {
				if quiet := live.quiet(); quiet < quietPeriod {
					t.Reset(quietPeriod - quiet)
					continue
				}
				cause = causeQuiet
			}
		}
		err := p.probe(ctx, cfg)
		if ctx.Err() != nil {
			return
		}
		p.probes[cause].Add(1)
		if reachable = err == nil; reachable {
			live.answered()
			p.setState(name, e, State{Phase: Engaged})
			t.Reset(quietPeriod)
		} else {
			p.setState(name, e, State{Phase: Unreachable, Message: summarize(err)})
			t.Reset(p.opts.ProbeInterval)
		}
	}
}

// engage checks that the ControlPlane answers, starts a cluster for it and engages the
// multicluster manager's components with it. It returns the function that stops the
// cluster; on failure nothing is left running.
func (p *Provider) engage(ctx context.Context, name multicluster.ClusterName, cfg *rest.Config, live *liveness, e *entry) (stop func(), err error) {
	if err := p.probe(ctx, cfg); err != nil {
		return nil, err
	}
	opts := p.opts.ClusterOptions
	if p.opts.ClusterOptionsFor != nil {
		if o := p.opts.ClusterOptionsFor(name); o != nil {
			opts = o
		}
	}
	cl, err := cluster.New(live.watch(cfg), opts...)
	if err != nil {
		return nil, fmt.Errorf("creating the cluster: %w", err)
	}
	p.mu.Lock()
	idx := append([]indexer(nil), p.indexers...)
	p.mu.Unlock()
	for _, i := range idx {
		if err := cl.GetFieldIndexer().IndexField(ctx, i.obj, i.field, i.extract); err != nil {
			return nil, fmt.Errorf("indexing %s: %w", i.field, err)
		}
	}

	clusterCtx, cancel := context.WithCancel(ctx)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		if err := cl.Start(clusterCtx); err != nil && clusterCtx.Err() == nil {
			p.opts.Log.Error(err, "ControlPlane cluster stopped", "controlPlane", name)
		}
	}()
	stop = func() { cancel(); <-stopped }

	// Engaged means reads from the cache work: until the cache has started they fail
	// with "the cache is not started", which a reconcile right after a restart would
	// otherwise report as an error.
	if !cl.GetCache().WaitForCacheSync(clusterCtx) {
		stop()
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("the ControlPlane's cache did not start")
	}
	if err := p.aware.Engage(clusterCtx, name, cl); err != nil {
		stop()
		return nil, fmt.Errorf("engaging: %w", err)
	}
	p.mu.Lock()
	if p.clusters[name] == e {
		e.cluster = cl
	}
	p.mu.Unlock()
	return stop, nil
}

func (p *Provider) probe(ctx context.Context, cfg *rest.Config) error {
	ctx, cancel := context.WithTimeout(ctx, p.opts.ProbeTimeout)
	defer cancel()
	c := rest.CopyConfig(cfg)
	c.Timeout = p.opts.ProbeTimeout
	return Ping(ctx, c)
}

// Ping asks the API server for its version, bounded by ctx: it fails when the server
// cannot be reached or does not accept the credentials.
func Ping(ctx context.Context, cfg *rest.Config) error {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return fmt.Errorf("connecting to %s: %w", cfg.Host, err)
	}
	if err := dc.RESTClient().Get().AbsPath("/version").Do(ctx).Error(); err != nil {
		return fmt.Errorf("connecting to %s: %w", cfg.Host, err)
	}
	return nil
}

// setState records a new state and tells OnChange when the phase or message changed.
func (p *Provider) setState(name multicluster.ClusterName, e *entry, s State) {
	p.mu.Lock()
	current, ok := p.clusters[name]
	changed := ok && current == e && (e.state.Phase != s.Phase || e.state.Message != s.Message)
	if changed {
		s.Since = time.Now()
		e.state = s
	}
	p.mu.Unlock()
	if changed {
		p.opts.OnChange(name)
	}
}

// newBackoff is the pause between two attempts: min, doubling up to max, then max.
func newBackoff(min, max time.Duration) *wait.Backoff {
	return &wait.Backoff{Duration: min, Factor: 2, Steps: math.MaxInt32, Cap: max}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// summarize shortens an error for a condition message: the first 200 characters of its
// first line. Errors from client-go never carry credentials.
func summarize(err error) string {
	s := err.Error()
	for i, r := range s {
		if r == '\n' {
			s = s[:i]
			break
		}
	}
	if len(s) > 200 {
		s = s[:197] + "..."
	}
	return s
}

package controlplane

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/source"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
)

// KindWatch says whether the watched kind (EventsOptions.Kind) is being watched on a
// ControlPlane.
type KindWatch string

// The states of the watch of the watched kind.
const (
	// KindUnknown: the ControlPlane is not engaged, or not yet checked for the kind's CRD.
	KindUnknown KindWatch = "Unknown"
	// KindNoCRD: the kind's CRD does not exist on the ControlPlane, so there are no objects
	// of the kind.
	KindNoCRD KindWatch = "NoCRD"
	// KindWatching: objects of the kind are in the ControlPlane's cache and watched.
	KindWatching KindWatch = "Watching"
)

// EventsOptions configure Events.
type EventsOptions struct {
	Log logr.Logger
	// For is the object that the events about a ControlPlane name (the reconciled object
	// of that namespace and name).
	For func(types.NamespacedName) client.Object
	// Kind is an object of the kind to watch on each ControlPlane once its CRD, KindCRD,
	// exists and is established.
	Kind    client.Object
	KindCRD string
	// MaxBackoff bounds the pause between attempts to watch the CRD and the kind, as
	// Options.MaxBackoff does for connections (default two minutes).
	MaxBackoff time.Duration
	// Deployments: every cluster's cache holds the Deployments of kro's release
	// (WatchDeployments), watched from the engagement on like the secrets.
	Deployments bool
}

// Events connects engaged ControlPlanes to a reconciler. For every ControlPlane the
// provider engages, it watches the cached secrets at once and the watched kind as soon as
// its CRD exists (a watch on a missing kind would fail the whole engagement), and turns
// every change into an event for the object the ControlPlane belongs to. It is a
// multicluster.Aware runnable for the multicluster manager.
type Events struct {
	opts        EventsOptions
	syncTimeout time.Duration
	ch          chan event.TypedGenericEvent[client.Object]
	stopped     chan struct{} // closed when Start returns: sends are dropped from then on

	mu      sync.Mutex
	watches map[multicluster.ClusterName]*clusterWatch
}

type clusterWatch struct {
	cluster cluster.Cluster
	kind    KindWatch
}

// NewEvents returns an Events with a buffered channel.
func NewEvents(opts EventsOptions) *Events {
	if opts.MaxBackoff == 0 {
		opts.MaxBackoff = 2 * time.Minute
	}
	if opts.Log.GetSink() == nil {
		opts.Log = logr.Discard()
	}
	return &Events{
		opts:        opts,
		syncTimeout: 30 * time.Second,
		ch:          make(chan event.TypedGenericEvent[client.Object], 1024),
		stopped:     make(chan struct{}),
		watches:     map[multicluster.ClusterName]*clusterWatch{},
	}
}

// Source feeds the reconciler: every event names the object of a ControlPlane (For).
func (e *Events) Source() source.Source {
	return source.Channel(e.ch, &handler.EnqueueRequestForObject{})
}

// Start runs until ctx ends; the work happens in Engage.
func (e *Events) Start(ctx context.Context) error {
	<-ctx.Done()
	close(e.stopped)
	return nil
}

// Notify enqueues the object of a ControlPlane, for example when its engagement changed.
func (e *Events) Notify(name multicluster.ClusterName) {
	if key, _, ok := Tenant(name); ok {
		e.send(key)
	}
}

// send blocks while the controller's queue is behind (back-pressure on the informer that
// saw the change), but never after Start has returned.
func (e *Events) send(key types.NamespacedName) {
	ev := event.TypedGenericEvent[client.Object]{Object: e.opts.For(key)}
	select {
	case e.ch <- ev:
	case <-e.stopped:
	}
}

// KindWatch tells whether the watched kind is watched on the ControlPlane through the
// given cluster. The cluster must be the engaged instance: after a re-engagement, the old
// one reads Unknown.
func (e *Events) KindWatch(name multicluster.ClusterName, cl cluster.Cluster) KindWatch {
	e.mu.Lock()
	defer e.mu.Unlock()
	if w, ok := e.watches[name]; ok && w.cluster == cl {
		return w.kind
	}
	return KindUnknown
}

// Engage starts the watches on one ControlPlane or workload cluster. The secret informer,
// and with Deployments the Deployment informer, are synced before it returns; the watch
// of the kind starts in the background once its CRD exists. Everything ends with ctx.
func (e *Events) Engage(ctx context.Context, name multicluster.ClusterName, cl cluster.Cluster) error {
	key, workload, ok := Tenant(name)
	if !ok {
		return fmt.Errorf("cluster name %q names neither a ControlPlane nor a workload cluster", name)
	}
	syncCtx, cancel := context.WithTimeout(ctx, e.syncTimeout)
	defer cancel()
	inf, err := cl.GetCache().GetInformer(syncCtx, &corev1.Secret{})
	if err != nil {
		return fmt.Errorf("watching the provider's secrets: %w", err)
	}
	if _, err := inf.AddEventHandler(e.handler(key)); err != nil {
		return err
	}
	if e.opts.Deployments {
		inf, err := cl.GetCache().GetInformer(syncCtx, &appsv1.Deployment{})
		if err != nil {
			return fmt.Errorf("watching kro's Deployment: %w", err)
		}
		if _, err := inf.AddEventHandler(e.handler(key)); err != nil {
			return err
		}
	}

	w := &clusterWatch{cluster: cl, kind: KindUnknown}
	e.mu.Lock()
	e.watches[name] = w
	e.mu.Unlock()
	context.AfterFunc(ctx, func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		if e.watches[name] == w {
			delete(e.watches, name)
		}
	})
	// The watched kind lives on the ControlPlane; a workload cluster has only the
	// provider's secrets in the tenant's namespace there.
	if !workload {
		go e.watchKind(ctx, name, key, w)
	}
	return nil
}

// handler turns any change of a watched object into an event for the ControlPlane's Kro.
func (e *Events) handler(key types.NamespacedName) toolscache.ResourceEventHandler {
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { e.send(key) },
		UpdateFunc: func(any, any) { e.send(key) },
		DeleteFunc: func(any) { e.send(key) },
	}
}

// watchKind waits for the kind's CRD on the ControlPlane, then starts its informer.
func (e *Events) watchKind(ctx context.Context, name multicluster.ClusterName, key types.NamespacedName, w *clusterWatch) {
	log := e.opts.Log.WithValues("controlPlane", name, "crd", e.opts.KindCRD)
	wc, err := directClient(w.cluster)
	if err != nil {
		log.Error(err, "cannot watch CRDs")
		return
	}
	backoff := newBackoff(time.Second, e.opts.MaxBackoff)
	retry := func(what string, err error) bool {
		pause := time.Second // a watch the server ended is listed again after a pause
		if err != nil {
			pause = backoff.Step()
			log.V(1).Info(what+" failed, retrying", "in", pause, "reason", summarize(err))
		}
		return sleep(ctx, pause)
	}
	for ctx.Err() == nil {
		established, err := e.waitForCRD(ctx, wc, name, w)
		if ctx.Err() != nil {
			return
		}
		if !established {
			if !retry("watching the CRD", err) {
				return
			}
			continue
		}
		inf, err := w.cluster.GetCache().GetInformer(ctx, e.opts.Kind)
		if err == nil {
			_, err = inf.AddEventHandler(e.handler(key))
		}
		if err != nil {
			if ctx.Err() != nil || !retry("starting the watch of the kind", err) {
				return
			}
			continue
		}
		e.setKindWatch(name, w, KindWatching)
		log.Info("watching the kind")
		return
	}
}

// directClient is an uncached client of an engaged cluster with its HTTP client and REST
// mapper: no new connection, no discovery.
func directClient(cl cluster.Cluster) (client.WithWatch, error) {
	return client.NewWithWatch(cl.GetConfig(), client.Options{Scheme: cl.GetScheme(), HTTPClient: cl.GetHTTPClient(), Mapper: cl.GetRESTMapper()})
}

// waitForCRD lists the kind's CRD and, while it is missing or not established, watches
// it. It reports NoCRD while it waits and returns true once the CRD is established;
// false without an error when the server ended the watch, and the server's error when it
// sent one.
func (e *Events) waitForCRD(ctx context.Context, wc client.WithWatch, name multicluster.ClusterName, w *clusterWatch) (bool, error) {
	if e.served(ctx, wc) {
		return true, nil
	}
	byName := client.MatchingFields{"metadata.name": e.opts.KindCRD}
	list := &apiextensionsv1.CustomResourceDefinitionList{}
	if err := wc.List(ctx, list, byName); err != nil {
		return false, err
	}
	if len(list.Items) == 1 && established(&list.Items[0]) {
		return true, nil
	}
	e.setKindWatch(name, w, KindNoCRD)
	watcher, err := wc.Watch(ctx, &apiextensionsv1.CustomResourceDefinitionList{}, byName,
		&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: list.ResourceVersion}})
	if err != nil {
		return false, err
	}
	defer watcher.Stop()
	for {
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case ev, ok := <-watcher.ResultChan():
			if !ok {
				return false, nil
			}
			if ev.Type == watch.Error {
				return false, fmt.Errorf("watching CRD %s: %w", e.opts.KindCRD, apierrors.FromObject(ev.Object))
			}
			if crd, ok := ev.Object.(*apiextensionsv1.CustomResourceDefinition); ok && ev.Type != watch.Deleted && established(crd) {
				return true, nil
			}
		}
	}
}

// served tells whether the API server serves the watched kind, which it does only once
// the kind's CRD is established: a metadata-only list of at most one object. It spares
// most engagements reading the CRD, whose schema can weigh hundreds of kilobytes; any
// failure leaves the answer to the CRD.
func (e *Events) served(ctx context.Context, wc client.WithWatch) bool {
	gvk, err := apiutil.GVKForObject(e.opts.Kind, wc.Scheme())
	if err != nil {
		return false
	}
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	return wc.List(ctx, list, client.Limit(1)) == nil
}

func established(crd *apiextensionsv1.CustomResourceDefinition) bool {
	for _, c := range crd.Status.Conditions {
		if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
			return true
		}
	}
	return false
}

func (e *Events) setKindWatch(name multicluster.ClusterName, w *clusterWatch, s KindWatch) {
	e.mu.Lock()
	changed := w.kind != s
	w.kind = s
	e.mu.Unlock()
	if changed {
		e.Notify(name)
	}
}

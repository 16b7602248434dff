package controlplane

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	krov1alpha1 "github.com/kubernetes-sigs/kro/api/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/source"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"

	"github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/clusters"
)

// RGDCRDName is the CRD that kro's chart installs; until it exists a ControlPlane has no
// ResourceGraphDefinitions to watch.
const RGDCRDName = "resourcegraphdefinitions.kro.run"

// RGDWatch says whether a ControlPlane's ResourceGraphDefinitions are being watched.
type RGDWatch string

// The states of the RGD watch.
const (
	// RGDUnknown: the ControlPlane is not engaged, or not yet checked for kro's CRD.
	RGDUnknown RGDWatch = "Unknown"
	// RGDNoCRD: kro's CRD does not exist on the ControlPlane, so there are no RGDs.
	RGDNoCRD RGDWatch = "NoCRD"
	// RGDWatching: RGDs are in the ControlPlane's cache and watched.
	RGDWatching RGDWatch = "Watching"
)

// Events connects engaged ControlPlanes to the Kro reconciler. For every ControlPlane the
// provider engages, it watches the provider's secrets in kro-system at once and the
// ResourceGraphDefinitions as soon as kro's CRD exists (a watch on a missing kind would
// fail the whole engagement), and turns every change into an event for the
// ControlPlane's Kro. It is a multicluster.Aware runnable for the multicluster manager.
type Events struct {
	log         logr.Logger
	syncTimeout time.Duration
	maxBackoff  time.Duration
	ch          chan event.TypedGenericEvent[client.Object]
	stopped     chan struct{} // closed when Start returns: sends are dropped from then on

	mu      sync.Mutex
	watches map[multicluster.ClusterName]*clusterWatch
}

type clusterWatch struct {
	cluster cluster.Cluster
	rgd     RGDWatch
}

// NewEvents returns an Events with a buffered channel.
// maxBackoff bounds the pause between attempts to watch a ControlPlane's kro CRD and
// RGDs, as Options.MaxBackoff does for connections (default two minutes).
func NewEvents(log logr.Logger, maxBackoff time.Duration) *Events {
	if maxBackoff == 0 {
		maxBackoff = 2 * time.Minute
	}
	return &Events{
		log:         log,
		syncTimeout: 30 * time.Second,
		maxBackoff:  maxBackoff,
		ch:          make(chan event.TypedGenericEvent[client.Object], 1024),
		stopped:     make(chan struct{}),
		watches:     map[multicluster.ClusterName]*clusterWatch{},
	}
}

// Source feeds the Kro controller: every event names a Kro.
func (e *Events) Source() source.Source {
	return source.Channel(e.ch, &handler.EnqueueRequestForObject{})
}

// Start runs until ctx ends; the work happens in Engage.
func (e *Events) Start(ctx context.Context) error {
	<-ctx.Done()
	close(e.stopped)
	return nil
}

// Notify enqueues the Kro of a ControlPlane, for example when its engagement changed.
func (e *Events) Notify(name multicluster.ClusterName) {
	if key, ok := clusters.ControlPlane(name); ok {
		e.send(key)
	}
}

// send blocks while the controller's queue is behind (back-pressure on the informer that
// saw the change), but never after Start has returned.
func (e *Events) send(key types.NamespacedName) {
	ev := event.TypedGenericEvent[client.Object]{Object: &v1alpha1.Kro{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}}
	select {
	case e.ch <- ev:
	case <-e.stopped:
	}
}

// RGDWatch tells whether the ControlPlane's RGDs are watched through the given cluster.
// The cluster must be the engaged instance: after a re-engagement, the old one reads
// Unknown.
func (e *Events) RGDWatch(name multicluster.ClusterName, cl cluster.Cluster) RGDWatch {
	e.mu.Lock()
	defer e.mu.Unlock()
	if w, ok := e.watches[name]; ok && w.cluster == cl {
		return w.rgd
	}
	return RGDUnknown
}

// Engage starts the watches on one ControlPlane. The secret informer is synced before it
// returns; the RGD watch starts in the background once kro's CRD exists. Everything ends
// with ctx.
func (e *Events) Engage(ctx context.Context, name multicluster.ClusterName, cl cluster.Cluster) error {
	key, ok := clusters.ControlPlane(name)
	if !ok {
		return fmt.Errorf("cluster name %q does not name a ControlPlane", name)
	}
	syncCtx, cancel := context.WithTimeout(ctx, e.syncTimeout)
	defer cancel()
	inf, err := cl.GetCache().GetInformer(syncCtx, &corev1.Secret{})
	if err != nil {
		return fmt.Errorf("watching secrets in %s: %w", clusters.KroNamespace, err)
	}
	if _, err := inf.AddEventHandler(e.handler(key)); err != nil {
		return err
	}

	w := &clusterWatch{cluster: cl, rgd: RGDUnknown}
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
	go e.watchRGDs(ctx, name, key, w)
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

// watchRGDs waits for kro's CRD on the ControlPlane, then starts the RGD informer.
func (e *Events) watchRGDs(ctx context.Context, name multicluster.ClusterName, key types.NamespacedName, w *clusterWatch) {
	log := e.log.WithValues("controlPlane", name)
	// The cluster's HTTP client and REST mapper: no new connection, no discovery.
	wc, err := client.NewWithWatch(w.cluster.GetConfig(), client.Options{
		Scheme: w.cluster.GetScheme(), HTTPClient: w.cluster.GetHTTPClient(), Mapper: w.cluster.GetRESTMapper(),
	})
	if err != nil {
		log.Error(err, "cannot watch CRDs")
		return
	}
	backoff := newBackoff(time.Second, e.maxBackoff)
	for ctx.Err() == nil {
		established, err := e.waitForCRD(ctx, wc, name, w)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			pause := backoff.Step()
			log.V(1).Info("watching kro's CRD failed, retrying", "in", pause, "reason", summarize(err))
			if !sleep(ctx, pause) {
				return
			}
			continue
		}
		if !established {
			continue
		}
		inf, err := w.cluster.GetCache().GetInformer(ctx, &krov1alpha1.ResourceGraphDefinition{})
		if err == nil {
			_, err = inf.AddEventHandler(e.handler(key))
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			pause := backoff.Step()
			log.Info("starting the RGD watch failed, retrying", "in", pause, "reason", summarize(err))
			if !sleep(ctx, pause) {
				return
			}
			continue
		}
		e.setRGDWatch(name, w, RGDWatching)
		log.Info("watching ResourceGraphDefinitions")
		return
	}
}

// waitForCRD lists kro's CRD and, while it is missing or not established, watches it.
// It reports NoCRD while it waits and returns true once the CRD is established.
func (e *Events) waitForCRD(ctx context.Context, wc client.WithWatch, name multicluster.ClusterName, w *clusterWatch) (bool, error) {
	byName := client.MatchingFields{"metadata.name": RGDCRDName}
	list := &apiextensionsv1.CustomResourceDefinitionList{}
	if err := wc.List(ctx, list, byName); err != nil {
		return false, err
	}
	if len(list.Items) == 1 && established(&list.Items[0]) {
		return true, nil
	}
	e.setRGDWatch(name, w, RGDNoCRD)
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
				return false, nil // the watch ended; list again
			}
			if ev.Type == watch.Error {
				return false, fmt.Errorf("watch error")
			}
			if crd, ok := ev.Object.(*apiextensionsv1.CustomResourceDefinition); ok && ev.Type != watch.Deleted && established(crd) {
				return true, nil
			}
		}
	}
}

func established(crd *apiextensionsv1.CustomResourceDefinition) bool {
	for _, c := range crd.Status.Conditions {
		if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
			return true
		}
	}
	return false
}

func (e *Events) setRGDWatch(name multicluster.ClusterName, w *clusterWatch, s RGDWatch) {
	e.mu.Lock()
	changed := w.rgd != s
	w.rgd = s
	e.mu.Unlock()
	if changed {
		e.Notify(name)
	}
}

package controlplane

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
)

// Transforms trim what a cluster's cache keeps of a kind (the key: an object of the
// kind) to what the provider reads of it, before the object is stored.
type Transforms map[client.Object]toolscache.TransformFunc

// ClusterOptions shapes each ControlPlane's cluster so that its cache holds only what the
// provider needs there: its own secrets in namespace (selected by ownSecrets) and
// whatever kind Events starts to watch, each as trim transforms it (nil keeps objects
// whole). Reading any other kind from the cache fails instead of quietly starting an
// informer for it; namespaces are read directly. The built-in kinds and known are mapped
// without discovery (NewRESTMapper); scheme must know the types the caller reads, and
// known the kinds of trim.
func ClusterOptions(scheme *runtime.Scheme, namespace string, ownSecrets labels.Selector, known Kinds, trim Transforms) cluster.Option {
	return func(o *cluster.Options) {
		o.Scheme = scheme
		o.Cache.ReaderFailOnMissingInformer = true
		secrets := cache.ByObject{Namespaces: map[string]cache.Config{namespace: {}}, Label: ownSecrets}
		o.Cache.ByObject = map[client.Object]cache.ByObject{}
		for obj, fn := range trim {
			if _, ok := obj.(*corev1.Secret); ok {
				secrets.Transform = fn
				continue
			}
			o.Cache.ByObject[obj] = cache.ByObject{Transform: fn}
		}
		o.Cache.ByObject[&corev1.Secret{}] = secrets
		o.Client.Cache = &client.CacheOptions{DisableFor: []client.Object{&corev1.Namespace{}}}
		o.MapperProvider = NewRESTMapper(known)
	}
}

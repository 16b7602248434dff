package controlplane

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
)

// ClusterOptions shapes each ControlPlane's cluster so that its cache holds only what the
// provider needs there: its own secrets in namespace (selected by ownSecrets) and
// whatever kind Events starts to watch. Reading any other kind from the cache fails
// instead of quietly starting an informer for it; namespaces are read directly. The
// built-in kinds and known are mapped without discovery (NewRESTMapper); scheme must
// know the types the caller reads.
func ClusterOptions(scheme *runtime.Scheme, namespace string, ownSecrets labels.Selector, known Kinds) cluster.Option {
	return func(o *cluster.Options) {
		o.Scheme = scheme
		o.Cache.ReaderFailOnMissingInformer = true
		o.Cache.ByObject = map[client.Object]cache.ByObject{
			&corev1.Secret{}: {
				Namespaces: map[string]cache.Config{namespace: {}},
				Label:      ownSecrets,
			},
		}
		o.Client.Cache = &client.CacheOptions{DisableFor: []client.Object{&corev1.Namespace{}}}
		o.MapperProvider = NewRESTMapper(known)
	}
}

package controlplane

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"

	"github.com/openmcp-project/service-provider-kro/clusters"
)

// ClusterOptions shapes each ControlPlane's cluster so that its cache holds only what the
// provider needs there: its own secrets in kro-system (selected by label) and whatever
// kind Events starts to watch. Reading any other kind from the cache fails instead of
// quietly starting an informer for it; namespaces are read directly. The built-in kinds
// and known are mapped without discovery (NewRESTMapper).
func ClusterOptions(ownSecrets labels.Selector, known Kinds) cluster.Option {
	return func(o *cluster.Options) {
		o.Scheme = clusters.Scheme
		o.Cache.ReaderFailOnMissingInformer = true
		o.Cache.ByObject = map[client.Object]cache.ByObject{
			&corev1.Secret{}: {
				Namespaces: map[string]cache.Config{clusters.KroNamespace: {}},
				Label:      ownSecrets,
			},
		}
		o.Client.Cache = &client.CacheOptions{DisableFor: []client.Object{&corev1.Namespace{}}}
		o.MapperProvider = NewRESTMapper(known)
	}
}

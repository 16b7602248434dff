package clusters

import (
	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	krov1alpha1 "github.com/kubernetes-sigs/kro/api/v1alpha1"
	clustersv1alpha1 "github.com/openmcp-project/openmcp-operator/api/clusters/v1alpha1"
	providerv1alpha1 "github.com/openmcp-project/openmcp-operator/api/provider/v1alpha1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
)

// Scheme knows every kind the provider reads or writes on any of its clusters: core
// Kubernetes, CRDs, this API, Flux, kro and openmcp (AccessRequests, ClusterRequests, the
// ServiceProvider).
var Scheme = runtime.NewScheme()

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(Scheme))
	utilruntime.Must(apiextensionsv1.AddToScheme(Scheme))
	utilruntime.Must(v1alpha1.AddToScheme(Scheme))
	utilruntime.Must(sourcev1.AddToScheme(Scheme))
	utilruntime.Must(helmv2.AddToScheme(Scheme))
	utilruntime.Must(krov1alpha1.AddToScheme(Scheme))
	utilruntime.Must(clustersv1alpha1.AddToScheme(Scheme))
	utilruntime.Must(providerv1alpha1.AddToScheme(Scheme))
}

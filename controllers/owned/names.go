// Package owned knows the provider's own objects: their names, owner labels and
// annotations, how they are applied (server-side, writing nothing when current) and how
// secrets are copied without taking over what someone else made.
package owned

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/clusters"
	"github.com/openmcp-project/service-provider-kro/controllers/foreign"
)

// Facts of the provider's objects that are not part of the API.
const (
	// KubeconfigKey is the data key of the kubeconfig in the access secret.
	KubeconfigKey = clusters.KubeconfigKey

	// KroNamespace is where kro runs on the ControlPlane.
	KroNamespace = clusters.KroNamespace
	// ReleaseName is the Helm release name of kro on the ControlPlane.
	ReleaseName = "kro"
)

// TenantNamespace is the ControlPlane's namespace on the platform cluster, the same one
// openmcp derives from the ControlPlane's name and namespace on the onboarding cluster.
func TenantNamespace(kro *v1alpha1.Kro) (string, error) {
	ns, err := clusters.TenantNamespace(client.ObjectKeyFromObject(kro))
	if err != nil {
		return "", fmt.Errorf("deriving the tenant namespace: %w", err)
	}
	return ns, nil
}

// FluxObjectName names the OCIRepository and the HelmRelease in the tenant namespace.
// There is one of each per tenant namespace, so the provider's name is enough.
func FluxObjectName(provider string) string {
	return foreign.Subdomain(provider, validation.DNS1035LabelMaxLength)
}

// ChartSecretCopyName names the copy of a chart pull secret in the tenant namespace.
func ChartSecretCopyName(provider, source string) string {
	return foreign.Subdomain(provider+"-"+source, foreign.SubdomainMax)
}

// Labels are the labels on everything the provider creates for a Kro.
func Labels(kro *v1alpha1.Kro, provider, role string) map[string]string {
	l := map[string]string{
		v1alpha1.LabelManagedBy:    v1alpha1.ManagedByValue,
		v1alpha1.LabelProvider:     foreign.LabelValue(provider),
		v1alpha1.LabelKroName:      foreign.LabelValue(kro.Name),
		v1alpha1.LabelKroNamespace: foreign.LabelValue(kro.Namespace),
	}
	if role != "" {
		l[v1alpha1.LabelRole] = role
	}
	return l
}

// Annotations name the Kro exactly, whatever the length of its name.
func Annotations(kro *v1alpha1.Kro) map[string]string {
	return map[string]string{v1alpha1.AnnotationKro: kro.Namespace + "/" + kro.Name}
}

// ControlPlaneCluster is the value of ManagedResource.Cluster for objects on the ControlPlane.
const ControlPlaneCluster = "controlplane"

// MadeFor tells whether the provider made obj (a Flux object) for this Kro: it carries
// the provider's labels of the Kro. An object of the same name without them is someone
// else's and is never deleted.
func MadeFor(kro *v1alpha1.Kro, provider string, obj client.Object) bool {
	return As(obj, &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Labels: Labels(kro, provider, "")}})
}

// CopyLabels select the objects of one role that the provider made for a Kro.
func CopyLabels(kro *v1alpha1.Kro, provider, role string) client.MatchingLabels {
	return client.MatchingLabels(Labels(kro, provider, role))
}

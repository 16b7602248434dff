package controllers

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/clusters"
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

// fluxObjectName names the OCIRepository and the HelmRelease in the tenant namespace.
// There is one of each per tenant namespace, so the provider's name is enough.
func fluxObjectName(provider string) string {
	return shorten(provider, validation.DNS1035LabelMaxLength)
}

// chartSecretCopyName names the copy of a chart pull secret in the tenant namespace.
func chartSecretCopyName(provider, source string) string {
	return shorten(provider+"-"+source, validation.DNS1123SubdomainMaxLength)
}

// labelValue returns v when it is a valid label value, otherwise a shortened form with a
// hash that stays unique; the exact value is kept in v1alpha1.AnnotationKro.
func labelValue(v string) string {
	if len(validation.IsValidLabelValue(v)) == 0 {
		return v
	}
	return shorten(v, validation.LabelValueMaxLength)
}

// shorten returns s when it fits into max characters, otherwise a prefix of s followed
// by a hash of all of s. The result starts and ends with a letter or digit when s does.
func shorten(s string, max int) string {
	if len(s) <= max {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	suffix := hex.EncodeToString(sum[:])[:10]
	prefix := s[:max-len(suffix)-1]
	for len(prefix) > 0 && !isAlnum(prefix[len(prefix)-1]) {
		prefix = prefix[:len(prefix)-1]
	}
	return prefix + "-" + suffix
}

func isAlnum(b byte) bool {
	return (b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z') || (b >= '0' && b <= '9')
}

// ownerLabels are the labels on everything the provider creates for a Kro.
func ownerLabels(kro *v1alpha1.Kro, provider, role string) map[string]string {
	l := map[string]string{
		v1alpha1.LabelManagedBy:    v1alpha1.ManagedByValue,
		v1alpha1.LabelProvider:     labelValue(provider),
		v1alpha1.LabelKroName:      labelValue(kro.Name),
		v1alpha1.LabelKroNamespace: labelValue(kro.Namespace),
	}
	if role != "" {
		l[v1alpha1.LabelRole] = role
	}
	return l
}

// ownerAnnotations name the Kro exactly, whatever the length of its name.
func ownerAnnotations(kro *v1alpha1.Kro) map[string]string {
	return map[string]string{v1alpha1.AnnotationKro: kro.Namespace + "/" + kro.Name}
}

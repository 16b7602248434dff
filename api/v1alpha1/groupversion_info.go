// Package v1alpha1 holds the kro service provider's API: the tenant-facing Kro object
// (onboarding cluster) and the platform-facing ProviderConfig (platform cluster).
//
// +kubebuilder:object:generate=true
// +groupName=kro.services.open-control-plane.io
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the API group and version of this package.
	GroupVersion = schema.GroupVersion{Group: "kro.services.open-control-plane.io", Version: "v1alpha1"}

	// SchemeBuilder registers the types of this package with a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the types of this package to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &Kro{}, &KroList{}, &ProviderConfig{}, &ProviderConfigList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}

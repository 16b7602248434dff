// Package v1alpha1 holds the kro service provider's API: the tenant-facing Kro object
// (onboarding cluster) and the platform-facing ProviderConfig (platform cluster).
//
// +kubebuilder:object:generate=true
// +groupName=kro.services.open-control-plane.io
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the API group and version of this package.
	GroupVersion = schema.GroupVersion{Group: "kro.services.open-control-plane.io", Version: "v1alpha1"}

	// SchemeBuilder registers the types of this package with a scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the types of this package to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

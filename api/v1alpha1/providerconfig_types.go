package v1alpha1

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DefaultChartURL is where the kro chart is published upstream.
const DefaultChartURL = "oci://registry.k8s.io/kro/charts/kro"

// DefaultPollInterval is used when spec.pollInterval is not set.
const DefaultPollInterval = "1m"

// ProviderConfigSpec is the platform team's offer: which kro versions tenants may install,
// and the artifacts behind each.
type ProviderConfigSpec struct {
	// Versions on offer. A Kro's spec.version is looked up here by version.
	// +required
	// +listType=map
	// +listMapKey=version
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	Versions []KroVersion `json:"versions"`

	// PollInterval is how often Flux re-checks the chart and the release, and how often
	// the provider re-verifies each Kro as a safety net behind its watches.
	// Between 10s and 24h.
	// +optional
	// +kubebuilder:default="1m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('10s') && duration(self) <= duration('24h')",message="pollInterval must be between 10s and 24h"
	PollInterval *metav1.Duration `json:"pollInterval,omitempty"`
}

// KroVersion maps a tenant-facing version to the chart that installs it.
// +kubebuilder:validation:XValidation:rule="!has(self.chartURL) || !self.chartURL.contains('://') || self.chartURL.startsWith('oci://')",message="chartURL must be an OCI URL: use the oci:// scheme or leave the scheme out"
type KroVersion struct {
	// Version is the name tenants use in Kro.spec.version.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="self.matches('^[A-Za-z0-9][A-Za-z0-9._+-]*$')",message="version must start with a letter or digit and contain only letters, digits, '.', '_', '+' and '-'"
	Version string `json:"version"`

	// ChartVersion is the chart's tag in the registry. It need not equal Version.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:XValidation:rule="self.matches('^[A-Za-z0-9_][A-Za-z0-9._+-]*$')",message="chartVersion must be a valid chart tag: letters, digits, '.', '_', '+' and '-'"
	ChartVersion string `json:"chartVersion"`

	// ChartURL is the chart's OCI repository. Without a scheme, oci:// is assumed.
	// +optional
	// +kubebuilder:default="oci://registry.k8s.io/kro/charts/kro"
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	ChartURL string `json:"chartURL,omitempty"`

	// ChartPullSecret names a Secret of type kubernetes.io/dockerconfigjson in the
	// provider's namespace. It is copied into the tenant namespace and used to pull the chart.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",message="chartPullSecret must be a valid Secret name: lowercase letters, digits, '-' and '.'"
	ChartPullSecret string `json:"chartPullSecret,omitempty"`

	// HelmValues are passed to the chart as they are. Secrets named under
	// imagePullSecrets[].name are copied from the provider's namespace into kro-system on
	// the ControlPlane.
	// +optional
	// +kubebuilder:validation:Type=object
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:pruning:PreserveUnknownFields
	HelmValues *apiextensionsv1.JSON `json:"helmValues,omitempty"`
}

// ProviderConfigStatus is what the provider observed for its configuration: whether
// every version's pull secrets resolve, and how many Kros use each version.
type ProviderConfigStatus struct {
	// CommonStatus: Ready is True when every version's pull secrets exist in the
	// provider's namespace with the right type; phase is Ready or Progressing (Terminating
	// while the ProviderConfig is being deleted).
	CommonStatus `json:",inline"`

	// Versions counts, for each version on offer and in the order of spec.versions, the
	// Kros that select it.
	// +optional
	// +listType=map
	// +listMapKey=version
	// +kubebuilder:validation:MaxItems=64
	Versions []VersionStatus `json:"versions,omitempty"`

	// Kros is how many Kros exist on the onboarding cluster, whatever version they ask for.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Kros int32 `json:"kros"`

	// UnknownVersionKros is how many Kros ask for a version that is not on offer.
	// +optional
	// +kubebuilder:validation:Minimum=0
	UnknownVersionKros int32 `json:"unknownVersionKros"`
}

// VersionStatus counts the Kros that select one version.
type VersionStatus struct {
	// Version is a spec.versions[].version.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	Version string `json:"version"`

	// Kros is how many Kros ask for this version.
	// +required
	// +kubebuilder:validation:Minimum=0
	Kros int32 `json:"kros"`

	// Ready is how many of those have phase Ready for their current spec
	// (status.observedGeneration equals metadata.generation).
	// +required
	// +kubebuilder:validation:Minimum=0
	Ready int32 `json:"ready"`
}

// ProviderConfig is the platform's configuration of the kro service provider. The
// provider reads the one named after itself (--provider-name, "kro" by default).
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster
// +kubebuilder:metadata:labels="openmcp.cloud/cluster=platform"
// +kubebuilder:printcolumn:name="Versions",type=string,JSONPath=`.spec.versions[*].version`
// +kubebuilder:printcolumn:name="Poll",type=string,JSONPath=`.spec.pollInterval`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Kros",type=integer,JSONPath=`.status.kros`
// +kubebuilder:printcolumn:name="Unknown Version",type=integer,JSONPath=`.status.unknownVersionKros`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ProviderConfig struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec ProviderConfigSpec `json:"spec"`
	// +optional
	Status ProviderConfigStatus `json:"status,omitempty"`
}

// ProviderConfigList is a list of ProviderConfig objects.
//
// +kubebuilder:object:root=true
type ProviderConfigList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ProviderConfig `json:"items"`
}

package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// KroSpec is what a tenant asks for: one kro version on their ControlPlane.
type KroSpec struct {
	// Version is the kro version to install. It must be one of the versions the
	// platform offers in its ProviderConfig (spec.versions[].version).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="self.matches('^[A-Za-z0-9][A-Za-z0-9._+-]*$')",message="version must start with a letter or digit and contain only letters, digits, '.', '_', '+' and '-'"
	Version string `json:"version"`
}

// ManagedResource is an object the provider manages for a Kro, with its own readiness.
type ManagedResource struct {
	// Cluster says where the object lives: platform, controlplane, or workload (the
	// workload cluster kro runs on, for a version placed on one).
	// +required
	// +kubebuilder:validation:Enum=platform;controlplane;workload
	Cluster string `json:"cluster"`
	// APIVersion of the object.
	// +required
	// +kubebuilder:validation:MaxLength=128
	APIVersion string `json:"apiVersion"`
	// Kind of the object.
	// +required
	// +kubebuilder:validation:MaxLength=64
	Kind string `json:"kind"`
	// Namespace of the object.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace,omitempty"`
	// Name of the object.
	// +required
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// Ready mirrors the object's own Ready condition: True, False or Unknown.
	// +optional
	// +kubebuilder:validation:Enum=True;False;Unknown
	Ready metav1.ConditionStatus `json:"ready,omitempty"`
	// Message is the object's own Ready message, shortened.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Message string `json:"message,omitempty"`
}

// ResourceGraphDefinitionSummary tells tenants how the RGDs on their ControlPlane are doing.
// It is removed while the provider cannot read the ControlPlane's RGDs.
type ResourceGraphDefinitionSummary struct {
	// ObservedTime is when the provider observed these figures. It stays while they stay
	// the same (an idle reconcile rewrites nothing); figures kept across a brief gap (a
	// restart of the provider, say) keep their older time.
	// +required
	ObservedTime metav1.Time `json:"observedTime"`
	// Total is the number of ResourceGraphDefinitions on the ControlPlane.
	Total int32 `json:"total"`
	// Ready is the number of those whose Ready condition is True.
	Ready int32 `json:"ready"`
	// NotReady lists RGDs that are not Ready, at most 10, sorted by name.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=10
	NotReady []ResourceGraphDefinitionState `json:"notReady,omitempty"`
}

// ResourceGraphDefinitionState is one RGD that is not Ready, and why.
type ResourceGraphDefinitionState struct {
	// Name of the ResourceGraphDefinition (cluster-scoped).
	// +required
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// Reason from the RGD's Ready condition.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	Reason string `json:"reason,omitempty"`
	// Message from the RGD's Ready condition, shortened.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Message string `json:"message,omitempty"`
}

// KroStatus is what the provider observed for a Kro.
type KroStatus struct {
	CommonStatus `json:",inline"`

	// ChartVersion is the chart version the requested version resolved to.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	ChartVersion string `json:"chartVersion,omitempty"`

	// Placement records where the provider placed kro for this Kro: ControlPlane or
	// WorkloadCluster. While the Kro's HelmRelease exists, it is where that HelmRelease
	// installs kro; otherwise the side last recorded until the provider has removed what
	// it made there, and only then the placement of the Kro's version. A move and a
	// deletion clean up the side it names.
	// +optional
	Placement Placement `json:"placement,omitempty"`

	// ManagedResources lists what the provider created for this Kro and how each is doing.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	ManagedResources []ManagedResource `json:"managedResources,omitempty"`

	// ResourceGraphDefinitions summarises the RGDs on the ControlPlane.
	// +optional
	ResourceGraphDefinitions *ResourceGraphDefinitionSummary `json:"resourceGraphDefinitions,omitempty"`

	// AccessMissingSince is when the provider first found no access to the ControlPlane
	// (standalone: no kubeconfig secret in the tenant namespace), while that lasts. A
	// deletion counts the ControlPlane as gone, and drops kro without uninstalling it,
	// once the access has been missing for the provider's grace period.
	// +optional
	AccessMissingSince *metav1.Time `json:"accessMissingSince,omitempty"`

	// ControlPlaneUnreachableSince is when a deletion, with kro uninstalled and the
	// provider's objects still to be removed from the ControlPlane, first found the
	// ControlPlane's access there but not working (it does not answer, its kubeconfig is
	// unusable, or its access is not granted), while that lasts. The deletion waits for
	// the provider's grace period from then; after it, it names in an event what it
	// leaves on the ControlPlane, and finishes.
	// +optional
	ControlPlaneUnreachableSince *metav1.Time `json:"controlPlaneUnreachableSince,omitempty"`

	// Revision names the ControllerRevision of the version's artifacts that kro was last
	// installed with and became Ready on. Under a ProviderConfig's rollout policy a Kro
	// keeps it until the rollout admits it to a newer one.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Revision string `json:"revision,omitempty"`

	// RolloutHealth is what a rollout's health gate reads of kro on the ControlPlane: the
	// readiness of the instances of the kinds kro generated and of kro's Deployment. The
	// provider reads it only while a rollout updates the Kro; otherwise it is absent.
	// +optional
	RolloutHealth *RolloutHealth `json:"rolloutHealth,omitempty"`
}

// InstanceCounts counts the instances of the kinds kro generated on a ControlPlane.
type InstanceCounts struct {
	// Total is the number of instances.
	Total int32 `json:"total"`
	// Ready is the number of those whose Ready condition is True.
	Ready int32 `json:"ready"`
}

// RolloutHealth is kro's health on the ControlPlane while a rollout updates the Kro.
type RolloutHealth struct {
	// Revision is the revision the Kro was being installed with when the provider looked.
	// +required
	// +kubebuilder:validation:MaxLength=253
	Revision string `json:"revision"`
	// Instances counts the instances of the kinds kro generated that were created no
	// later than the Kro's admission to the revision: those the rollout's gate judges.
	// +required
	Instances InstanceCounts `json:"instances"`
	// NewInstances counts the instances created after the Kro's admission: a tenant's
	// new instances, which may not have had the time to become Ready, are not judged.
	// +optional
	NewInstances *InstanceCounts `json:"newInstances,omitempty"`
	// NotReady lists instances counted in Instances that are not Ready, at most 5.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=5
	NotReady []InstanceState `json:"notReady,omitempty"`
	// DeploymentAvailable says that kro's Deployment in kro-system has finished its
	// rollout: every replica updated to its current spec and available.
	DeploymentAvailable bool `json:"deploymentAvailable"`
	// Deployment says how kro's Deployment is doing.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Deployment string `json:"deployment,omitempty"`
}

// InstanceState is one instance that is not Ready, and why.
type InstanceState struct {
	// Kind of the instance.
	// +required
	// +kubebuilder:validation:MaxLength=63
	Kind string `json:"kind"`
	// Namespace of the instance; empty for a cluster-scoped one.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace,omitempty"`
	// Name of the instance.
	// +required
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// Reason from the instance's Ready condition, or why there is none.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	Reason string `json:"reason,omitempty"`
}

// Kro asks for kro to be installed on the ControlPlane of the same name and namespace.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,path=kroes,singular=kro
// +kubebuilder:metadata:labels="openmcp.cloud/cluster=onboarding"
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.spec.version`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="RGDs",type=integer,JSONPath=`.status.resourceGraphDefinitions.total`
// +kubebuilder:printcolumn:name="RGDs Ready",type=integer,JSONPath=`.status.resourceGraphDefinitions.ready`
// +kubebuilder:printcolumn:name="Placement",type=string,JSONPath=`.status.placement`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Kro struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec KroSpec `json:"spec"`
	// +optional
	Status KroStatus `json:"status,omitempty"`
}

// KroList is a list of Kro objects.
//
// +kubebuilder:object:root=true
type KroList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Kro `json:"items"`
}

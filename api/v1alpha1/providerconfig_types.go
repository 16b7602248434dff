package v1alpha1

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
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

	// FluxShards are the keys of Flux's controller shards that install kro for the Kros.
	// Each Kro's OCIRepository and HelmRelease carry the label sharding.fluxcd.io/key
	// with one of these keys, chosen by a stable hash of its ControlPlane (rendezvous
	// hashing): adding or removing a key moves only the Kros whose key changes, and
	// Flux's shard controllers take them over without reinstalling kro. Run a
	// source-controller and helm-controller pair per key, each with
	// --watch-label-selector=sharding.fluxcd.io/key=<key>, and the unsharded controllers
	// with --watch-label-selector='!sharding.fluxcd.io/key'. Empty: no label, every
	// Kro on the unsharded controllers.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:Pattern=`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`
	FluxShards []string `json:"fluxShards,omitempty"`

	// Rollout, when set, rolls a change of a version's artifacts (chart URL, chart
	// version, chart pull secret, helmValues) out to the Kros on that version a few at a
	// time, checking each before the next, and pauses when too many fail. Without it a
	// change reaches every Kro on the version at once. A tenant's own change of
	// Kro.spec.version is never held back.
	// +optional
	Rollout *RolloutPolicy `json:"rollout,omitempty"`
}

// RolloutPolicy says how a change of a version's artifacts reaches its Kros.
type RolloutPolicy struct {
	// MaxUnavailable is how many Kros of a version may be unavailable at once while it
	// updates, counting those that were unavailable before: a number, or a percentage of
	// the Kros on the version (rounded down, at least 1). Default 1.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 1 : self.matches('^[1-9][0-9]?%$|^100%$')",message="maxUnavailable must be at least 1, or a percentage from 1% to 100%"
	MaxUnavailable *intstr.IntOrString `json:"maxUnavailable,omitempty"`

	// Canary selects the Kros that update first by the labels of their Namespace on the
	// onboarding cluster, which the platform team sets and tenants cannot (under openmcp,
	// core.openmcp.cloud/project and core.openmcp.cloud/workspace name a Kro's project and
	// workspace). A Kro's own labels are not looked at: its tenant writes them, and could
	// make itself a canary or leave the canaries. The other Kros on the version wait until
	// every canary is updated and healthy.
	// +optional
	Canary *metav1.LabelSelector `json:"canary,omitempty"`

	// FailureThreshold is how many Kros of a version may fail to become healthy with the
	// new artifacts before the rollout of that version pauses. Default 1: the first
	// failure pauses.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	FailureThreshold *int32 `json:"failureThreshold,omitempty"`

	// HealthTimeout is how long an updating Kro has to become healthy before it counts as
	// failed: its HelmRelease Ready with the new artifacts (Flux waits for kro's
	// Deployment to be available) and as many ResourceGraphDefinitions Ready as before.
	// Between 30s and 24h; default 10m.
	// +optional
	// +kubebuilder:default="10m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('30s') && duration(self) <= duration('24h')",message="healthTimeout must be between 30s and 24h"
	HealthTimeout *metav1.Duration `json:"healthTimeout,omitempty"`

	// Plan, when true, holds every change of a version's artifacts as a plan: nobody is
	// admitted, and the version's status shows the Kros it would reach in admission
	// order, their ResourceGraphDefinitions, and what changes between the revision they
	// run and the new one (status.versions[].plan). Setting it to false, or removing it,
	// approves the plan: the rollout starts in the planned order. Named plan, like
	// terraform plan, rather than approve or dryRun: true means "show me first", and
	// clearing it is the approval; a flag that must be set to go ahead would stop every
	// rollout of a policy that forgot it.
	// +optional
	Plan bool `json:"plan,omitempty"`
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

	// Placement is where kro's controller runs: ControlPlane (the default) installs the
	// whole chart into kro-system on the tenant's ControlPlane; WorkloadCluster runs kro
	// in a namespace of its own per tenant on a workload cluster, reaching the ControlPlane
	// with a credential of its own, and puts only kro's CRDs and RBAC on the ControlPlane.
	// Changing it moves the version's Kros under spec.rollout, like any change of the
	// artifacts.
	// +optional
	// +kubebuilder:default=ControlPlane
	Placement Placement `json:"placement,omitempty"`

	// HelmValues are passed to the chart as they are. Secrets named under
	// imagePullSecrets[].name are copied from the provider's namespace to where kro runs:
	// kro-system on the ControlPlane, or the tenant's namespace on the workload cluster.
	// +optional
	// +kubebuilder:validation:Type=object
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:pruning:PreserveUnknownFields
	HelmValues *apiextensionsv1.JSON `json:"helmValues,omitempty"`
}

// Placement is where kro's controller runs.
// +kubebuilder:validation:Enum=ControlPlane;WorkloadCluster
type Placement string

const (
	// PlacementControlPlane runs kro inside the tenant's ControlPlane, in kro-system.
	PlacementControlPlane Placement = "ControlPlane"
	// PlacementWorkloadCluster runs kro on a workload cluster, one namespace per tenant.
	PlacementWorkloadCluster Placement = "WorkloadCluster"
)

// PlacementOf is a version's placement, ControlPlane when it is not set.
func PlacementOf(v *KroVersion) Placement {
	if v == nil || v.Placement == "" {
		return PlacementControlPlane
	}
	return v.Placement
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

	// FluxShards counts, for each key of spec.fluxShards in its order, the Kros whose
	// Flux objects that shard's controllers reconcile.
	// +optional
	// +listType=map
	// +listMapKey=key
	// +kubebuilder:validation:MaxItems=64
	FluxShards []FluxShardStatus `json:"fluxShards,omitempty"`
}

// FluxShardStatus counts the Kros on one Flux shard.
type FluxShardStatus struct {
	// Key is a spec.fluxShards[] key.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Key string `json:"key"`

	// Kros is how many Kros that shard installs kro for.
	// +required
	// +kubebuilder:validation:Minimum=0
	Kros int32 `json:"kros"`
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

	// Revision names the ControllerRevision, in the provider's namespace, that holds the
	// version's artifacts as spec.versions has them now.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Revision string `json:"revision,omitempty"`

	// Updated is how many Kros on the version run Revision and are Ready.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Updated int32 `json:"updated"`

	// Rollout is where the rollout of Revision stands: Complete, Progressing, Paused or
	// Planned.
	// Without spec.rollout it is Complete once every Kro runs Revision.
	// +optional
	Rollout RolloutPhase `json:"rollout,omitempty"`

	// Message says why a rollout is paused, or what it waits for. It names at most a few
	// Kros per clause, long names shortened in the middle, and is cut at 1024 bytes.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`

	// Updating are the Kros admitted to Revision that are not yet healthy, at most
	// spec.rollout.maxUnavailable of them (Kros admitted while unavailable besides, which
	// cost no availability), and never more than 1000: the rollout admits no more.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=1000
	Updating []RolloutMember `json:"updating,omitempty"`

	// Failed are the Kros that did not become healthy with Revision in time. They keep
	// Revision; fixing or reverting the version's artifacts gives them a new one first.
	// At most 1000, in name order; FailedMore counts the rest.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=1000
	Failed []RolloutMember `json:"failed,omitempty"`

	// FailedMore is how many more Kros failed with Revision than Failed lists. They count
	// towards spec.rollout.failureThreshold like those listed.
	// +optional
	// +kubebuilder:validation:Minimum=0
	FailedMore int32 `json:"failedMore,omitempty"`

	// Plan is the rollout of Revision as spec.rollout.plan holds it, before anything
	// moves; once approved, the plan the rollout follows, until no Kro waits for Revision.
	// It is computed from the cluster (the Kros, their HelmReleases' records and the
	// ControllerRevisions), so that a lost status gives the same plan back.
	// +optional
	Plan *PlannedRollout `json:"plan,omitempty"`
}

// PlannedRollout is what a rollout of a version's revision would do: the Kros it would
// reach, in the order it would admit them, and what changes for them.
type PlannedRollout struct {
	// Revision is the revision the plan rolls out; a plan approved for another revision
	// than the version's current one is void.
	// +required
	// +kubebuilder:validation:MaxLength=253
	Revision string `json:"revision"`

	// From is the revision most of the planned Kros run now, which Changes compares with.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	From string `json:"from,omitempty"`

	// Changes summarises what changes from From to Revision: the chart's URL, version and
	// pull secret, and the paths of the helmValues' leaves that change (~), appear (+) or
	// go (-). It names paths only, never values, which may be sensitive.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Changes string `json:"changes,omitempty"`

	// Summary is the plan on one line: the version, how many Kros and
	// ResourceGraphDefinitions it reaches, and the changes.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Summary string `json:"summary,omitempty"`

	// Kros are the Kros the rollout would reach, in the order it would admit them:
	// canaries first, then the others; within each, available Kros before unavailable
	// ones, each in name order. At most 100; More counts the rest.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=100
	Kros []PlannedKro `json:"kros,omitempty"`

	// More is how many more Kros the plan reaches than Kros lists.
	// +optional
	// +kubebuilder:validation:Minimum=0
	More int32 `json:"more,omitempty"`

	// RGDs is how many ResourceGraphDefinitions the planned Kros report, all of them,
	// listed or not; Kros that report none count none.
	// +optional
	// +kubebuilder:validation:Minimum=0
	RGDs int32 `json:"rgds,omitempty"`
}

// PlannedKro is one Kro a planned rollout would reach, with its blast radius as the Kro's
// status reports it.
type PlannedKro struct {
	// Kro is the Kro's "namespace/name" on the onboarding cluster.
	// +required
	// +kubebuilder:validation:MaxLength=317
	Kro string `json:"kro"`

	// Canary says that the Kro's Namespace matches spec.rollout.canary.
	// +optional
	Canary bool `json:"canary,omitempty"`

	// Unavailable says that the Kro is not Ready now: it would be updated after the
	// available ones.
	// +optional
	Unavailable bool `json:"unavailable,omitempty"`

	// RGDs is how many ResourceGraphDefinitions the Kro's status reports; unset while it
	// reports none (its ControlPlane cannot be read).
	// +optional
	// +kubebuilder:validation:Minimum=0
	RGDs *int32 `json:"rgds,omitempty"`

	// RGDsReady is how many of those are Ready.
	// +optional
	// +kubebuilder:validation:Minimum=0
	RGDsReady *int32 `json:"rgdsReady,omitempty"`
}

// RolloutPhase is where a version's rollout stands.
// +kubebuilder:validation:Enum=Complete;Progressing;Paused;Planned
type RolloutPhase string

const (
	// RolloutComplete means that every Kro on the version has its current revision (Ready
	// with it, or its HelmRelease carries it) and none is updating or failed; the message
	// names those that are not Ready with it.
	RolloutComplete RolloutPhase = "Complete"
	// RolloutProgressing means that Kros are being updated, a few at a time.
	RolloutProgressing RolloutPhase = "Progressing"
	// RolloutPaused means that too many Kros failed, or the ProviderConfig carries the
	// AnnotationRolloutPaused annotation; Kros not yet updated stay as they are.
	RolloutPaused RolloutPhase = "Paused"
	// RolloutPlanned means that spec.rollout.plan holds the rollout: the version's status
	// shows the plan, and nobody is admitted until it is approved.
	RolloutPlanned RolloutPhase = "Planned"
)

// RolloutMember is one Kro in a rollout.
type RolloutMember struct {
	// Kro is the Kro's "namespace/name" on the onboarding cluster.
	// +required
	// +kubebuilder:validation:MaxLength=317
	Kro string `json:"kro"`

	// Since is when the Kro was admitted to the revision.
	// +required
	Since metav1.Time `json:"since"`

	// RGDsReady is how many ResourceGraphDefinitions the Kro reported Ready when it was
	// admitted; it is healthy again only with at least as many.
	// +optional
	// +kubebuilder:validation:Minimum=0
	RGDsReady int32 `json:"rgdsReady,omitempty"`

	// Instances is how many of the instances of the kinds kro generated on the
	// ControlPlane, of those created no later than Since, were Ready right before the Kro
	// got the revision; once it runs the revision, more of those instances not Ready than
	// then fails it. Instances created after Since are not judged. Absent until the
	// provider has looked.
	// +optional
	Instances *InstanceCounts `json:"instances,omitempty"`

	// Unavailable says that the Kro was not Ready when it was admitted (its ControlPlane
	// stopped, its release failing): it is updated last, counts against maxUnavailable
	// as it did before, and is never a failure of the revision.
	// +optional
	Unavailable bool `json:"unavailable,omitempty"`

	// Reason says why a Kro failed.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Reason string `json:"reason,omitempty"`
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
// +kubebuilder:printcolumn:name="Rollout",type=string,JSONPath=`.status.versions[*].rollout`
// +kubebuilder:printcolumn:name="Unknown Version",type=integer,JSONPath=`.status.unknownVersionKros`,priority=1
// +kubebuilder:printcolumn:name="Plan",type=string,JSONPath=`.status.versions[*].plan.summary`,priority=1
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

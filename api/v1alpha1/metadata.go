package v1alpha1

// Labels, annotations and the finalizer the provider puts on what it creates, so that it
// can find its objects again and map them back to their Kro. docs/api.md lists them.
const (
	// LabelPrefix is the key prefix of every label and annotation the provider owns.
	LabelPrefix = "kro.services.open-control-plane.io/"
	// LabelKroName carries the Kro's name (shortened with a hash when it is no valid label value).
	LabelKroName = LabelPrefix + "kro-name"
	// LabelKroNamespace carries the Kro's namespace on the onboarding cluster.
	LabelKroNamespace = LabelPrefix + "kro-namespace"
	// LabelProvider carries the provider's name.
	LabelProvider = LabelPrefix + "provider"
	// LabelRole says what a copied secret is for (RoleChartPullSecret, RoleImagePullSecret),
	// marks kro's own credential (RoleKroCredential), or marks a replica's membership
	// Lease (RoleShardMember).
	LabelRole = LabelPrefix + "role"
	// AnnotationKro is the Kro's exact "namespace/name", whatever its length.
	AnnotationKro = LabelPrefix + "kro"
	// AnnotationRolloutPaused on the ProviderConfig, "true", pauses every version's
	// rollout by hand: no Kro is admitted to a new revision until it is removed.
	AnnotationRolloutPaused = LabelPrefix + "rollout-paused"
	// AnnotationRevision on a HelmRelease names the revision of the version's artifacts
	// it carries (its ControllerRevision). With the two annotations below it is the
	// durable record of a rollout: the plan is rebuilt from it when the ProviderConfig's
	// status is lost.
	AnnotationRevision = LabelPrefix + "revision"
	// AnnotationRolloutAdmission on a HelmRelease records, as JSON, the rollout's
	// admission of the Kro to the revision: since, rgdsReady, unavailable.
	AnnotationRolloutAdmission = LabelPrefix + "rollout-admission"
	// AnnotationRolloutFailed on a HelmRelease says why the rollout counts the Kro as
	// failed with the revision.
	AnnotationRolloutFailed = LabelPrefix + "rollout-failed"
	// LabelVersion on a ControllerRevision carries the version (its name, shortened with
	// a hash when it is no valid label value).
	LabelVersion = LabelPrefix + "version"
	// AnnotationEnvironment on the Kro CRD (kroes.kro.services.open-control-plane.io) of
	// the onboarding cluster names the one installation that serves that onboarding
	// cluster (environment, provider name, platform cluster and namespace: clusters.Installation):
	// `init` and `run` claim it and refuse to act beside another installation.
	AnnotationEnvironment = LabelPrefix + "environment"
	// AnnotationSourceSecret names the secret in the provider's namespace a copy was made from.
	AnnotationSourceSecret = LabelPrefix + "source-secret"
	// AnnotationTokenIssued on kro's ControlPlane access secret on a workload cluster
	// (RoleKroCredential) is when the provider requested the token it holds (RFC 3339).
	// With AnnotationTokenExpires it tells when the token is due for rotation, without
	// decoding the token or asking the ControlPlane.
	AnnotationTokenIssued = LabelPrefix + "token-issued"
	// AnnotationTokenExpires on the same secret is when its token expires (RFC 3339), as
	// the ControlPlane's TokenRequest answered: the API server may shorten or lengthen
	// the lifetime the provider asked for.
	AnnotationTokenExpires = LabelPrefix + "token-expires"
	// AnnotationGrantVersion on the same secret, under openmcp, is the resourceVersion of
	// the access secret openmcp wrote for kro's AccessRequest, which the credential was
	// copied from: a rotation by openmcp changes it, and the copy is made again.
	AnnotationGrantVersion = LabelPrefix + "grant-version"
	// LabelFluxShard is Flux's sharding label: the key of the Flux controller shard that
	// reconciles an object (spec.fluxShards).
	LabelFluxShard = "sharding.fluxcd.io/key"
	// LabelManagedBy marks everything the provider creates.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	// ManagedByValue is the value of LabelManagedBy.
	ManagedByValue = "service-provider-kro"
	// LabelControlPlaneKubeconfig marks the secret (data key "kubeconfig") in a tenant
	// namespace that holds the ControlPlane's kubeconfig in standalone mode.
	LabelControlPlaneKubeconfig = LabelPrefix + "controlplane-kubeconfig"
	// LabelWorkloadClusterKubeconfig marks the secret (data key "kubeconfig") in a tenant
	// namespace that holds the kubeconfig of the workload cluster where kro runs for the
	// tenant's versions placed on a WorkloadCluster, in standalone mode.
	LabelWorkloadClusterKubeconfig = LabelPrefix + "workload-cluster-kubeconfig"

	// Finalizer keeps a Kro until everything the provider created for it is gone.
	Finalizer = LabelPrefix + "finalizer"

	// RoleChartPullSecret marks the copy of a chart pull secret in a tenant namespace.
	RoleChartPullSecret = "chart-pull-secret"
	// RoleImagePullSecret marks the copy of an image pull secret in kro-system on a ControlPlane.
	RoleImagePullSecret = "image-pull-secret"
	// RoleKroCredential marks kro's own identity for a ControlPlane: its ServiceAccount
	// in kro-system on the ControlPlane and the secret with its token and kubeconfig in
	// the tenant's namespace on a workload cluster (WorkloadCluster placement).
	RoleKroCredential = "kro-credential"
	// RoleKroParts marks what the provider puts on a ControlPlane of kro's chart when kro
	// runs on a workload cluster: kro's CRDs and its RBAC.
	RoleKroParts = "kro-parts"
	// RoleShardMember marks the Lease of a replica that takes its share of the
	// ControlPlanes (run --sharding), in the provider's namespace on the platform cluster.
	RoleShardMember = "shard-member"
	// RoleOnboardingToken marks a Secret in the provider's namespace on the onboarding
	// cluster that a token written by `service-provider-kro onboarding-kubeconfig` is
	// bound to: deleting the Secret revokes the token. AnnotationTokenIssued and
	// AnnotationTokenExpires say when the token was issued and when it expires.
	RoleOnboardingToken = "onboarding-token"
)

package v1alpha1

// Condition types of a Kro besides ConditionReady. Each reconcile sets every one of them
// but the occasional ones, which are present only while their situation lasts: a step
// that did not run leaves its condition Unknown with ReasonNotChecked and a message that
// says why. docs/api.md lists them with their reasons.
const (
	// ConditionVersionResolved: the requested version is on offer in the ProviderConfig.
	ConditionVersionResolved = "VersionResolved"
	// ConditionPullSecretsReady: the chart and image pull secrets exist and are copied.
	ConditionPullSecretsReady = "PullSecretsReady"
	// ConditionOCIRepositoryReady mirrors the OCIRepository's Ready condition.
	ConditionOCIRepositoryReady = "OCIRepositoryReady"
	// ConditionControlPlaneAccessReady: the ControlPlane can be reached.
	ConditionControlPlaneAccessReady = "ControlPlaneAccessReady"
	// ConditionWorkloadClusterReady, only for a version placed on a WorkloadCluster: the
	// workload cluster can be reached. It used to report kro's CRDs, RBAC and credential
	// on the ControlPlane too; these have conditions of their own now, and
	// WorkloadClusterReady still turns False with their reason and message when one of
	// them does (see LegacyConditionOf).
	ConditionWorkloadClusterReady = "WorkloadClusterReady"
	// ConditionControlPlanePartsReady, only for a version placed on a WorkloadCluster:
	// kro's CRDs, RBAC and service account from the chart are applied to the ControlPlane.
	ConditionControlPlanePartsReady = "ControlPlanePartsReady"
	// ConditionKroCredentialReady, only for a version placed on a WorkloadCluster: kro's
	// own credential for the ControlPlane is current in the tenant's namespace on the
	// workload cluster.
	ConditionKroCredentialReady = "KroCredentialReady"
	// ConditionHelmReleaseReady: the HelmRelease is Ready with the requested chart installed.
	ConditionHelmReleaseReady = "HelmReleaseReady"
	// ConditionKroAvailable: kro's own Deployment, the one its Helm release made where kro
	// runs, exists with at least one replica available. It is read from a watch, so a
	// deleted or scaled-down kro shows within seconds, while the HelmRelease may still
	// say Ready until Flux's drift detection repairs it.
	ConditionKroAvailable = "KroAvailable"
	// ConditionResourceGraphDefinitionsReady sums up the tenant's RGDs on the ControlPlane.
	// It reports the tenant's own definitions, not kro's installation, so it does not take
	// part in Ready.
	ConditionResourceGraphDefinitionsReady = "ResourceGraphDefinitionsReady"
	// ConditionDeletionBlocked is True while a deletion waits: for the tenant's resources
	// to go, for the ControlPlane to answer, or for its missing access to count as gone.
	ConditionDeletionBlocked = "DeletionBlocked"
	// ConditionHandOver is present only while the provider takes over an installation of
	// kro that the earlier provider (openmcp-project/service-provider-kro up to v1.3.0)
	// made for this Kro: True with ReasonHandingOver while the earlier HelmRelease still
	// exists, so that one glance tells why two providers' objects are in the tenant
	// namespace. It does not take part in Ready.
	ConditionHandOver = "HandOver"
	// ConditionPlacementMoved is present only while kro moves between the ControlPlane
	// and a workload cluster: False with ReasonMovingPlacement until Flux has uninstalled
	// kro from the side it leaves and the provider has cleaned that side up.
	ConditionPlacementMoved = "PlacementMoved"
	// ConditionEarlierReleaseSuspended is present only while the earlier provider's
	// HelmRelease exists for this Kro: True once it is suspended, so that it no longer
	// acts on the ControlPlane.
	ConditionEarlierReleaseSuspended = "EarlierReleaseSuspended"
	// ConditionRolloutHealthObserved is present only while a rollout gates the Kro: True
	// when kro's health on the ControlPlane was read into status.rolloutHealth.
	ConditionRolloutHealthObserved = "RolloutHealthObserved"
)

// LegacyConditionOf names, for a condition that a step got of its own, the condition
// that reported that step before ("" for any other). A step's condition that is not True
// sets the legacy condition to the same status, reason and message, so that clients
// reading only the older conditions (and Ready) see what they saw before.
func LegacyConditionOf(condType string) string {
	switch condType {
	case ConditionControlPlanePartsReady, ConditionKroCredentialReady:
		return ConditionWorkloadClusterReady
	case ConditionRolloutHealthObserved:
		return ConditionControlPlaneAccessReady
	case ConditionPlacementMoved, ConditionEarlierReleaseSuspended:
		return ConditionHelmReleaseReady
	}
	return ""
}

// The ProviderConfig has one condition, ConditionReady: True (ReasonReconcileSuccess)
// when every version's pull secrets exist in the provider's namespace with type
// kubernetes.io/dockerconfigjson; otherwise False with the reason of the first problem,
// ReasonPullSecretMissing, ReasonPullSecretWrongType or ReasonInvalidProviderConfig (a
// version's helmValues.imagePullSecrets cannot be read), the message naming every
// version and secret concerned; ReasonTerminating while it is being deleted. The API
// server already rejects duplicate versions (spec.versions is a list map), so there is
// no separate condition for the versions' validity. docs/api.md lists them.

// Reasons of a Kro's conditions that name one specific situation, so that alerts and
// clients can act on them without parsing messages. Ready repeats ReasonReconcileError
// (the seed's contract) for a step that failed on bad input or an error, and the
// step's own condition carries the specific reason.
const (
	// ReasonNotChecked: the condition's step did not run in the last reconcile; the
	// message says why (an earlier step waits, or the Kro is being deleted).
	ReasonNotChecked = "NotChecked"

	// ReasonProviderConfigMissing: the ProviderConfig of the provider's name does not
	// exist or is being deleted.
	ReasonProviderConfigMissing = "ProviderConfigMissing"
	// ReasonVersionNotOffered: spec.version is not among the ProviderConfig's versions;
	// the message lists those on offer.
	ReasonVersionNotOffered = "VersionNotOffered"
	// ReasonInvalidProviderConfig: the version's entry in the ProviderConfig cannot be
	// used (its helmValues name image pull secrets in a form the provider cannot read).
	ReasonInvalidProviderConfig = "InvalidProviderConfig"

	// ReasonRolloutPending: VersionResolved is True, but the version's artifacts changed
	// and the ProviderConfig's rollout has not yet admitted this Kro: it keeps those of
	// status.revision.
	ReasonRolloutPending = "RolloutPending"

	// ReasonPullSecretMissing: a pull secret the version names does not exist in the
	// provider's namespace.
	ReasonPullSecretMissing = "PullSecretMissing"
	// ReasonPullSecretWrongType: a pull secret the version names is not of type
	// kubernetes.io/dockerconfigjson.
	ReasonPullSecretWrongType = "PullSecretWrongType"
	// ReasonOwnershipConflict: an object the provider would write (a pull secret copy)
	// already exists but was not created by the provider for this Kro. The provider
	// neither takes it over nor deletes it; the message names it and what to do.
	ReasonOwnershipConflict = "OwnershipConflict"

	// ReasonSourceNotReady: Flux's OCIRepository is not Ready; the message is Flux's.
	ReasonSourceNotReady = "SourceNotReady"
	// ReasonReleaseFailed: Flux's HelmRelease is not Ready; the message is Flux's.
	ReasonReleaseFailed = "ReleaseFailed"
	// ReasonSuspended: the OCIRepository or the HelmRelease was suspended by someone else
	// (spec.suspend, e.g. `flux suspend`): Flux does not act on it, so the Kro's changes do
	// not reach the ControlPlane until it is resumed. The provider leaves the suspend in
	// place; the message names the object, who suspended it and how to resume it.
	ReasonSuspended = "Suspended"
	// ReasonUpgradeInProgress: the HelmRelease has not yet installed the chart version the
	// Kro asks for; another version still runs.
	ReasonUpgradeInProgress = "UpgradeInProgress"
	// ReasonKroUnavailable: kro's Deployment is missing, scaled to zero or has no replica
	// available (KroAvailable, Ready).
	ReasonKroUnavailable = "KroUnavailable"

	// ReasonControlPlaneAccessMissing: no access to the ControlPlane exists (standalone:
	// no kubeconfig secret in the tenant namespace). During a deletion it becomes
	// ReasonControlPlaneGone once it has lasted the grace period.
	ReasonControlPlaneAccessMissing = "ControlPlaneAccessMissing"
	// ReasonKubeconfigInvalid: the ControlPlane's kubeconfig cannot be used.
	ReasonKubeconfigInvalid = "KubeconfigInvalid"
	// ReasonControlPlaneUnreachable: the ControlPlane does not answer with its kubeconfig.
	ReasonControlPlaneUnreachable = "ControlPlaneUnreachable"
	// ReasonWorkloadClusterMissing: the version is placed on a WorkloadCluster, and there
	// is none for the ControlPlane (standalone: no labelled kubeconfig secret).
	ReasonWorkloadClusterMissing = "WorkloadClusterMissing"
	// ReasonWorkloadClusterUnreachable: the workload cluster does not answer.
	ReasonWorkloadClusterUnreachable = "WorkloadClusterUnreachable"
	// ReasonCredentialRotated: the Normal event when the provider issued kro's credential
	// for the ControlPlane (WorkloadCluster placement), the first time or renewed.
	ReasonCredentialRotated = "CredentialRotated"
	// ReasonMovingPlacement: the version places kro elsewhere than where it runs, and kro
	// is being moved: uninstalled from the old side before it is installed on the new
	// (HelmReleaseReady; a Normal event when the move begins).
	ReasonMovingPlacement = "MovingPlacement"
	// ReasonFluxShardMoveWaiting: the Normal event when a Kro's HelmRelease waits to move
	// to its new Flux shard, because the old shard's helm-controller has a release
	// operation in flight (or the source's new shard has not handled it yet); the
	// HelmRelease's entry in status.managedResources says what it waits for.
	ReasonFluxShardMoveWaiting = "FluxShardMoveWaiting"
	// ReasonFluxReleaseForced: the Normal event when the provider asked helm-controller
	// for a forced upgrade of a HelmRelease it left reporting an action in flight, long
	// after the action's timeout, although the release is deployed with the Kro's chart
	// (fluxcd/helm-controller#1409).
	ReasonFluxReleaseForced = "FluxReleaseForced"
	// ReasonAccessDenied: openmcp denied the provider's AccessRequest for the ControlPlane.
	// During a deletion a denied request counts as access gone.
	ReasonAccessDenied = "AccessDenied"
	// ReasonControlPlaneGone: the ControlPlane is gone for good (under openmcp: its
	// ClusterRequest or Cluster is gone or being deleted, or access was denied;
	// standalone: its kubeconfig has been missing for the grace period). A deletion drops
	// kro without uninstalling it.
	ReasonControlPlaneGone = "ControlPlaneGone"
	// ReasonControlPlaneLeftovers: a deletion gave up waiting for a ControlPlane that
	// cannot be reached, with the provider's objects still on it (kro's ServiceAccount
	// and RBAC, image pull secret copies); the Warning event names them, to be removed
	// by hand.
	ReasonControlPlaneLeftovers = "ControlPlaneLeftovers"

	// ReasonResourceGraphDefinitionsNotReady: at least one RGD's Ready condition is not True.
	ReasonResourceGraphDefinitionsNotReady = "ResourceGraphDefinitionsNotReady"
	// ReasonUserResourcesPresent: ResourceGraphDefinitions still exist on the ControlPlane,
	// so the deletion waits.
	ReasonUserResourcesPresent = "UserResourcesPresent"
	// ReasonInstancesPresent: instances of CRDs that kro generated still exist on the
	// ControlPlane (their RGDs are gone), so the deletion waits: without kro they could
	// never finish deleting.
	ReasonInstancesPresent = "InstancesPresent"
	// ReasonUninstalling: Flux is uninstalling kro; nothing blocks the deletion any more.
	ReasonUninstalling = "Uninstalling"
	// ReasonReleasingAccess: kro is uninstalled and the provider's objects are removed;
	// openmcp is revoking the access it granted the provider (its requests are withdrawn),
	// and the Kro goes once that is done. Nothing is asked for again meanwhile.
	ReasonReleasingAccess = "ReleasingAccess"
	// ReasonOperationIgnored: the Kro is being deleted but carries
	// openmcp.cloud/operation=ignore, so the deletion is paused.
	ReasonOperationIgnored = "OperationIgnored"
	// ReasonUninstallStuck: Flux began uninstalling kro (the HelmRelease is being
	// deleted) but cannot finish, because the ControlPlane does not answer or the
	// uninstall fails; DeletionBlocked is True with Flux's error and the time it began.
	ReasonUninstallStuck = "UninstallStuck"
	// ReasonHandingOver: the earlier provider's installation of kro is being taken over
	// (ConditionHandOver).
	ReasonHandingOver = "HandingOver"
	// ReasonHandOverComplete: the event when the earlier provider's objects are gone and
	// the provider's own HelmRelease drives kro alone.
	ReasonHandOverComplete = "HandOverComplete"
)

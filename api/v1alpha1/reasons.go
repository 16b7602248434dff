package v1alpha1

// Reasons of a Kro's conditions that name one specific situation, so that alerts and
// clients can act on them without parsing messages. docs/api.md lists where each appears.
const (
	// ReasonAccessDenied: openmcp denied the provider's AccessRequest for the ControlPlane.
	// During a deletion a denied request counts as access gone.
	ReasonAccessDenied = "AccessDenied"
	// ReasonUpgradeInProgress: the HelmRelease has not yet installed the chart version the
	// Kro asks for; another version still runs.
	ReasonUpgradeInProgress = "UpgradeInProgress"
	// ReasonOperationIgnored: the Kro is being deleted but carries
	// openmcp.cloud/operation=ignore, so the deletion is paused.
	ReasonOperationIgnored = "OperationIgnored"
	// ReasonOwnershipConflict: an object the provider would write (a pull secret copy)
	// already exists but was not created by the provider for this Kro. The provider
	// neither takes it over nor deletes it; the message names it and what to do.
	ReasonOwnershipConflict = "OwnershipConflict"
)

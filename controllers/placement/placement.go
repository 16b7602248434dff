// Package placement puts kro where its version places it (kro-system on the ControlPlane,
// or the tenant's namespace on a workload cluster), moves it between the two, and cleans up
// after it. Each step of the Kro reconcile is a type of its own, reporting under its own
// condition; New builds them together, as they call on each other.
package placement

import (
	"time"

	"github.com/openmcp-project/service-provider-kro/controllers/chartparts"
	"github.com/openmcp-project/service-provider-kro/controllers/pullsecrets"
	"github.com/openmcp-project/service-provider-kro/controllers/step"
)

// Steps are the placement's steps, and the clean-up they and the deletion share.
type Steps struct {
	// Move runs a move between the ControlPlane and a workload cluster (PlacementMoved).
	Move *Mover
	// Workload reaches the workload cluster and switches between them (WorkloadClusterReady).
	Workload *Workload
	// Parts puts kro's CRDs and RBAC on the ControlPlane (ControlPlanePartsReady).
	Parts *Parts
	// Credential keeps kro's own credential for the ControlPlane (KroCredentialReady).
	Credential *Credential
	// Cleanup removes what was made for a workload cluster, in a move or a deletion.
	Cleanup *Cleanup
}

// New builds the steps. Image pull secret copies are removed through secrets when kro
// leaves the ControlPlane; kro's own tokens live for tokenLifetime (0: the default).
func New(c step.Clients, secrets *pullsecrets.Copier, tokenLifetime time.Duration) *Steps {
	parts := &Parts{Clients: c}
	cleanup := &Cleanup{Clients: c, parts: parts}
	return &Steps{
		Move:       &Mover{Clients: c, secrets: secrets, cleanup: cleanup},
		Workload:   &Workload{Clients: c, cleanup: cleanup},
		Parts:      parts,
		Credential: &Credential{Clients: c, tokenLifetime: tokenLifetime, parts: parts},
		Cleanup:    cleanup,
	}
}

// Mover moves kro to the version's placement: Flux uninstalls it from the old side, then
// the old side is cleaned up (placement_move.go).
type Mover struct {
	step.Clients
	secrets *pullsecrets.Copier
	cleanup *Cleanup
}

// Workload reaches the workload cluster of a Kro placed on one, and leaves the one kro
// ran on when another is chosen (kro_workload.go, workload_switch.go).
type Workload struct {
	step.Clients
	cleanup *Cleanup
}

// Parts applies kro's CRDs, RBAC and service account from the chart to the ControlPlane
// of a Kro placed on a workload cluster (controlplane_parts.go).
type Parts struct {
	step.Clients
	// charts renders kro's chart, and applied remembers what was applied.
	charts  chartparts.Cache
	applied appliedParts
}

// Credential keeps kro's own credential for the ControlPlane on the workload cluster:
// issued by the provider, or copied from the access openmcp grants kro (kro_workload.go).
type Credential struct {
	step.Clients
	tokenLifetime time.Duration
	// parts is asked to apply again when openmcp's grant has to be requested anew.
	parts *Parts
}

// Cleanup removes what the provider made for kro on a workload cluster and, for it, on
// the ControlPlane: in a move, a switch of workload cluster, or a deletion
// (workload_cleanup.go).
type Cleanup struct {
	step.Clients
	// parts forgets what it applied, so that a later placement applies it again.
	parts *Parts
}

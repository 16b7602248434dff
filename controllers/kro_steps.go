package controllers

import (
	"sync"

	"github.com/openmcp-project/service-provider-kro/controllers/deletion"
	"github.com/openmcp-project/service-provider-kro/controllers/flux"
	"github.com/openmcp-project/service-provider-kro/controllers/handover"
	"github.com/openmcp-project/service-provider-kro/controllers/placement"
	"github.com/openmcp-project/service-provider-kro/controllers/pullsecrets"
	"github.com/openmcp-project/service-provider-kro/controllers/step"
	"github.com/openmcp-project/service-provider-kro/providers/sharding"
)

// kroWatches maps what changes to the Kros it concerns.
type kroWatches struct {
	step.Clients
	Shard *sharding.Membership
}

// kroSteps are the parts of the Kro reconcile.
type kroSteps struct {
	version   *versionResolver
	secrets   *pullsecrets.Copier
	flux      *flux.Applier
	placement *placement.Steps
	handOver  *handover.Taker
	deletion  *deletion.Remover
	watches   *kroWatches
}

// stepsOnce builds the parts once, from the reconciler's fields.
type stepsOnce struct {
	once  sync.Once
	steps *kroSteps
}

// steps are the parts of the reconcile, built from the reconciler's fields on first use.
func (r *KroReconciler) steps() *kroSteps {
	r.built.once.Do(func() {
		c := step.Clients{Onboarding: r.Onboarding, Platform: r.Platform, PlatformReader: r.PlatformReader, ControlPlanes: r.ControlPlanes,
			Recorder: r.Recorder, ProviderName: r.ProviderName, PodNamespace: r.PodNamespace, AccessMode: r.AccessMode}
		s := &kroSteps{
			version:  &versionResolver{Clients: c},
			secrets:  &pullsecrets.Copier{Clients: c},
			flux:     &flux.Applier{Clients: c},
			handOver: &handover.Taker{Clients: c, Earlier: r.Earlier},
			deletion: &deletion.Remover{Clients: c, AccessGracePeriod: r.AccessGracePeriod},
			watches:  &kroWatches{Clients: c, Shard: r.Shard},
		}
		s.placement = placement.New(c, s.secrets, r.KroTokenLifetime)
		s.deletion.HandOver, s.deletion.Placement, s.deletion.Secrets = s.handOver, s.placement, s.secrets
		r.built.steps = s
	})
	return r.built.steps
}

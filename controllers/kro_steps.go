package controllers

import (
	"sync"
	"time"

	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmcp-project/service-provider-kro/controllers/chartparts"
	"github.com/openmcp-project/service-provider-kro/controllers/reach"
	"github.com/openmcp-project/service-provider-kro/providers/sharding"
)

// kroClients are the clusters' clients and the provider's names, which every part of the
// Kro reconcile reads with.
type kroClients struct {
	Onboarding     client.Client
	Platform       client.Client
	PlatformReader client.Reader
	ControlPlanes  reach.ControlPlanes
	Recorder       events.EventRecorder
	ProviderName   string
	PodNamespace   string
	AccessMode     reach.AccessMode
}

// versionResolver resolves a Kro's version and the revision it installs.
type versionResolver struct{ kroClients }

// pullSecrets copies the chart's and the images' pull secrets to where they are used.
type pullSecrets struct {
	kroClients
	placement *placement
}

// fluxObjects applies the Kro's OCIRepository and HelmRelease and reads them back.
type fluxObjects struct {
	kroClients
	deletion *deletion
	secrets  *pullSecrets
}

// placement puts kro where its version places it, moves it, and cleans up after it.
type placement struct {
	kroClients
	deletion         *deletion
	secrets          *pullSecrets
	KroTokenLifetime time.Duration
	// charts renders kro's chart for the ControlPlanes of Kros on workload clusters, and
	// applied remembers what was applied there (controlplane_parts.go).
	charts  chartparts.Cache
	applied appliedParts
}

// handOver takes over what the earlier provider installed.
type handOver struct {
	kroClients
	Earlier client.Reader
}

// deletion removes kro and the provider's objects, once nothing holds the deletion up.
type deletion struct {
	kroClients
	handOver          *handOver
	placement         *placement
	secrets           *pullSecrets
	AccessGracePeriod time.Duration
}

// kroWatches maps what changes to the Kros it concerns.
type kroWatches struct {
	kroClients
	Shard *sharding.Membership
}

// kroSteps are the parts of the Kro reconcile.
type kroSteps struct {
	version   *versionResolver
	secrets   *pullSecrets
	flux      *fluxObjects
	placement *placement
	handOver  *handOver
	deletion  *deletion
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
		c := kroClients{Onboarding: r.Onboarding, Platform: r.Platform, PlatformReader: r.PlatformReader, ControlPlanes: r.ControlPlanes,
			Recorder: r.Recorder, ProviderName: r.ProviderName, PodNamespace: r.PodNamespace, AccessMode: r.AccessMode}
		s := &kroSteps{
			version:   &versionResolver{kroClients: c},
			secrets:   &pullSecrets{kroClients: c},
			flux:      &fluxObjects{kroClients: c},
			placement: &placement{kroClients: c, KroTokenLifetime: r.KroTokenLifetime},
			handOver:  &handOver{kroClients: c, Earlier: r.Earlier},
			deletion:  &deletion{kroClients: c, AccessGracePeriod: r.AccessGracePeriod},
			watches:   &kroWatches{kroClients: c, Shard: r.Shard},
		}
		s.secrets.placement = s.placement
		s.flux.deletion, s.flux.secrets = s.deletion, s.secrets
		s.placement.deletion, s.placement.secrets = s.deletion, s.secrets
		s.deletion.handOver, s.deletion.placement, s.deletion.secrets = s.handOver, s.placement, s.secrets
		r.built.steps = s
	})
	return r.built.steps
}

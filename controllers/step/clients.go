package step

import (
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmcp-project/service-provider-kro/controllers/reach"
)

// Clients are the clusters' clients and the provider's names, which every part of the
// Kro reconcile reads with.
type Clients struct {
	Onboarding     client.Client
	Platform       client.Client
	PlatformReader client.Reader
	ControlPlanes  reach.ControlPlanes
	Recorder       events.EventRecorder
	ProviderName   string
	PodNamespace   string
	AccessMode     reach.AccessMode
}

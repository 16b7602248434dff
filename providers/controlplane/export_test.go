package controlplane

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
)

// State and Names are for the tests: operators see the same through the
// service_provider_kro_controlplanes metric and the Kros' ControlPlaneAccessReady
// condition, so the provider does not export them.

// State returns a ControlPlane's engagement state.
func (p *Provider) State(name multicluster.ClusterName) State {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e, ok := p.clusters[name]; ok {
		return e.state
	}
	return State{Phase: Absent}
}

// Names lists the ControlPlanes the provider knows, engaged or not.
func (p *Provider) Names() []multicluster.ClusterName {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]multicluster.ClusterName, 0, len(p.clusters))
	for name := range p.clusters {
		out = append(out, name)
	}
	return out
}

// Served tells whether an engaged cluster serves the watched kind, as the watch of the
// kind asks first.
func (e *Events) Served(ctx context.Context, cl cluster.Cluster) (bool, error) {
	wc, err := directClient(cl)
	if err != nil {
		return false, err
	}
	return e.served(ctx, wc), nil
}

package env

import (
	"context"

	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

// StartFluxShard starts a Flux shard's controller pair for key
// (testenv.E2E.StartFluxShard); it stops with the environment. Start the environment
// with FluxWatchLabelSelector "!sharding.fluxcd.io/key" so that its own Flux leaves the
// sharded objects alone.
func (e *Env) StartFluxShard(ctx context.Context, key string) (*testenv.Flux, error) {
	if e.faults.te == nil {
		return nil, errNotOnThisBackend
	}
	f, err := e.faults.te.StartFluxShard(ctx, e.log, key)
	if err != nil {
		return nil, err
	}
	e.fluxShards = append(e.fluxShards, f)
	return f, nil
}

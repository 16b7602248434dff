package env

import (
	"context"
	"path/filepath"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

// StartFluxShard starts a source-controller and helm-controller pair that reconciles
// only the Flux objects labelled sharding.fluxcd.io/key=key, as Flux's sharding runs
// them, on the environment's platform cluster and trusting its registry. It stops with
// the environment. Start the environment with FluxWatchLabelSelector
// "!sharding.fluxcd.io/key" so that its own Flux leaves the sharded objects alone.
func (e *Env) StartFluxShard(ctx context.Context, key string) (*testenv.Flux, error) {
	if e.faults.te == nil {
		return nil, errNotOnThisBackend
	}
	f, err := testenv.StartFlux(ctx, e.log, testenv.FluxOptions{
		Kubeconfig:         e.Platform.Kubeconfig,
		Dir:                filepath.Join(e.Dir, "flux-"+key),
		CAs:                [][]byte{e.Registry.CA.CertPEM},
		WatchLabelSelector: v1alpha1.LabelFluxShard + "=" + key,
	})
	if err != nil {
		return nil, err
	}
	e.fluxShards = append(e.fluxShards, f)
	return f, nil
}

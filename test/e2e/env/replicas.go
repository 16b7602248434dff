package env

import (
	"context"
	"fmt"

	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

// Replica is another provider process beside Env.Provider, for the sharded mode: the
// environment's ProviderArgs (which then carry --sharding) and its own flags.
type Replica struct {
	// ID is its --shard-id.
	ID string
	// Process is the running provider; Kill, Stop and Restart play a crash, a SIGTERM
	// and a new pod.
	Process *testenv.Process
	// MetricsURL is its metrics endpoint.
	MetricsURL string
	probe      string
}

// StartReplica starts another provider with --shard-id=id, logging into replica-<id>/,
// and waits until it is ready: under --sharding, until it has joined.
func (e *Env) StartReplica(ctx context.Context, id string) (*Replica, error) {
	p, metrics, probe, err := e.runProvider(ctx, "service-provider-kro-"+id, "replica-"+id, "--shard-id="+id)
	if err != nil {
		if p != nil {
			_ = p.Stop()
		}
		return nil, fmt.Errorf("starting replica %s: %w", id, err)
	}
	r := &Replica{ID: id, Process: p, MetricsURL: "http://" + metrics + "/metrics", probe: probe}
	e.replicas = append(e.replicas, r)
	return r, nil
}

// Restart starts a replica again with the same arguments once it has ended, and waits
// until it is ready.
func (r *Replica) Restart(ctx context.Context) error {
	if r.Process.ExitError() == nil {
		return fmt.Errorf("replica %s (pid %d) still runs", r.ID, r.Process.Pid())
	}
	p, err := r.Process.Restart()
	if err != nil {
		return err
	}
	r.Process = p
	return waitReady(ctx, p, "http://"+r.probe+"/readyz")
}

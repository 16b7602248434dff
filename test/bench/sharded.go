package bench

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmcp-project/service-provider-kro/providers/sharding"
	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

// The sharded run: several provider replicas with --sharding share the ControlPlanes; the
// harness measures their balance, a replica killed, stopped and cut off from the platform
// API server, and each coming back. Its figures are in sharded_results.go, the replicas'
// processes in sharded_replicas.go, the share in sharded_balance.go, a hand-over in
// sharded_event.go, the double ownership in sharded_views.go and sharded_writes.go.

// ShardedConfig are the parameters of the sharded run: several provider replicas with
// --sharding share the ControlPlanes.
type ShardedConfig struct {
	// Replicas run the provider with --sharding, each behind a TCP proxy of its own to the
	// platform API server.
	Replicas int
	// Kros on ControlPlanes on the shared API servers.
	Kros int
	// LeaseDuration is --shard-lease-duration.
	LeaseDuration time.Duration
	// Partition is how long one replica is cut off from the platform API server; 0 skips
	// the partition.
	Partition time.Duration
	// Moved: in each hand-over, this many Kros the leaving replica owned have their chart
	// pull secret copy deleted, and the time until it is back is measured.
	Moved int
}

// replica is one provider process of the sharded run.
type replica struct {
	id      string
	metrics string
	health  string
	proxy   *testenv.Proxy
	// plHost is the platform host as the replica's client metrics name it: its proxy.
	plHost string
	proc   *testenv.Process
	args   []string
	up     bool
}

type shardHarness struct {
	*harness
	sc    ShardedConfig
	reps  []*replica
	names []string // the Kros on shared API servers, "<namespace>/<name>"
	refs  []*kroRef
	httpc *http.Client
	res   *ShardedResults
	// leases reads the members' Leases on the platform cluster.
	leases client.Client

	mu sync.Mutex
	// extra are Kros besides names that exist now (an event's dedicated Kro).
	extra []string
	// downs: when the harness killed a replica (its view ends there).
	downs []viewChange
	// writes to Kros, attributed by field manager.
	writes []kroWrite
	// phases name what happened from when, for the double-ownership report.
	phases []phase
	events int
}

type viewChange struct {
	at      time.Time
	replica string
	members []string
}

type kroWrite struct {
	at      time.Time
	replica string
	kro     string
}

type phase struct {
	at   time.Time
	what string
}

// RunSharded measures several provider replicas with --sharding in provider mode: the
// balance, a replica killed, stopped and cut off from the platform API server, and each
// coming back.
func RunSharded(ctx context.Context, cfg Config, sc ShardedConfig) (*ShardedResults, error) {
	if cfg.Log == nil {
		cfg.Log = os.Stderr
	}
	if sc.Replicas < 2 || sc.Kros < 1 {
		return nil, fmt.Errorf("the sharded run needs at least 2 replicas and 1 Kro")
	}
	if sc.LeaseDuration <= 0 {
		sc.LeaseDuration = sharding.DefaultLeaseDuration
	}
	cfg.Concurrency = max(1, cfg.Concurrency)
	cfg.SharedAPIServers = max(1, cfg.SharedAPIServers)
	cfg.Dedicated = 1 // the ControlPlane whose Kro's deletion an RGD blocks
	start := time.Now()
	s := &shardHarness{harness: newHarness(cfg), sc: sc, httpc: &http.Client{Timeout: 2 * time.Second}}
	s.res = &ShardedResults{
		Started: start.UTC().Truncate(time.Second), Machine: machine(), Replicas: sc.Replicas, Kros: sc.Kros,
		SharedAPIServers: cfg.SharedAPIServers, LeaseDurationSeconds: sc.LeaseDuration.Seconds(),
		PartitionSeconds: sc.Partition.Seconds(), ProviderFlags: cfg.ProviderFlags,
	}
	defer s.stopAll()
	err := s.run(ctx)
	s.res.Exits = s.unexpectedExits()
	s.res.Duration = time.Since(start).Round(time.Second).String()
	if err != nil {
		return s.res, err
	}
	s.res.Targets = EvaluateSharded(s.res)
	return s.res, nil
}

func (s *shardHarness) run(ctx context.Context) error {
	if err := s.setupEnv(ctx); err != nil {
		return err
	}
	if err := s.watchKroWrites(ctx); err != nil {
		return err
	}
	scheme := runtime.NewScheme()
	if err := coordinationv1.AddToScheme(scheme); err != nil {
		return err
	}
	var err error
	if s.leases, err = client.New(s.platform.Config, client.Options{Scheme: scheme}); err != nil {
		return err
	}
	if err := s.startReplicas(ctx); err != nil {
		return err
	}
	all := s.ids()
	if err := s.waitBalanced(ctx, all, time.Minute); err != nil {
		return err
	}

	// 1: the Kros, each with its own ControlPlane credentials.
	for i := range s.sc.Kros {
		r := s.newRef(fmt.Sprintf("cp-%04d", i+1), versionShared, s.shared[i%len(s.shared)], -1)
		s.refs = append(s.refs, r)
		s.names = append(s.names, kroNamespace+"/"+r.name)
	}
	s.logf("sharded: granting access to %d ControlPlanes", len(s.refs))
	if err := s.grantAll(ctx, s.refs); err != nil {
		return err
	}
	s.logf("sharded: %d Kros over %d replicas", len(s.refs), len(s.reps))
	s.phase(phaseKrosCreated)
	step, err := s.burst(ctx, s.refs)
	if err != nil {
		return err
	}
	s.res.CreatedToReady = step.Ready
	if err := s.waitBalanced(ctx, all, waitTimeout); err != nil {
		return err
	}

	// 2: balance.
	if s.res.Balance, err = s.balance(all); err != nil {
		return err
	}
	s.logf("sharded: owned %v (expected %v), engaged %v, max deviation %.1f %%", s.res.Balance.Owned, s.res.Balance.Expected, s.res.Balance.Engaged, s.res.Balance.MaxDeviationPct)

	// 7: idle cost of the membership.
	s.phase("idle")
	if s.res.Idle, err = s.idleCost(ctx); err != nil {
		return err
	}

	if err := s.events3to5(ctx); err != nil {
		return err
	}
	s.phase("end")
	s.stopReplicas()
	// 6: double ownership, from the logs.
	s.res.DoubleOwnership, err = s.doubleOwnership()
	return err
}

// events3to5: a replica killed, restarted; another stopped, restarted; and a replica
// cut off from the platform API server for longer than its Lease, twice.
func (s *shardHarness) events3to5(ctx context.Context) error {
	// The replica that owns the most goes first: the largest hand-over.
	order := slices.Clone(s.reps)
	slices.SortStableFunc(order, func(a, b *replica) int { return s.res.Balance.Owned[b.id] - s.res.Balance.Owned[a.id] })
	for _, kind := range []string{"SIGKILL", "SIGTERM"} {
		victim := order[s.events%len(order)]
		ev, err := s.event(ctx, kind, victim)
		s.res.Events = append(s.res.Events, ev)
		if err != nil {
			return err
		}
		rj, err := s.rejoin(ctx, victim, kind, func() error { return s.restartReplica(victim) })
		s.res.Rejoins = append(s.res.Rejoins, rj)
		if err != nil {
			return err
		}
	}
	// 5: a replica cut off from the platform API server for longer than its Lease: once
	// whenever it comes, once right after the replica renewed its Lease, when its own
	// Lease is newer than any of the others' it has seen.
	for _, kind := range []string{partition, partitionAfterRenewal} {
		if s.sc.Partition <= 0 {
			break
		}
		victim := order[s.events%len(order)]
		ev, err := s.event(ctx, kind, victim)
		s.res.Events = append(s.res.Events, ev)
		if err != nil {
			return err
		}
		if rest := s.sc.Partition - time.Since(s.lastEventAt()); rest > 0 {
			s.logf("sharded: the partition lasts %s more", rest.Round(time.Second))
			if err := sleep(ctx, rest); err != nil {
				return err
			}
		}
		rj, err := s.rejoin(ctx, victim, kind, func() error { victim.proxy.Heal(); return nil })
		s.res.Rejoins = append(s.res.Rejoins, rj)
		if err != nil {
			return err
		}
	}
	return nil
}

func (s *shardHarness) ids() []string {
	var ids []string
	for _, r := range s.reps {
		ids = append(ids, r.id)
	}
	return ids
}

func (s *shardHarness) phase(what string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.phases = append(s.phases, phase{time.Now(), what})
}

func (s *shardHarness) lastEventAt() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := len(s.phases) - 1; i >= 0; i-- {
		if isPartition(strings.Fields(s.phases[i].what)[0]) {
			return s.phases[i].at
		}
	}
	return time.Now()
}

// byReason sums not-Ready states by status and reason, leaving out the messages, which
// name each Kro's namespaces.
func byReason(states map[string]int) map[string]int {
	out := map[string]int{}
	for k, n := range states {
		reason, _, _ := strings.Cut(k, ":")
		out[reason] += n
	}
	return out
}

// The kinds of partition: whenever it comes, and right after the replica renewed.
const (
	partition             = "partition"
	partitionAfterRenewal = "partition-after-renewal"
)

func isPartition(kind string) bool { return kind == partition || kind == partitionAfterRenewal }

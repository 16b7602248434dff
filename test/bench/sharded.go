package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/clusters"
	"github.com/openmcp-project/service-provider-kro/providers/sharding"
	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

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

// ShardedResults are the figures of the sharded run.
type ShardedResults struct {
	Started  time.Time `json:"started"`
	Duration string    `json:"duration"`
	Machine  Machine   `json:"machine"`

	Replicas             int      `json:"replicas"`
	Kros                 int      `json:"kros"`
	SharedAPIServers     int      `json:"sharedAPIServers"`
	LeaseDurationSeconds float64  `json:"leaseDurationSeconds"`
	PartitionSeconds     float64  `json:"partitionSeconds,omitempty"`
	ProviderFlags        []string `json:"providerFlags,omitempty"`

	// CreatedToReady: the Kros created at once, each until Ready, with all replicas up.
	CreatedToReady Dist `json:"createdToReady"`
	// Balance is how the replicas share the Kros once all are Ready.
	Balance Balance `json:"balance"`
	// Idle is the membership's cost with every replica idle.
	Idle ShardIdle `json:"idle"`
	// Events are the hand-overs: a replica killed, stopped, cut off from the platform.
	Events []ShardEvent `json:"events"`
	// Rejoins are a replica coming back (restarted, or its partition healed) until the
	// share is as before.
	Rejoins []Rejoin `json:"rejoins"`
	// DoubleOwnership is derived from every replica's "members changed" log lines.
	DoubleOwnership DoubleOwnership `json:"doubleOwnership"`
	// Exits lists replicas that ended without the harness stopping them.
	Exits   []string `json:"unexpectedExits,omitempty"`
	Targets []Target `json:"targets"`
}

// Balance is the share of each replica.
type Balance struct {
	// Owned is service_provider_kro_shard_owned_controlplanes of each replica.
	Owned map[string]int `json:"owned"`
	// Expected is what sharding.Owner computes over the Kros and the replicas.
	Expected map[string]int `json:"expected"`
	// Engaged is service_provider_kro_controlplanes{phase="Engaged"} of each replica.
	Engaged map[string]int `json:"engaged"`
	// OwnedSum should be the number of Kros.
	OwnedSum int     `json:"ownedSum"`
	Mean     float64 `json:"mean"`
	// MaxDeviationPct is the largest |owned - mean| / mean, in percent.
	MaxDeviationPct float64 `json:"maxDeviationPct"`
}

// ShardIdle is the request cost of every replica at rest.
type ShardIdle struct {
	WindowSeconds float64 `json:"windowSeconds"`
	// PlatformRequestsPerSecond: each replica's requests to the platform API server
	// (client side, rest_client_requests_total of its proxy's host), all methods. At rest
	// only the membership talks to the platform cluster.
	PlatformRequestsPerSecond map[string]float64 `json:"platformRequestsPerSecond"`
	// PlatformRequestsByMethod: the same in the window, by method.
	PlatformRequestsByMethod map[string]map[string]float64 `json:"platformRequestsByMethod"`
	// LeaseRenewalsPerSecond: each replica's PUTs to the platform API server, its
	// membership's cost (the provider writes nothing else there at rest; the Lease watch
	// is one long request).
	LeaseRenewalsPerSecond map[string]float64 `json:"leaseRenewalsPerSecond"`
	// APIServerLeaseRequestsPerSecond: the platform API server's apiserver_request_total
	// for leases, every client (the API server's own heartbeat included), by verb.
	APIServerLeaseRequestsPerSecond map[string]float64 `json:"apiserverLeaseRequestsPerSecond"`
}

// ShardEvent is one replica leaving: killed, stopped, or cut off from the platform.
type ShardEvent struct {
	// Kind: SIGKILL, SIGTERM, partition (cut whenever it comes) or
	// partition-after-renewal (cut right after the replica renewed its Lease).
	Kind    string `json:"kind"`
	Replica string `json:"replica"`
	// Moved is the number of Kros the replica owned, which the others take over.
	Moved int `json:"moved"`
	// SecondsToExited: the signal until the process had ended.
	SecondsToExited float64 `json:"secondsToExited,omitempty"`
	// SecondsToLeaseDeleted: the signal until its Lease was gone (SIGTERM).
	SecondsToLeaseDeleted float64 `json:"secondsToLeaseDeleted,omitempty"`
	// SecondsToSteppedBack: (partition) the cut until the replica owned nothing.
	SecondsToSteppedBack float64 `json:"secondsToSteppedBack,omitempty"`
	// CutMembersMin: (partition) the fewest members the cut-off replica counted while it
	// still counted itself; fewer than all means it counted others gone and claimed
	// their Kros.
	CutMembersMin int `json:"cutMembersMin,omitempty"`
	// SecondsToFirstDetected: until one of the others counted one member less;
	// SecondsToDetected: until every other one did.
	SecondsToFirstDetected float64 `json:"secondsToFirstDetected"`
	SecondsToDetected      float64 `json:"secondsToDetected"`
	// SecondsToReengaged: until the others together had every ControlPlane engaged.
	SecondsToReengaged float64 `json:"secondsToReengaged"`
	// ReengagedPerSecond: moved ControlPlanes over the time from first detected to
	// re-engaged.
	ReengagedPerSecond float64 `json:"reengagedPerSecond"`
	// CopyRestored: chart pull secret copies of moved Kros deleted right after the event,
	// each timed from the event until it was back.
	CopyRestored Dist `json:"copyRestoredFromEvent"`
	// BlockedDeletionSeconds: a moved Kro's deletion blocked by an RGD on its ControlPlane;
	// the RGD deleted right after the event; from the event until the Kro was gone.
	BlockedDeletionSeconds float64 `json:"blockedDeletionReleasedFromEvent"`
	// MaxOwnedOverCount: the largest sum of the replicas' owned counts above the number of
	// Kros seen while polling (every ~200 ms); > 0 means two replicas claimed one Kro.
	MaxOwnedOverCount int `json:"maxOwnedOverCount"`
	// TakeoverWrites: the other replicas' write requests from the event until re-engaged
	// and reactions done (the reactions' own writes included, Lease renewals left out), by
	// method.
	TakeoverWrites map[string]float64 `json:"takeoverWritesByMethod,omitempty"`
	// ObjectChanges the harness's watches saw meanwhile (Kros, Flux objects, secret
	// copies), and the Kros' not-Ready states by status and reason.
	ObjectChanges int            `json:"objectChanges"`
	KrosNotReady  map[string]int `json:"krosNotReady,omitempty"`
}

// Rejoin is a replica coming back.
type Rejoin struct {
	// After: "SIGKILL" or "SIGTERM" (restarted), or a partition's kind (healed).
	After   string `json:"after"`
	Replica string `json:"replica"`
	// Moved: the Kros it owns again.
	Moved int `json:"moved"`
	// SecondsToJoined: start (or heal) until it counted every member.
	SecondsToJoined float64 `json:"secondsToJoined"`
	// SecondsToBalanced: until every replica owned its HRW share, engaged exactly those
	// ControlPlanes, and had an empty queue.
	SecondsToBalanced float64 `json:"secondsToBalanced"`
	// ObjectChanges and KrosNotReady as in ShardEvent.
	ObjectChanges int            `json:"objectChanges"`
	KrosNotReady  map[string]int `json:"krosNotReady,omitempty"`
}

// DoubleOwnership is derived from the replicas' views over time: their "members
// changed" log lines and the moment a replica was killed. A Kro is owned twice while two
// views each make their holder its owner.
type DoubleOwnership struct {
	// Windows is the number of periods in which some Kro was owned twice.
	Windows int `json:"windows"`
	// LongestMs is the longest such period; LongestKros the most Kros owned twice in it;
	// LongestWhen what happened then.
	LongestMs   float64 `json:"longestMs"`
	LongestKros int     `json:"longestKros"`
	LongestWhen string  `json:"longestWhen,omitempty"`
	// TotalMs adds up every window.
	TotalMs float64 `json:"totalMs"`
	// KroWrites are the Kro writes (status, finalizer) the harness saw and attributed to a
	// replica by its field manager (service-provider-kro.<shard-id> under --sharding), by replica.
	KroWrites map[string]int `json:"kroWrites"`
	// DuplicatedWrites: writes to a Kro while (up to 1 s after) it was owned twice.
	DuplicatedWrites int `json:"duplicatedWrites"`
	// NonOwnerWrites: writes by a replica that owned the Kro at no point in the second
	// before, by its own view.
	NonOwnerWrites        int      `json:"nonOwnerWrites"`
	NonOwnerWriteExamples []string `json:"nonOwnerWriteExamples,omitempty"`
	// List: the windows (the first 20).
	List []OwnershipWindow `json:"list,omitempty"`
}

// OwnershipWindow is one period in which some Kros were owned twice.
type OwnershipWindow struct {
	// When: the phase of the run and the time since it began.
	When     string   `json:"when"`
	Ms       float64  `json:"ms"`
	Kros     int      `json:"kros"`
	Replicas []string `json:"replicas"`
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

// startReplicas starts every replica, each behind its own proxy to the platform API
// server, and waits until each is ready (its readiness includes having joined).
func (s *shardHarness) startReplicas(ctx context.Context) error {
	for i := range s.sc.Replicas {
		id := fmt.Sprintf("replica-%d", i+1)
		p, err := testenv.StartProxy(s.platform.Config)
		if err != nil {
			return err
		}
		host := p.Config(s.platform.Config).Host
		kc, err := clientcmd.Load(s.platform.Kubeconfig)
		if err != nil {
			return err
		}
		for _, c := range kc.Clusters {
			c.Server = host
		}
		path := filepath.Join(s.cfg.WorkDir, "platform-"+id+".kubeconfig")
		if err := clientcmd.WriteToFile(*kc, path); err != nil {
			return err
		}
		addrs, err := testenv.FreeLoopbackAddrs(2)
		if err != nil {
			return err
		}
		r := &replica{id: id, metrics: "http://" + addrs[0] + "/metrics", health: "http://" + addrs[1] + "/readyz", proxy: p,
			plHost: strings.TrimPrefix(host, "https://")}
		r.args = append([]string{"run",
			"--onboarding-kubeconfig", s.obKube, "--platform-kubeconfig", path, "--pod-namespace", podNamespace,
			"--metrics-bind-address", addrs[0], "--health-probe-bind-address", addrs[1],
			"--sharding", "--shard-id=" + id, "--shard-lease-duration=" + s.sc.LeaseDuration.String(),
			"--zap-time-encoding=rfc3339nano"}, s.cfg.ProviderFlags...)
		if r.proc, err = testenv.StartProcess("provider-"+id, s.cfg.WorkDir, []string{"HOME=" + s.cfg.WorkDir}, s.bin, r.args...); err != nil {
			return err
		}
		r.up = true
		s.reps = append(s.reps, r)
	}
	for _, r := range s.reps {
		if err := s.waitReady(ctx, r); err != nil {
			return err
		}
	}
	s.logf("sharded: %d replicas ready", len(s.reps))
	return nil
}

func (s *shardHarness) waitReady(ctx context.Context, r *replica) error {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if resp, err := s.httpc.Get(r.health); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-r.proc.Exited():
			return fmt.Errorf("%s exited: %w\n%s", r.id, r.proc.ExitError(), r.proc.LogTail(30))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s did not become ready:\n%s", r.id, r.proc.LogTail(30))
}

func (s *shardHarness) restartReplica(r *replica) error {
	p, err := r.proc.Restart()
	if err != nil {
		return err
	}
	r.proc, r.up = p, true
	return nil
}

func (s *shardHarness) stopReplicas() {
	var wg sync.WaitGroup
	for _, r := range s.reps {
		if r.up {
			r.up = false
			wg.Go(func() { _ = r.proc.Stop() })
		}
	}
	wg.Wait()
}

func (s *shardHarness) stopAll() {
	s.stopReplicas()
	for _, r := range s.reps {
		_ = r.proxy.Close()
	}
	s.stop()
}

// unexpectedExits names replicas that ended while the harness counted them up.
func (s *shardHarness) unexpectedExits() []string {
	var out []string
	for _, r := range s.reps {
		if !r.up {
			continue
		}
		select {
		case <-r.proc.Exited():
			out = append(out, fmt.Sprintf("%s: %v", r.id, r.proc.ExitError()))
		default:
		}
	}
	return out
}

// repState is one scrape of a replica's metrics.
type repState struct {
	members, owned, engaged, depth float64
	requests, platform             map[string]float64
}

func (s *shardHarness) scrape(r *replica) (repState, error) {
	resp, err := s.httpc.Get(r.metrics)
	if err != nil {
		return repState{}, err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return repState{}, err
	}
	m := ParseProm(string(b))
	return repState{
		members: Sum(m, "service_provider_kro_shard_members", nil),
		owned:   Sum(m, "service_provider_kro_shard_owned_controlplanes", nil),
		engaged: Sum(m, "service_provider_kro_controlplanes", func(l map[string]string) bool { return l["phase"] == "Engaged" }),
		depth:   Sum(m, "workqueue_depth", func(l map[string]string) bool { return l["name"] == "kro" }),
		requests: SumBy(m, "rest_client_requests_total", func(l map[string]string) (string, bool) {
			return l["method"], true
		}),
		platform: SumBy(m, "rest_client_requests_total", func(l map[string]string) (string, bool) {
			return l["method"], l["host"] == r.plHost
		}),
	}, nil
}

func (s *shardHarness) rep(id string) *replica {
	for _, r := range s.reps {
		if r.id == id {
			return r
		}
	}
	return nil
}

// liveKros are the Kros that exist now.
func (s *shardHarness) liveKros() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append(slices.Clone(s.names), s.extra...)
}

func expectedShares(keys, members []string) map[string]int {
	out := map[string]int{}
	for _, m := range members {
		out[m] = 0
	}
	for _, k := range keys {
		out[sharding.Owner(k, members)]++
	}
	return out
}

// balancedNow tells whether members share the live Kros as sharding.Owner says: each
// counts all members, owns its share, has engaged exactly its share and an empty queue.
func (s *shardHarness) balancedNow(members []string) (bool, string) {
	want := expectedShares(s.liveKros(), members)
	for _, id := range members {
		st, err := s.scrape(s.rep(id))
		if err != nil {
			return false, fmt.Sprintf("%s: %v", id, err)
		}
		if int(st.members) != len(members) || int(st.owned) != want[id] || int(st.engaged) != want[id] || st.depth != 0 {
			return false, fmt.Sprintf("%s: members %v of %d, owned %v of %d, engaged %v, queue %v", id, st.members, len(members), st.owned, want[id], st.engaged, st.depth)
		}
	}
	return true, ""
}

func (s *shardHarness) waitBalanced(ctx context.Context, members []string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, why := s.balancedNow(members)
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the replicas %v did not settle: %s", members, why)
		}
		if err := sleep(ctx, 200*time.Millisecond); err != nil {
			return err
		}
	}
}

func (s *shardHarness) balance(members []string) (Balance, error) {
	b := Balance{Owned: map[string]int{}, Engaged: map[string]int{}, Expected: expectedShares(s.liveKros(), members)}
	for _, id := range members {
		st, err := s.scrape(s.rep(id))
		if err != nil {
			return b, err
		}
		b.Owned[id], b.Engaged[id] = int(st.owned), int(st.engaged)
		b.OwnedSum += int(st.owned)
	}
	b.Mean = round(float64(b.OwnedSum) / float64(len(members)))
	for _, n := range b.Owned {
		if b.Mean > 0 {
			b.MaxDeviationPct = max(b.MaxDeviationPct, round(100*abs(float64(n)-float64(b.OwnedSum)/float64(len(members)))/(float64(b.OwnedSum)/float64(len(members)))))
		}
	}
	return b, nil
}

func abs(v float64) float64 {
	if v < 0 {
		return -v
	}
	return v
}

// idleCost measures every replica's requests to the platform API server at rest.
func (s *shardHarness) idleCost(ctx context.Context) (ShardIdle, error) {
	window := max(s.cfg.IdleWindow, 5*time.Second)
	s.logf("sharded: idle for %s", window)
	before := map[string]repState{}
	for _, r := range s.reps {
		st, err := s.scrape(r)
		if err != nil {
			return ShardIdle{}, err
		}
		before[r.id] = st
	}
	apiBefore, err := s.leaseRequests(ctx)
	if err != nil {
		return ShardIdle{}, err
	}
	start := time.Now()
	if err := sleep(ctx, window); err != nil {
		return ShardIdle{}, err
	}
	out := ShardIdle{PlatformRequestsPerSecond: map[string]float64{}, PlatformRequestsByMethod: map[string]map[string]float64{},
		LeaseRenewalsPerSecond: map[string]float64{}, APIServerLeaseRequestsPerSecond: map[string]float64{}}
	for _, r := range s.reps {
		st, err := s.scrape(r)
		if err != nil {
			return ShardIdle{}, err
		}
		d := Delta(before[r.id].platform, st.platform)
		out.PlatformRequestsByMethod[r.id] = d
		out.PlatformRequestsPerSecond[r.id] = round3(total(d) / time.Since(start).Seconds())
		out.LeaseRenewalsPerSecond[r.id] = round3(d["PUT"] / time.Since(start).Seconds())
	}
	apiAfter, err := s.leaseRequests(ctx)
	if err != nil {
		return ShardIdle{}, err
	}
	secs := time.Since(start).Seconds()
	for k, v := range Delta(apiBefore, apiAfter) {
		out.APIServerLeaseRequestsPerSecond[k] = round3(v / secs)
	}
	out.WindowSeconds = round(secs)
	return out, nil
}

// leaseRequests are the platform API server's requests for leases, by verb.
func (s *shardHarness) leaseRequests(ctx context.Context) (map[string]float64, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(s.platform.Config)
	if err != nil {
		return nil, err
	}
	raw, err := dc.RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("scraping the platform API server: %w", err)
	}
	return SumBy(ParseProm(string(raw)), "apiserver_request_total", func(l map[string]string) (string, bool) {
		return l["verb"], l["resource"] == "leases"
	}), nil
}

// upMembers are the replicas running and not cut off.
func (s *shardHarness) upMembers() []string {
	var out []string
	for _, r := range s.reps {
		if r.up {
			out = append(out, r.id)
		}
	}
	return out
}

// prepareBlocked creates a Kro on the dedicated ControlPlane whose owner among members
// is owner, waits until it is Ready, puts an RGD on its ControlPlane and deletes it, and
// waits until the deletion is blocked.
func (s *shardHarness) prepareBlocked(ctx context.Context, owner string, members []string) (*kroRef, client.Object, error) {
	var name string
	for j := 1; ; j++ {
		name = fmt.Sprintf("ded-%d-%d", s.events, j)
		if sharding.Owner(kroNamespace+"/"+name, members) == owner {
			break
		}
	}
	ref := s.newRef(name, versionDedicated, s.dedicated[0], 0)
	if err := s.grantAll(ctx, []*kroRef{ref}); err != nil {
		return nil, nil, err
	}
	s.mu.Lock()
	s.extra = append(s.extra, kroNamespace+"/"+name)
	s.mu.Unlock()
	if err := s.createKro(ctx, ref); err != nil {
		return nil, nil, err
	}
	if _, err := s.tr.wait(ctx, []string{"ready|" + string(ref.uid)}, "the dedicated Kro to be Ready"); err != nil {
		return nil, nil, err
	}
	u := rgd(fmt.Sprintf("sharded-%d", s.events))
	if err := s.ded[0].Create(ctx, u); err != nil {
		return nil, nil, fmt.Errorf("creating RGD: %w", err)
	}
	if _, err := s.tr.wait(ctx, []string{"rgds|" + string(ref.uid)}, "the Kro to count the RGD"); err != nil {
		return nil, nil, err
	}
	if err := s.ob.Delete(ctx, &v1alpha1.Kro{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: kroNamespace}}); err != nil {
		return nil, nil, err
	}
	if _, err := s.tr.wait(ctx, []string{"blocked|" + string(ref.uid)}, "the deletion to be blocked"); err != nil {
		return nil, nil, err
	}
	return ref, u, nil
}

// rejoin brings r back with start and measures until it is a member again and the
// replicas share the Kros as before.
func (s *shardHarness) rejoin(ctx context.Context, r *replica, after string, start func() error) (Rejoin, error) {
	rj := Rejoin{After: after, Replica: r.id}
	s.phase("rejoin of " + r.id + " after " + after)
	s.tr.startCounting()
	t0 := time.Now()
	if err := start(); err != nil {
		return rj, err
	}
	all := s.ids()
	rj.Moved = expectedShares(s.liveKros(), all)[r.id]
	var joined time.Time
	deadline := t0.Add(waitTimeout)
	for {
		if joined.IsZero() {
			if st, err := s.scrape(r); err == nil && int(st.members) == len(all) {
				joined = time.Now()
			}
		}
		if !joined.IsZero() {
			ok, _ := s.balancedNow(all)
			now := time.Now()
			if ok {
				rj.SecondsToJoined = round3(joined.Sub(t0).Seconds())
				rj.SecondsToBalanced = round3(now.Sub(t0).Seconds())
				changes, _, notReady := s.tr.stopCounting()
				rj.ObjectChanges, rj.KrosNotReady = changes, byReason(notReady)
				break
			}
		}
		if time.Now().After(deadline) {
			_, why := s.balancedNow(all)
			return rj, fmt.Errorf("%s did not rejoin after %s: %s", r.id, after, why)
		}
		if err := sleep(ctx, 200*time.Millisecond); err != nil {
			return rj, err
		}
	}
	s.logf("sharded: %s back after %s: joined %.1f s, balanced %.1f s (%d Kros its own again)", r.id, after, rj.SecondsToJoined, rj.SecondsToBalanced, rj.Moved)
	return rj, nil
}

// watchKroWrites attributes every change of a Kro to the replica whose field manager's
// entry changed with it.
func (s *shardHarness) watchKroWrites(ctx context.Context) error {
	c, err := cache.New(fast(s.onboarding.Config), cache.Options{Scheme: clusters.Scheme})
	if err != nil {
		return err
	}
	inf, err := c.GetInformer(ctx, &v1alpha1.Kro{})
	if err != nil {
		return err
	}
	prefix := "service-provider-" + providerName + "."
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{UpdateFunc: func(o, n any) {
		at := time.Now()
		before, after := o.(*v1alpha1.Kro), n.(*v1alpha1.Kro)
		if before.ResourceVersion == after.ResourceVersion {
			return
		}
		for _, w := range changedManagers(before.ManagedFields, after.ManagedFields) {
			if id, ok := strings.CutPrefix(w, prefix); ok {
				s.mu.Lock()
				s.writes = append(s.writes, kroWrite{at: at, replica: id, kro: after.Namespace + "/" + after.Name})
				s.mu.Unlock()
			}
		}
	}}); err != nil {
		return err
	}
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		return fmt.Errorf("the Kro write watch did not sync")
	}
	return nil
}

// changedManagers are the field managers that wrote: the API server stamps the time of
// the manager that made a change, so an entry that is new or has a new time is a write
// by its manager. An entry that only lost fields was changed by another. Only when no
// time changed (two writes by one manager within a second) does a changed entry count.
func changedManagers(before, after []metav1.ManagedFieldsEntry) []string {
	key := func(e metav1.ManagedFieldsEntry) string {
		return e.Manager + "|" + e.Subresource + "|" + string(e.Operation)
	}
	old := map[string]metav1.ManagedFieldsEntry{}
	for _, e := range before {
		old[key(e)] = e
	}
	var stamped, changed []string
	for _, e := range after {
		o, ok := old[key(e)]
		switch {
		case !ok || !o.Time.Equal(e.Time):
			if !slices.Contains(stamped, e.Manager) {
				stamped = append(stamped, e.Manager)
			}
		case rawFields(o.FieldsV1) != rawFields(e.FieldsV1) && len(rawFields(e.FieldsV1)) > len(rawFields(o.FieldsV1)):
			if !slices.Contains(changed, e.Manager) {
				changed = append(changed, e.Manager)
			}
		}
	}
	if len(stamped) > 0 {
		return stamped
	}
	return changed
}

func rawFields(f *metav1.FieldsV1) string {
	if f == nil {
		return ""
	}
	return f.GetRawString()
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

// waitRenewal returns as soon as replica's Lease has been renewed.
func (s *shardHarness) waitRenewal(ctx context.Context, replica string) error {
	key := client.ObjectKey{Namespace: podNamespace, Name: "service-provider-" + providerName + "-" + replica}
	l := &coordinationv1.Lease{}
	if err := s.leases.Get(ctx, key, l); err != nil {
		return err
	}
	rv := l.ResourceVersion
	deadline := time.Now().Add(2 * s.sc.LeaseDuration)
	for time.Now().Before(deadline) {
		if err := s.leases.Get(ctx, key, l); err != nil {
			return err
		}
		if l.ResourceVersion != rv {
			return nil
		}
		if err := sleep(ctx, 10*time.Millisecond); err != nil {
			return err
		}
	}
	return fmt.Errorf("the Lease of %s was not renewed in %s", replica, 2*s.sc.LeaseDuration)
}

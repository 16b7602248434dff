package bench

import "time"

// The figures of the sharded run, as its results JSON holds them: the balance, the idle
// cost, each hand-over and rejoin, and the double ownership.

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

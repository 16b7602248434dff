package bench

import "time"

// Results is everything one run measured; it is written as JSON and rendered as markdown.
type Results struct {
	// Mode is "provider": the harness plays Flux by setting the Flux objects' status.
	// The run with real Flux is in Flux.
	Mode     string    `json:"mode"`
	Started  time.Time `json:"started"`
	Duration string    `json:"duration"`
	Machine  Machine   `json:"machine"`
	Params   Params    `json:"params"`

	// Steps are the bursts of Kros, one per N, each onto ControlPlanes on shared API servers.
	Steps []Step `json:"steps"`
	// Memory is the provider's memory against the number of engaged ControlPlanes.
	Memory Memory `json:"memory"`
	// Idle is the cost of N+dedicated Kros at steady state.
	Idle Idle `json:"idle"`
	// Restart is the provider restarted with every Kro in place.
	Restart Restart `json:"restart"`
	// ChartSecretRotation: the source chart pull secret changed; time to each tenant copy,
	// with every Kro in place.
	ChartSecretRotation Rotation `json:"chartSecretRotation"`
	// ChartSecretRotationAtTarget is the same after the first step with at least the
	// target's 100 copies, the figure the target is about.
	ChartSecretRotationAtTarget Rotation `json:"chartSecretRotationAtTarget"`
	// ImageSecretRotation: the source image pull secret changed; time to each copy on the
	// ControlPlanes with their own API server.
	ImageSecretRotation Rotation `json:"imageSecretRotation"`
	// SecretRestored: a replicated image pull secret deleted on a ControlPlane until it is back.
	SecretRestored Dist `json:"secretRestored"`
	// HelmReadyToKroReady: at steady state, a HelmRelease goes from Ready=Unknown
	// (Progressing) to Ready=True until its Kro is Ready.
	HelmReadyToKroReady Dist `json:"helmReleaseReadyToKroReady"`
	// Reconciler describes the Kro controller as its metrics show it after the steps.
	Reconciler Reconciler `json:"reconciler"`
	// Profile is the provider's CPU profile of the last burst, when one was taken.
	Profile *Profile `json:"profile,omitempty"`
	// RGDDeletion: the last RGD deleted on a ControlPlane until the blocked Kro is gone.
	RGDDeletion Dist `json:"rgdDeletion"`
	// InstanceDeletion: the last instance of a kind kro generated (its RGD gone) deleted
	// on a ControlPlane until the blocked Kro is gone.
	InstanceDeletion Dist `json:"instanceDeletion"`

	// Flux is the run with real Flux at small N, when there was one.
	Flux *FluxResults `json:"flux,omitempty"`
	// FluxSharded is a run with real Flux sharded by spec.fluxShards, when there was one.
	FluxSharded *FluxResults `json:"fluxSharded,omitempty"`

	// Sharded is the run of several replicas with --sharding, when there was one.
	Sharded *ShardedResults `json:"sharded,omitempty"`

	// Rollout is the run of a ProviderConfig change rolled out to the Kros, when there was one.
	Rollout *RolloutResults `json:"rollout,omitempty"`

	// Handover is the run of the provider taking over the earlier provider's
	// installations, when there was one.
	Handover *HandoverResults `json:"handover,omitempty"`

	// Placement is the run of the same Kros in each placement, kro on the ControlPlane or
	// on a shared workload cluster, when there was one.
	Placement *PlacementResults `json:"placement,omitempty"`

	Targets []Target `json:"targets"`
}

// Machine names where the figures were taken.
type Machine struct {
	CPUs          int     `json:"cpus"`
	MemoryGiB     float64 `json:"memoryGiB"`
	GoVersion     string  `json:"goVersion"`
	OS            string  `json:"os"`
	KubeAPIServer string  `json:"kubeAPIServer"`
}

// Params are the run's parameters.
type Params struct {
	Steps            []int  `json:"steps"`
	SharedAPIServers int    `json:"sharedAPIServers"`
	Dedicated        int    `json:"dedicatedControlPlanes"`
	BurstSize        int    `json:"burstSize"`
	Concurrency      int    `json:"concurrency"`
	Repeats          int    `json:"repeats"`
	IdleWindow       string `json:"idleWindow"`
	PollInterval     string `json:"pollInterval"`
	// ProviderFlags were added to the provider's run flags.
	ProviderFlags []string `json:"providerFlags,omitempty"`
}

// Step is one burst of new Kros that brings the total to N.
type Step struct {
	N     int `json:"n"`
	Burst int `json:"burst"`
	// Applied: Kro created until its OCIRepository and HelmRelease exist with the right spec.
	Applied Dist `json:"createdToApplied"`
	// Ready: Kro created until Ready (includes the harness playing Flux).
	Ready Dist `json:"createdToReady"`
	// HelmReadyToKroReady: the harness set the HelmRelease Ready until the Kro is Ready.
	HelmReadyToKroReady Dist `json:"helmReleaseReadyToKroReady"`
	// AppliedPerSecond is the burst's size over the time from its first create to its
	// last Flux objects applied.
	AppliedPerSecond float64 `json:"appliedPerSecond"`
	// ProviderCores is the provider's CPU use while the (first) burst was applied, in cores;
	// MachineBusy the share of all the machine's cores busy meanwhile (API servers, etcd,
	// the harness and the provider together), 0..1.
	ProviderCores float64 `json:"providerCores"`
	// ProviderCPUMsPerKro is the provider's CPU time over the (first) burst's Kros.
	ProviderCPUMsPerKro float64 `json:"providerCPUMsPerKro"`
	MachineBusy         float64 `json:"machineBusy"`
	Engaged             int     `json:"engagedControlPlanes"`
	RSSMiB              float64 `json:"rssMiB"`
	HeapMiB             float64 `json:"heapInuseMiB"`
}

// Reconciler is the Kro controller's work during the bursts.
type Reconciler struct {
	Workers    int     `json:"maxConcurrentReconciles"`
	Reconciles float64 `json:"reconciles"`
	PerKro     float64 `json:"reconcilesPerKro"`
	MeanMs     float64 `json:"meanReconcileMs"`
}

// Memory sums up the memory against engaged ControlPlanes.
type Memory struct {
	BaselineRSSMiB  float64 `json:"baselineRSSMiB"`
	BaselineHeapMiB float64 `json:"baselineHeapInuseMiB"`
	RSSSlope        float64 `json:"rssMiBPerControlPlane"`
	HeapSlope       float64 `json:"heapMiBPerControlPlane"`
	MaxN            int     `json:"maxN"`
	RSSAtMaxMiB     float64 `json:"rssAtMaxMiB"`
	HeapAtMaxMiB    float64 `json:"heapInuseAtMaxMiB"`
}

// Idle is the steady-state cost over a window in which the harness makes no requests.
type Idle struct {
	Kros          int     `json:"kros"`
	WindowSeconds float64 `json:"windowSeconds"`
	// Provider's own requests (client side, rest_client_requests_total), per minute.
	RequestsPerMin   float64            `json:"requestsPerMin"`
	WritesPerMin     float64            `json:"writesPerMin"`
	RequestsByMethod map[string]float64 `json:"requestsByMethodInWindow,omitempty"`
	// Seen by the API servers (apiserver_request_total, write verbs, leases excluded).
	APIServerWritesPerMin float64            `json:"apiserverWritesPerMin"`
	APIServerWrites       map[string]float64 `json:"apiserverWritesByResource,omitempty"`
	// ObjectChanges are changes of watched objects the harness saw in the window.
	ObjectChanges       int            `json:"objectChanges"`
	ObjectChangesByKind map[string]int `json:"objectChangesByKind,omitempty"`
	// KrosNotReady counts the distinct not-Ready states of Kros seen in the window.
	KrosNotReady     map[string]int `json:"krosNotReady,omitempty"`
	ReconcilesPerMin float64        `json:"reconcilesPerMin"`
	CPUCores         float64        `json:"cpuCores"`
	RSSMiB           float64        `json:"rssMiB"`
}

// Restart is the provider restarted with every Kro in place.
type Restart struct {
	Kros int `json:"kros"`
	// SecondsToReverified: process start until every Kro was reconciled, every
	// ControlPlane engaged and the queue empty.
	SecondsToReverified float64 `json:"secondsToReverified"`
	Reconciles          float64 `json:"reconciles"`
	Requests            float64 `json:"requests"`
	// WriteRequests are the provider's POST/PUT/PATCH/DELETE requests (server-side apply
	// included, also when it changes nothing).
	WriteRequests       float64            `json:"writeRequests"`
	WriteRequestsByVerb map[string]float64 `json:"writeRequestsByVerb,omitempty"`
	APIServerWrites     map[string]float64 `json:"apiserverWritesByResource,omitempty"`
	// ObjectChanges are changes of watched objects (Kros, Flux objects, secret copies) the
	// harness saw: the writes that changed something.
	ObjectChanges       int            `json:"objectChanges"`
	ObjectChangesByKind map[string]int `json:"objectChangesByKind,omitempty"`
	// KrosNotReady counts the distinct not-Ready states of Kros seen during the restart.
	KrosNotReady map[string]int `json:"krosNotReady,omitempty"`
}

// Rotation is a source secret rotated, repeated.
type Rotation struct {
	Copies int `json:"copies"`
	// ToLast: rotation until the last copy is updated, one value per repeat.
	ToLast Dist `json:"toLastCopy"`
	// PerCopy: rotation until each copy is updated, all repeats.
	PerCopy Dist `json:"perCopy"`
}

// Target is one of the targets, recorded and never asserted.
type Target struct {
	Name     string `json:"name"`
	Target   string `json:"target"`
	Measured string `json:"measured"`
	Met      bool   `json:"met"`
	Note     string `json:"note,omitempty"`
	// Flux is the same measure in the run with real Flux, when there was one.
	Flux string `json:"flux,omitempty"`
}

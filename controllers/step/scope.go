// Package step holds what one reconcile of a Kro shares between its steps: the Scope the
// steps fill in order, the Result each returns, the Observation they report into (with its
// markers) and the status computed from it, and the Clients every step reads with.
package step

import (
	"context"
	"strings"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/owned"
	"github.com/openmcp-project/service-provider-kro/controllers/reach"
	"github.com/openmcp-project/service-provider-kro/controllers/rollout"
	"github.com/openmcp-project/service-provider-kro/controllers/versions"
)

// Result is how a step, or a whole reconcile, ended when it did not fail. The status
// writer reads it: undecided and finalized leave the status alone.
type Result int

const (
	// Proceed means the step is done, the next one may run.
	Proceed Result = iota
	// Waiting means the step waits for something (input to be fixed, an object to appear,
	// tenants' resources to go); its condition says what. No error, no backoff: a watch,
	// a recheck (scope.requeue) or the poll brings the Kro back.
	Waiting
	// Undecided means the ControlPlane is still being connected, so this reconcile knows less
	// than the status already says and leaves it alone. The engagement's outcome brings
	// the Kro back.
	Undecided
	// Finalized means the finalizer is gone, and so is the Kro; there is no status to write.
	Finalized
)

// Scope is what one reconcile of a Kro knows; the steps fill it in order.
type Scope struct {
	Kro *v1alpha1.Kro
	// Before is the status as the reconcile found it.
	Before             *v1alpha1.KroStatus
	TenantNamespace    string
	tenantNamespaceErr error
	Obs                Observation
	// PollInterval is the ProviderConfig's, the safety net behind the watches.
	PollInterval time.Duration
	// FluxShard is the key of the Flux shard for the Kro's Flux objects (fluxshards.go).
	FluxShard string

	Version      *v1alpha1.KroVersion
	Sources      map[string]*corev1.Secret
	ChartSecret  string
	ImageSecrets []string
	Access       *reach.ControlPlaneAccess
	// Workload is the workload cluster, for a version placed on one (workload.go).
	Workload *reach.WorkloadClusterAccess
	// PlacedRelease is the Kro's own HelmRelease as the move step found it (nil: none).
	PlacedRelease *helmv2.HelmRelease
	// Site is where kro runs: the ControlPlane's kro-system, or the tenant's namespace on
	// the workload cluster; set once both are reached.
	Site reach.Site
	// Record is what the HelmRelease records of the rollout (rollout/admission.go).
	Record rollout.Record
	// Gate: a rollout is updating the Kro, so its reconciles read kro's health on the
	// ControlPlane (rollout/health.go, kro_rollout.go).
	Gate bool
	// ChartExtras: the chart offers the deployment.extra* values, for kro on a workload
	// cluster (controlplane_parts.go).
	ChartExtras bool
	// Repo is the OCIRepository as applied, which the HelmRelease step may wait for.
	Repo *sourcev1.OCIRepository
	// requeueAfter, when set, brings the Kro back sooner than the poll: a deletion that
	// rechecks instances or waits for the end of a grace period.
	requeueAfter time.Duration
	// Writes tracks this reconcile's writes to the Kro, to wait for the cache at the end.
	Writes WriteTracker
	// Earlier is what the earlier provider left for the Kro (handover.go); nil: nothing.
	Earlier *Earlier
}

// Requeue asks for the Kro to come back within d.
func (s *Scope) Requeue(d time.Duration) {
	if d <= 0 {
		d = time.Second
	}
	if s.requeueAfter == 0 || d < s.requeueAfter {
		s.requeueAfter = d
	}
}

// Result is the reconcile's result: back within the poll interval, or sooner if asked.
func (s *Scope) Result() ctrl.Result {
	if s.requeueAfter > 0 && s.requeueAfter < s.PollInterval {
		return ctrl.Result{RequeueAfter: s.requeueAfter}
	}
	return ctrl.Result{RequeueAfter: s.PollInterval}
}

// Step is one part of the reconcile. Its error is reported under cond.
type Step struct {
	Cond string
	What string
	Run  func(context.Context, *Scope) (Result, error)
}

// NewScope starts a reconcile of the Kro. Its tenant namespace stays empty when it cannot
// be derived (see noTenantNamespace).
func NewScope(kro *v1alpha1.Kro) *Scope {
	s := &Scope{Kro: kro, Before: kro.Status.DeepCopy(), PollInterval: versions.DefaultPollInterval()}
	s.TenantNamespace, s.tenantNamespaceErr = owned.TenantNamespace(kro)
	return s
}

// NoTenantNamespace reports a Kro whose tenant namespace cannot be derived: without it
// the provider can reach nothing of the ControlPlane's, and the status says why.
func (s *Scope) NoTenantNamespace() error {
	s.Obs.noTenantNamespace(s.tenantNamespaceErr)
	return s.tenantNamespaceErr
}

// Earlier is what the earlier provider left of a Kro's installation.
type Earlier struct {
	// Release is its HelmRelease of the Helm release kro in kro-system; nil when gone.
	Release *helmv2.HelmRelease
	// Repo is its OCIRepository; nil when gone. It goes last.
	Repo *sourcev1.OCIRepository
}

// Found tells whether the earlier provider left a HelmRelease or an OCIRepository.
func (e *Earlier) Found() bool { return e != nil && (e.Release != nil || e.Repo != nil) }

// Names lists what is left, for messages.
func (e *Earlier) Names() string {
	var out []string
	if e.Release != nil {
		out = append(out, "HelmRelease "+e.Release.Namespace+"/"+e.Release.Name)
	}
	if e.Repo != nil {
		out = append(out, "OCIRepository "+e.Repo.Namespace+"/"+e.Repo.Name)
	}
	return strings.Join(out, " and ")
}

// LookUpAccess looks for the ControlPlane's access and reports it in
// ControlPlaneAccessReady: the access when it works, else why not.
func LookUpAccess(ctx context.Context, cps reach.ControlPlanes, s *Scope) (*reach.ControlPlaneAccess, *reach.NotAvailableError, error) {
	access, err := cps.Access(ctx, s.Kro)
	na, notAvailable := reach.AsNotAvailable(err)
	switch {
	case err != nil && !notAvailable:
		return nil, nil, err
	case notAvailable:
		s.Obs.AccessMissing(s.Kro, na, time.Now())
		s.Obs.AccessNotAvailable(na)
		return nil, na, nil
	}
	s.Access = access
	s.Obs.AccessMissing(s.Kro, nil, time.Now())
	s.Obs.AccessReached(s.TenantNamespace, access.Kubeconfig.Name)
	return access, nil, nil
}

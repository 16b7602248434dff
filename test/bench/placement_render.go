package bench

import (
	"fmt"
	"strings"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
)

// placementRow is one measure of the placement table, taken from each placement's run.
type placementRow struct {
	name   string
	value  func(r *PlacementRun) float64
	format func(v float64) string
	// noRatio: the ratio of the two says nothing (the machine's load).
	noRatio bool
}

func fixed(format string) func(float64) string {
	return func(v float64) string { return fmt.Sprintf(format, v) }
}

// perTenant divides a run's figure by its Kros.
func perTenant(f func(r *PlacementRun) float64) func(r *PlacementRun) float64 {
	return func(r *PlacementRun) float64 { return f(r) / float64(max(1, r.Kros)) }
}

var placementRows = []placementRow{
	{name: "provider CPU per new Kro, ms", value: func(r *PlacementRun) float64 { return r.CPUMsPerKro }, format: fixed("%.1f")},
	{name: "provider CPU over the window, cores", value: func(r *PlacementRun) float64 { return r.ProviderCores }, format: fixed("%.2f")},
	{name: "provider RSS per tenant, MiB", value: func(r *PlacementRun) float64 { return r.RSSMiBPerTenant }, format: fixed("%.3f")},
	{name: "provider Go heap in use per tenant, MiB", value: func(r *PlacementRun) float64 { return r.HeapMiBPerTenant }, format: fixed("%.3f")},
	{name: "provider RSS with every Kro Ready, MiB", value: func(r *PlacementRun) float64 { return r.RSSMiB }, format: fixed("%.1f")},
	{name: "Kro created → Ready, p50", value: func(r *PlacementRun) float64 { return r.CreatedToReady.Median }, format: ms},
	{name: "Kro created → Ready, p99", value: func(r *PlacementRun) float64 { return r.CreatedToReady.P99 }, format: ms},
	{name: "Kro created → OCIRepository and HelmRelease applied, p99", value: func(r *PlacementRun) float64 { return r.CreatedToApplied.P99 }, format: ms},
	{name: "first create → last Kro Ready, s", value: func(r *PlacementRun) float64 { return r.SecondsToAllReady }, format: fixed("%.2f")},
	{name: "Kro reconciles per Kro", value: perTenant(func(r *PlacementRun) float64 { return r.KroReconciles }), format: fixed("%.1f")},
	{name: "provider requests per Kro (every cluster)", value: perTenant(func(r *PlacementRun) float64 { return r.RequestsTotal }), format: fixed("%.1f")},
	{name: "clusters engaged per tenant", value: perTenant(func(r *PlacementRun) float64 { return float64(r.Engaged) }), format: fixed("%.0f")},
	{name: "machine CPU busy over the window", value: func(r *PlacementRun) float64 { return r.MachineBusy * 100 }, format: fixed("%.0f %%"), noRatio: true},
	{name: "workload cluster: the provider's namespaces per tenant (listed)", value: perTenant(func(r *PlacementRun) float64 { return float64(r.Workload.Namespaces) }), format: fixed("%.2f")},
	{name: "workload cluster: the provider's secrets per tenant (listed)", value: perTenant(func(r *PlacementRun) float64 { return float64(r.Workload.Secrets) }), format: fixed("%.2f")},
	{name: "workload cluster: objects added per tenant (every kind listed)", value: perTenant(func(r *PlacementRun) float64 { return float64(r.Workload.ObjectsAddedTotal) }), format: fixed("%.2f")},
	{name: "workload cluster: requests its API server served per tenant (leases excluded)", value: perTenant(func(r *PlacementRun) float64 { return r.Workload.RequestsTotal }), format: fixed("%.1f")},
	{name: "workload cluster: watches opened per tenant", value: perTenant(func(r *PlacementRun) float64 { return r.Workload.Watches }), format: fixed("%.2f")},
	{name: "workload cluster: its kube-apiserver's RSS per tenant, MiB", value: perTenant(func(r *PlacementRun) float64 { return r.Workload.RSSMiBAfter - r.Workload.RSSMiBBefore }), format: fixed("%.2f")},
}

// Ratio is wl over cp as "1.23×"; "—" where it says nothing: cp is not above 0 (nothing
// to compare with, or a memory difference lost in the noise) or wl is below 0.
func Ratio(wl, cp float64) string {
	if cp <= 0 || wl < 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f×", wl/cp)
}

// placementCell is a row's value for one run, "—" without the run.
func placementCell(row placementRow, r *PlacementRun) string {
	if r == nil {
		return "—"
	}
	return row.format(row.value(r))
}

// placementMarkdown renders the placement run.
func placementMarkdown(p func(string, ...any), r *PlacementResults) {
	p("")
	p("## Placement: kro on the ControlPlane or on a shared workload cluster")
	p("")
	p("Measured %s, took %s, provider mode (the harness plays Flux). For each placement an environment of its own: %d Kros,",
		r.Started.Format("2006-01-02 15:04 MST"), r.Duration, r.Kros)
	p("each with its own ControlPlane credentials on %d shared API server(s), on a version placed `ControlPlane` or", r.SharedAPIServers)
	p("`WorkloadCluster`, created at once; beside them one more API server plays the workload cluster all tenants share (idle in the")
	p("ControlPlane placement, as a check). For `WorkloadCluster` each tenant namespace has the labelled workload kubeconfig secret")
	p("(`%s: \"true\"`; one ServiceAccount token for every tenant). The harness plays", v1alpha1.LabelWorkloadClusterKubeconfig)
	p("source-controller with kro's real chart %s, packaged once and served over HTTP: each OCIRepository gets", r.ChartVersion)
	p("`status.artifact` (URL, digest, revision `%s@sha256:…`) with `Ready`, in both placements; and helm-controller: each", r.ChartVersion)
	p("HelmRelease is set `Ready` at once. In the WorkloadCluster placement the provider, per tenant, engages the workload cluster")
	p("(a cache of its secrets in the tenant's namespace there), makes that namespace, fetches and renders the chart (cached per")
	p("digest and values) and applies kro's CRDs and RBAC on the ControlPlane, mints kro's own ServiceAccount token there and writes")
	p("it into the secret `kro-controlplane-access` on the workload cluster. kro itself does not run, and the version has no image")
	p("pull secrets in either placement (each would add one copy per tenant, on the workload cluster or on the ControlPlane).")
	p("")
	p("The window of the CPU, request and reconcile figures runs from the first create until every Kro is Ready, every cluster")
	p("engaged and the provider's queue empty. Memory per tenant is the provider's memory with every Kro Ready minus before the")
	p("first Kro, over N. The workload cluster's figures compare its API server before the first Kro and after the window: its")
	p("objects of every kind it lists (what etcd holds), requests by verb (its own clients' included, leases excluded), open")
	p("watches, RSS. These API servers run no controller-manager: on a real cluster each new namespace also gets a ServiceAccount")
	p("`default` and the ConfigMap `kube-root-ca.crt`. On the shared ControlPlane API servers tenants share kro-system and the")
	p("cluster-scoped parts, so what the WorkloadCluster placement adds there is not counted per tenant.")
	p("")
	p("| measure | ControlPlane | WorkloadCluster | WorkloadCluster / ControlPlane |")
	p("|---|---|---|---|")
	for _, row := range placementRows {
		ratio := "—"
		if !row.noRatio && r.ControlPlane != nil && r.WorkloadCluster != nil {
			ratio = Ratio(row.value(r.WorkloadCluster), row.value(r.ControlPlane))
		}
		p("| %s | %s | %s | %s |", row.name, placementCell(row, r.ControlPlane), placementCell(row, r.WorkloadCluster), ratio)
	}
	for _, run := range []*PlacementRun{r.ControlPlane, r.WorkloadCluster} {
		if run == nil {
			continue
		}
		p("")
		p("- %s: provider requests %s; Kros seen Ready %d of %d; clusters engaged %d; memory %.1f → %.1f MiB RSS, %.1f → %.1f MiB heap;",
			run.Placement, verbs(run.ProviderRequests), run.CreatedToReady.Count, run.Kros, run.Engaged,
			run.BaselineRSSMiB, run.RSSMiB, run.BaselineHeapMiB, run.HeapMiB)
		p("  workload cluster: objects added %s, requests %s, kube-apiserver RSS %.1f → %.1f MiB; load average at the first create %.2f.",
			intCounts(run.Workload.ObjectsAdded), verbs(run.Workload.Requests), run.Workload.RSSMiBBefore, run.Workload.RSSMiBAfter, run.Load1)
	}
	p("")
	p("Reproduce: `%s` (merges this section into docs/measurements/benchmarks.json and docs/measurements/benchmarks.md, leaving the other figures as they are).", placementReproduce(r))
}

// intCounts lists counts by key: "namespaces 2, secrets 2"; "none" for none.
func intCounts(m map[string]int) string { return joinSorted(m, "%s %d", ", ", "none") }

func placementReproduce(r *PlacementResults) string {
	args := []string{"-modes placement", fmt.Sprintf("-placement-kros %d", r.Kros)}
	if r.SharedAPIServers != 2 {
		args = append(args, fmt.Sprintf("-shared-apiservers %d", r.SharedAPIServers))
	}
	if len(r.ProviderFlags) > 0 {
		args = append(args, fmt.Sprintf("-provider-flags %q", strings.Join(r.ProviderFlags, " ")))
	}
	return "go tool task bench -- " + strings.Join(args, " ")
}

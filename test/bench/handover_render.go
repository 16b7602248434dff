package bench

import (
	"fmt"
	"strings"
)

// EvaluateHandover records, for each hand-over run, whether every Kro was handed over
// and no look ever found two HelmReleases driving the Helm release kro in one tenant
// namespace; never asserted.
func EvaluateHandover(r *HandoverResults) []Target {
	var out []Target
	for _, run := range r.Runs {
		out = append(out, Target{
			Name:   fmt.Sprintf("hand-over of %d Kro(s) from the earlier provider: tenant namespaces with two HelmReleases of the release kro not suspended", run.Kros),
			Target: "0, and every Kro handed over",
			Measured: fmt.Sprintf("%d in %d looks (%d with the earlier HelmRelease suspended beside the provider's); %d of %d handed over after %.2f s",
				run.Violations, run.Looks, run.Overlaps, run.HandedOver.Count, run.Kros, run.SecondsToAll),
			Met: run.Violations == 0 && run.HandedOver.Count == run.Kros,
		})
	}
	return out
}

// handoverMarkdown renders the hand-over runs.
func handoverMarkdown(p func(string, ...any), r *HandoverResults) {
	p("")
	p("## Hand-over from the earlier provider")
	p("")
	p("Measured %s, took %s, provider mode (the harness plays Flux). Each run starts an environment of its own with N Kros, each",
		r.Started.Format("2006-01-02 15:04 MST"), r.Duration)
	p("with its own ControlPlane credentials on %d shared API server(s), as the earlier provider (openmcp-project/service-provider-kro", r.SharedAPIServers)
	p("v1.3.0) leaves them (`testenv.EarlierInstallation`): the OCIRepository `kro-oci-repository` (chart %s) and the HelmRelease", r.EarlierChartVersion)
	p("`kro-helm-release`, which the harness, as source- and helm-controller, has set Ready; the access secret %s;", accessText(r.AccessRequests))
	p("the copy of the chart pull secret; and the Kro with the finalizer and a version the ProviderConfig offers. The shared API servers carry no image")
	p("pull secret copies (all the ControlPlanes on one API server share kro-system). Then the provider process starts, and the")
	p("harness keeps playing Flux: the provider's own OCIRepository and HelmRelease are set Ready as soon as they appear (with real")
	p("Flux that first reconcile is a `helm upgrade` of the release kro, which adds its time to each Kro's). A suspended HelmRelease")
	p("is left alone, as helm-controller leaves it, and no Flux finalizers are played: a deleted object goes at once.")
	p("")
	p("The harness looks every %.0f ms (or as soon as the last look is done, when it took longer), with one List each of the", r.LookIntervalMs)
	p("HelmReleases, OCIRepositories, secrets%s and Kros. A Kro is **handed over** at the first look that finds it Ready (for", accessList(r.AccessRequests, ", AccessRequests"))
	p("its generation) with none of its earlier objects left: HelmRelease, OCIRepository, access secret, chart pull secret copy%s.", accessList(r.AccessRequests, ", AccessRequest"))
	p("Times are from the provider's process start to the beginning of the look that first saw the state, so they are late by up")
	p("to a look interval. A **violation** is a look and a tenant namespace with two HelmReleases of the Helm")
	p("release kro (same storage namespace) that are not suspended: both would drive the release. An **overlap** is a look and a")
	p("tenant namespace with the earlier HelmRelease suspended beside the provider's: the hand-over's middle. The looks see only")
	p("what stands at their moment: a state shorter than a look interval can fall between two looks (the overlaps say how often")
	p("the middle was caught).")
	p("")
	p("| N | provider start → its readyz answers | → earlier HelmRelease suspended: median / p99 | → own HelmRelease applied: median / p99 | → first Kro handed over | → last Kro handed over | per Kro: p50 / p99 / max | looks (median look) | violations | overlaps seen |")
	p("|---|---|---|---|---|---|---|---|---|---|")
	for _, run := range r.Runs {
		p("| %d | %.2f s | %s / %s | %s / %s | %.2f s | %.2f s | %s / %s / %s | %d (%s) | %d | %d |", run.Kros, run.SecondsToProviderReady,
			ms(run.Suspended.Median), ms(run.Suspended.P99), ms(run.OwnApplied.Median), ms(run.OwnApplied.P99),
			run.SecondsToFirst, run.SecondsToAll, ms(run.HandedOver.Median), ms(run.HandedOver.P99), ms(run.HandedOver.Max),
			run.Looks, ms(run.LookDuration.Median), run.Violations, run.Overlaps)
	}
	for _, run := range r.Runs {
		for _, v := range run.ViolationExamples {
			p("")
			p("- N=%d, violation: %s", run.Kros, v)
		}
	}
	p("")
	p("The provider's work from its process start (start-up included) until the last Kro was handed over: CPU, its requests")
	p("(client side, `rest_client_requests_total`) by cluster and method, and Kro reconciles. The machine's load is what else ran:")
	p("the API servers, etcd and the harness, and other work on a shared machine (the 1-minute load average at the provider's start).")
	p("")
	p("| N | provider CPU seconds | provider requests (by cluster and method) | per Kro | of which writes | Kro reconciles | machine CPU busy | load average at start (%d CPUs) |", r.Machine.CPUs)
	p("|---|---|---|---|---|---|---|---|")
	for _, run := range r.Runs {
		p("| %d | %.2f | %.0f (%s) | %.1f | %.0f | %.0f | %.0f %% | %.2f |", run.Kros, run.ProviderCPUSeconds, run.RequestsTotal, verbs(run.ProviderRequests),
			run.RequestsTotal/float64(max(1, run.Kros)), run.WriteRequests, run.KroReconciles, run.MachineBusy*100, run.Load1)
	}
	if len(r.Targets) > 0 {
		p("")
		p("| measure | target | measured | met |")
		p("|---|---|---|---|")
		for _, t := range r.Targets {
			met := "yes"
			if !t.Met {
				met = "**no**"
			}
			p("| %s | %s | %s | %s |", t.Name, t.Target, t.Measured, met)
		}
	}
	p("")
	p("Reproduce: `%s` (merges this section into docs/measurements/benchmarks.json and docs/measurements/benchmarks.md, leaving the other figures as they are).", handoverReproduce(r))
}

// accessText says how the earlier installations got their access.
func accessText(withAccess bool) string {
	if withAccess {
		return "of its AccessRequest, granted (openmcp's AccessRequest CRD is installed on the platform cluster)"
	}
	return "(without an AccessRequest: openmcp's AccessRequest CRD could not be installed on the platform cluster)"
}

// accessList is what when the earlier installations had AccessRequests, or nothing.
func accessList(withAccess bool, what string) string {
	if withAccess {
		return what
	}
	return ""
}

func handoverReproduce(r *HandoverResults) string {
	var ns []string
	for _, run := range r.Runs {
		ns = append(ns, fmt.Sprint(run.Kros))
	}
	return fmt.Sprintf("go tool task bench -- -modes handover -handover-kros %s -handover-look %gms -shared-apiservers %d",
		strings.Join(ns, ","), r.LookIntervalMs, r.SharedAPIServers)
}

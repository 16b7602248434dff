package bench

import (
	"fmt"
	"strconv"
	"strings"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
)

// EvaluateRollout records, for each rollout under a policy, whether the most Kros
// unavailable at once stayed within maxUnavailable (issue 15); never asserted.
func EvaluateRollout(r *RolloutResults) []Target {
	var out []Target
	for _, run := range r.Runs {
		if run.Limit == 0 {
			continue
		}
		t := Target{
			Name:   fmt.Sprintf("rollout of a helmValues change to %d Kros under %s: most Kros unavailable at once", run.Kros, run.Policy),
			Target: fmt.Sprintf("≤ %d (maxUnavailable)", run.Limit),
			Measured: fmt.Sprintf("%d (the status admitted at most %d at once; %d HelmReleases changed before their Kro was admitted); Complete after %.1f s",
				run.MostUnavailable, run.MostAdmitted, run.ChangedBeforeAdmitted, run.SecondsToComplete),
			Met: run.MostUnavailable <= run.Limit && run.MostAdmitted <= run.Limit && run.ChangedBeforeAdmitted == 0,
		}
		out = append(out, t)
	}
	if u := r.Unavailable; u != nil {
		run := u.Run
		out = append(out, Target{
			Name: fmt.Sprintf("rollout of a helmValues change to %d Kros under %s with %d of them unavailable before: most Kros unavailable at once, counting those, and Kros counted as failed",
				run.Kros, run.Policy, run.UnavailableBefore),
			Target: fmt.Sprintf("≤ %d (maxUnavailable); 0 failed; the message names the %d as given the revision while unavailable", run.Limit, run.UnavailableBefore),
			Measured: fmt.Sprintf("%d; %d failed (%d of those unavailable before); named: %s; Complete after %.1f s",
				run.MostUnavailable, run.FailedKros, run.FailedUnavailableBefore, yesNo(run.MessageNamesUnavailable), run.SecondsToComplete),
			Met: unavailableMet(run),
		})
	}
	return out
}

// unavailableMet: the run with Kros unavailable before stayed within maxUnavailable,
// counted no Kro as failed and named the unavailable ones.
func unavailableMet(run RolloutRun) bool {
	return run.MostUnavailable <= run.Limit && run.ChangedBeforeAdmitted == 0 && run.FailedKros == 0 && run.FailedUnavailableBefore == 0 &&
		run.MessageNamesUnavailable && run.SecondsToComplete > 0
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// rolloutMarkdown renders the rollout run.
func rolloutMarkdown(p func(string, ...any), r *RolloutResults) {
	p("")
	p("## Rollout of a ProviderConfig change")
	p("")
	p("Measured %s, took %s, provider mode (the harness plays Flux). %d Kros, each with its own ControlPlane credentials on %d shared",
		r.Started.Format("2006-01-02 15:04 MST"), r.Duration, r.Kros, r.SharedAPIServers)
	p("API server(s), are created at once and become Ready (created → Ready: %s, median / p95 / p99 / max).", distCell(r.CreatedToReady))
	p("Then the `helmValues` of a version change, each change with a marker value of its own: %s.", runsText(r.Runs))
	p("Before each change the rollout policy is set and the provider has settled (queue empty, every version's rollout `Complete`).")
	p("")
	p("**Helm's upgrade time.** The harness plays helm-controller: when a HelmRelease's spec gets a new generation it sets `Ready`")
	p("Unknown (reason Progressing) for it at once, as helm-controller does when it takes an upgrade up, and `Ready` True")
	p("**%.1f s** later, standing in for `helm upgrade` and the wait for kro's Deployment to become available. An install (a", r.HelmUpgradeSeconds)
	p("HelmRelease without `Ready`) is marked Ready at once, as in the other modes. Many upgrades run at once, as helm-controller's")
	p("workers would run them.")
	p("")
	p("**Unavailable.** A Kro counts as unavailable from the moment the harness's watch sees its HelmRelease carry the new values")
	p("until the watch sees the Kro Ready with the new revision (`status.revision` the version's revision after the change, phase")
	p("Ready for its generation: what the rollout's health check reads). \"Most unavailable\" is the most such periods overlapping")
	p("at one moment, from the watches' event times. \"Admitted\" is the longest `status.versions[].updating` of the ProviderConfig")
	p("the harness saw, and \"changed before admitted\" counts HelmReleases whose change has a lower resourceVersion on the")
	p("platform API server than the first ProviderConfig status that admitted their Kro. Times are seconds from the ProviderConfig")
	p("update; requests are the provider's own (client side, `rest_client_requests_total`) from the update until the rollout was")
	p("complete and the provider's queue empty.")
	p("")
	p("Per Kro, unavailable, and the two parts of it: median / p95 / max.")
	p("")
	p("| rollout | Kros | policy (scaled) | → first HelmRelease changed | → all Kros Ready with the new revision | → status `Complete` | most unavailable at once | within maxUnavailable | most admitted | changed before admitted | unavailable per Kro: median / p95 / max | of that, HelmRelease changed → Ready (the harness as helm) | and HelmRelease Ready → Kro Ready with the revision (the provider) |")
	p("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, run := range r.Runs {
		within, admitted, before := "—", "—", "—"
		if run.Limit > 0 {
			within = "met"
			if run.MostUnavailable > run.Limit || run.MostAdmitted > run.Limit || run.ChangedBeforeAdmitted > 0 {
				within = "**no**"
			}
			admitted, before = fmt.Sprint(run.MostAdmitted), fmt.Sprint(run.ChangedBeforeAdmitted)
		}
		p("| %s | %d | %s (%s) | %.2f s | %.2f s | %.2f s | %d | %s | %s | %s | %s | %s | %s |", run.Name, run.Kros, run.Policy, limitText(run.Limit),
			run.SecondsToFirstChange, run.SecondsToAllUpdated, run.SecondsToComplete, run.MostUnavailable, within, admitted, before,
			medP95Max(run.Unavailable), medP95Max(run.Upgrade), medP95Max(run.ReadyToKroReady))
	}
	p("")
	p("At rest before the first change (%.0f s, every Kro Ready), the provider made %.1f requests/s (%s): probes of", r.RestWindowSeconds, total(r.RestRequestsPerSecond), rates(r.RestRequestsPerSecond))
	p("ControlPlanes gone quiet and watches restarting, which go on during a rollout. \"Beyond rest\" takes that rate over the counted window off the requests.")
	p("A change of the ProviderConfig's spec brings every Kro back once, whatever its version (controllers/watches.go): each run's")
	p("Kro reconciles include one for each of the %d Kros, also those of the version that did not change.", r.Kros)
	p("")
	p("| rollout | provider requests (by cluster and method) | counted over | beyond rest | beyond rest per Kro | of which writes | ProviderConfig status writes (watch; PATCHes at the API server) | reconciles: Kro / ProviderConfig | HelmRelease new generations; upgrades played | object changes; Kros seen not Ready |")
	p("|---|---|---|---|---|---|---|---|---|---|")
	for _, run := range r.Runs {
		p("| %s | %.0f (%s) | %.1f s | %.0f | %.1f | %.0f | %d; %.0f | %.0f / %.0f | %d; %d | %d; %s |", run.Name, run.RequestsTotal, verbs(run.ProviderRequests),
			run.WindowSeconds, run.RequestsBeyondRest, run.RequestsBeyondRest/float64(max(1, run.Kros)), run.WriteRequests, run.StatusWrites, run.StatusPatches,
			run.KroReconciles, run.ProviderConfigReconciles, run.HelmReleaseSpecChanges, run.HelmUpgrades, run.ObjectChanges, counts(run.KrosNotReady))
	}
	if r.Unavailable != nil {
		unavailableMarkdown(p, r, r.Unavailable)
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
	p("Reproduce: `%s` (merges this section into docs/measurements/benchmarks.json and docs/measurements/benchmarks.md, leaving the other figures as they are).", rolloutReproduce(r))
}

func medP95Max(d Dist) string {
	return fmt.Sprintf("%s / %s / %s", ms(d.Median), ms(d.P95), ms(d.Max))
}

// runsText says which Kros each change reached under which policy.
func runsText(runs []RolloutRun) string {
	var parts []string
	for _, run := range runs {
		what := "without `spec.rollout` (every HelmRelease changes at once)"
		if run.Limit > 0 {
			what = "with `spec.rollout` {" + run.Policy + "}"
		}
		parts = append(parts, fmt.Sprintf("version %s, %d Kros, %s", run.Version, run.Kros, what))
	}
	return strings.Join(parts, "; then ")
}

func rolloutReproduce(r *RolloutResults) string {
	var main, one, mu, un, share string
	for _, run := range r.Runs {
		switch {
		case run.Version == versionOne:
			one = fmt.Sprint(run.Kros)
		case run.Limit > 0:
			main, mu = fmt.Sprint(run.Kros), strings.TrimPrefix(run.Policy, "maxUnavailable: ")
		}
	}
	if one == "" {
		one = "0"
	}
	un, share = "0", "5%"
	if u := r.Unavailable; u != nil {
		un, share = fmt.Sprint(u.Kros), fmt.Sprintf("%g%%", u.SharePercent)
	}
	return fmt.Sprintf("go tool task bench -- -modes rollout -rollout-kros %s -rollout-max-unavailable %s -rollout-one-kros %s -rollout-unavailable-kros %s -rollout-unavailable-share %s -rollout-helm-upgrade %gs -shared-apiservers %d",
		main, mu, one, un, share, r.HelmUpgradeSeconds, r.SharedAPIServers)
}

// unavailableMarkdown renders the rollout with Kros unavailable before the change.
func unavailableMarkdown(p func(string, ...any), r *RolloutResults, u *RolloutUnavailable) {
	run := u.Run
	p("")
	p("**Kros unavailable before the change.** In an environment of its own (took %s), %d Kros on one version, each with its own", u.Duration, u.Kros)
	p("ControlPlane credentials on the %d shared API server(s), are created at once and become Ready (created → Ready: %s).", r.SharedAPIServers, distCell(u.CreatedToReady))
	p("Then the harness, playing helm-controller, fails the release of %d of them (%g %%, every %sKro in name order): their", run.UnavailableBefore, u.SharePercent, nth(u.Kros, run.UnavailableBefore))
	p("HelmRelease gets `Ready` False, reason `UpgradeFailed` (\"Helm upgrade failed … not ready\"), the last deployed release staying in")
	p("its history, and every later upgrade of it fails the same way after the upgrade time (`Ready` Unknown meanwhile). So these")
	p("Kros are unavailable before the change and stay so through it: a failing release is what the harness, standing in for")
	p("helm-controller, can play as it is (it cannot make a ControlPlane unreachable without cutting off the provider's other")
	p("ControlPlanes on the same shared API server). With `spec.rollout` {%s} set, the version's status said, before the change:", run.Policy)
	p("%s.", "`"+u.StatusBefore+"`")
	if !strings.HasPrefix(u.StatusBefore, string(v1alpha1.RolloutComplete)) {
		p("Nothing had changed yet, but a Kro that is unavailable without an admission counts neither as updated nor as given the")
		p("revision while unavailable, so the version does not read `Complete` before the change.")
	}
	p("Then the version's `helmValues` change. \"Most unavailable\" counts the %d as unavailable all along; \"counted as failed\" are the", run.UnavailableBefore)
	p("Kros any status of the new revision listed in `status.versions[].failed`; `Complete` here means %d Kros updated and %d given", run.Kros-run.UnavailableBefore, run.UnavailableBefore)
	p("the revision while unavailable (their HelmRelease carries it). Requests beyond rest take the rate at rest of this environment")
	p("(%.1f requests/s with %d Kros, %s).", total(u.RestRequestsPerSecond), u.Kros, rates(u.RestRequestsPerSecond))
	p("")
	p("| rollout | Kros | unavailable before | policy (scaled) | → all available Kros Ready with the new revision | → status `Complete` | most unavailable at once, counting those unavailable before | within maxUnavailable | most admitted | changed before admitted | Kros counted as failed: of those unavailable before / all | ProviderConfig status writes (watch; PATCHes at the API server) | provider requests beyond rest; of which writes | unavailable per available Kro: median / p95 / max | machine CPU busy |")
	p("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	within := "met"
	if run.MostUnavailable > run.Limit {
		within = "**no**"
	}
	p("| %s | %d | %d | %s (%s) | %.2f s | %.2f s | %d | %s | %d | %d | %d / %d | %d; %.0f | %.0f; %.0f | %s | %.0f %% |", run.Name, run.Kros, run.UnavailableBefore,
		run.Policy, limitText(run.Limit), run.SecondsToAllUpdated, run.SecondsToComplete, run.MostUnavailable, within, run.MostAdmitted, run.ChangedBeforeAdmitted,
		run.FailedUnavailableBefore, run.FailedKros, run.StatusWrites, run.StatusPatches, run.RequestsBeyondRest, run.WriteRequests,
		medP95Max(run.Unavailable), run.MachineBusy*100)
	p("")
	names := "names them"
	if !run.MessageNamesUnavailable {
		names = "does **not** name exactly them"
	}
	p("The version's message in the first `Complete` status %s: `%s`.", names, run.CompleteMessage)
	p("The machine's load average was %.1f on %d cores when this run started, and its CPU was %.0f %% busy during the change:", u.LoadAverage, r.Machine.CPUs, run.MachineBusy*100)
	if u.LoadAverage > float64(r.Machine.CPUs) {
		p("other test runs shared the machine, so the times are noisy. What matters are the counts: the most unavailable and the failures")
		p("do not depend on the machine's speed; the status writes do a little (how many changes one write takes in).")
	} else {
		p("the times depend on the machine's speed; the most unavailable and the failures do not, the status writes a little.")
	}
}

// nth says which Kro of n is picked when picked of them are: "20th" for 50 of 1,000.
func nth(n, picked int) string {
	if picked == 0 {
		return "—"
	}
	k := n / picked
	suffix := "th"
	switch {
	case k%100 >= 11 && k%100 <= 13:
	case k%10 == 1:
		suffix = "st"
	case k%10 == 2:
		suffix = "nd"
	case k%10 == 3:
		suffix = "rd"
	}
	if k == 1 {
		return ""
	}
	return strconv.Itoa(k) + suffix + " "
}

package bench

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// fluxShardsMarkdown renders the run with real Flux sharded by spec.fluxShards.
func fluxShardsMarkdown(p func(string, ...any), f *FluxResults) {
	p("")
	p("## Real Flux, sharded")
	p("")
	s := f.Shards
	if s == nil {
		p("The run recorded no shard figures.")
		return
	}
	p("The same run as [real Flux](#real-flux), with Flux's controllers sharded as Flux documents it: the environment's")
	p("source- and helm-controller run with `--watch-label-selector='!sharding.fluxcd.io/key'`, and one more pair per key")
	p("with `--watch-label-selector=sharding.fluxcd.io/key=<key>`. The ProviderConfig's `spec.fluxShards` is %s while the",
		codeList(s.Keys))
	p("Kros are installed; at steady state the key `%s` is added (its pair is already running), which moves the Kros it now owns.", s.Move.AddedKey)
	fluxRunMarkdown(p, f)
	p("")
	p("| shards | |")
	p("|---|---|")
	var spread []string
	for _, st := range s.Spread {
		spread = append(spread, fmt.Sprintf("%s %d", st.Key, st.Kros))
	}
	p("| Kros per key (ProviderConfig `status.fluxShards`) | %s |", strings.Join(spread, ", "))
	p("| tenants' HelmReleases each helm-controller reconciled (`gotk_reconcile_duration_seconds`) | %s |", byShard(s.Reconciled, "%d"))
	p("| of those, reconciled by a helm-controller of neither their key before the move nor after it | %d |", s.Foreign)
	p("| RSS of each shard's controllers, every Kro Ready | %s |", byShard(s.ControllerRSSMiB, "%.1f MiB"))
	m := s.Move
	p("| key `%s` added: Kros moved, stayed | %d, %d |", m.AddedKey, m.Moved, m.Stayed)
	p("| ProviderConfig updated → every moved HelmRelease carries the new key | %s |", ms(m.ToRelabelledMs))
	p("| ProviderConfig updated → the new shard's helm-controller has handled a reconcile request on each | %s |", ms(m.ToReconciledMs))
	p("| Kros seen with HelmReleaseReady not True during the move | %d |", m.NotReady)
	p("| kro's Helm release revisions on the ControlPlanes, before → after the move | %d → %d |", m.ReleasesBefore, m.ReleasesAfter)
	p("")
	p("Reproduce: `go tool task bench -- -modes fluxshards -flux-controlplanes %d -flux-shards %d -repeats %d` (merges this section into docs/measurements/benchmarks.json and docs/measurements/benchmarks.md).",
		f.ControlPlanes, len(s.Keys), f.Repeats)
}

func codeList(keys []string) string {
	var out []string
	for _, k := range keys {
		out = append(out, "`"+k+"`")
	}
	return "[" + strings.Join(out, ", ") + "]"
}

// byShard renders a figure per key, sorted, the unsharded pair ("") first.
func byShard[V any](by map[string]V, format string) string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(by)) {
		name := k
		if k == "" {
			name = "unsharded"
		}
		out = append(out, fmt.Sprintf("%s "+format, name, by[k]))
	}
	return strings.Join(out, ", ")
}

package rollout

import (
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/foreign"
	"github.com/openmcp-project/service-provider-kro/controllers/versions"
)

// A plan (spec.rollout.plan) is a rollout that admits nobody yet: the version's status
// shows the Kros the rollout would reach, in the order it would admit them, their
// ResourceGraphDefinitions, and what changes between the revision they run and the new
// one. Everything in it is computed from the cluster on every reconcile, so a lost status
// gives the same plan back.
//
// Approving it (clearing the flag) starts the rollout from that plan: the first
// reconcile after the approval reads the plan from the status it last wrote, and the
// rollout admits the Kros in the plan's order, those the plan does not name (they came
// while it was shown, or beyond its length) after them in the usual order. The approved
// plan stays in the status while Kros wait, so that every later reconcile follows it too;
// a plan of another revision than the version's current one (the artifacts changed
// again) is void, and the plan is made anew. A status lost after the approval gives the
// usual order, which is the plan's unless Kros came or changed their health meanwhile.

const (
	// planMaxKros is how many Kros a plan lists; the CRD allows as many.
	planMaxKros = 100
	// planMaxPaths is how many changed paths of the helmValues a plan names.
	planMaxPaths = 5
	// planTextMax is the length of a plan's changes and summary in the CRD.
	planTextMax = 512
)

// makePlan is the plan of the version's rollout: the waiting Kros in admission order,
// their ResourceGraphDefinitions, and the changes from the revision most of them run.
func (p *Plan) makePlan(isCanary canaryFunc, view View) *v1alpha1.PlannedRollout {
	order := admissionOrder(isCanary, p.waiting)
	plan := &v1alpha1.PlannedRollout{Revision: p.Revision, From: mostRun(order, view.Records)}
	for i, k := range order {
		plan.RGDs += RgdsTotal(k)
		if i >= planMaxKros {
			plan.More++
			continue
		}
		pk := v1alpha1.PlannedKro{Kro: KroKey(k), Canary: isCanary != nil && isCanary(k), Unavailable: !availableKro(k)}
		if s := k.Status.ResourceGraphDefinitions; s != nil {
			pk.RGDs, pk.RGDsReady = ptr.To(s.Total), ptr.To(s.Ready)
		}
		plan.Kros = append(plan.Kros, pk)
	}
	plan.Changes = foreign.Text(artifactChanges(view.Artifacts[plan.From], view.Current, plan.From), planTextMax)
	plan.Summary = foreign.Text(planSummary(p.Version, plan), planTextMax)
	return plan
}

// admissionOrder is the order in which the rollout admits the waiting Kros (available
// ones first, then unavailable ones, each in name order): canaries before the others.
// canariesFirst admits only canaries while one waits, and admit takes an unavailable
// Kro only once no available one waits; this is the order both together give.
func admissionOrder(isCanary canaryFunc, waiting []*v1alpha1.Kro) []*v1alpha1.Kro {
	if isCanary == nil {
		return slices.Clone(waiting)
	}
	var canaries, others []*v1alpha1.Kro
	for _, k := range waiting {
		if isCanary(k) {
			canaries = append(canaries, k)
		} else {
			others = append(others, k)
		}
	}
	return append(canaries, others...)
}

// canarySelector is the policy's canary selector; nil without one. It selects Kros by
// their Namespace's labels (rollout_canary.go).
func canarySelector(policy *v1alpha1.RolloutPolicy) (labels.Selector, error) {
	if policy == nil || policy.Canary == nil {
		return nil, nil
	}
	s, err := metav1.LabelSelectorAsSelector(policy.Canary)
	if err != nil {
		return nil, fmt.Errorf("spec.rollout.canary: %w", err)
	}
	return s, nil
}

// approvedPlan is the plan the rollout follows: the previous status's plan of the same
// revision, once the flag is cleared, while Kros wait. nil: none.
func approvedPlan(prev *v1alpha1.VersionStatus, revision string, waiting int) *v1alpha1.PlannedRollout {
	if prev == nil || prev.Plan == nil || prev.Plan.Revision != revision || waiting == 0 {
		return nil
	}
	return prev.Plan.DeepCopy()
}

// followPlan orders the candidates for admission as the plan has them; those it does
// not name keep their order, after the named ones.
func followPlan(plan *v1alpha1.PlannedRollout, candidates []*v1alpha1.Kro) []*v1alpha1.Kro {
	if plan == nil {
		return candidates
	}
	rank := make(map[string]int, len(plan.Kros))
	for i, pk := range plan.Kros {
		rank[pk.Kro] = i
	}
	rankOf := func(k *v1alpha1.Kro) int {
		if r, ok := rank[KroKey(k)]; ok {
			return r
		}
		return len(plan.Kros)
	}
	out := slices.Clone(candidates)
	slices.SortStableFunc(out, func(a, b *v1alpha1.Kro) int { return rankOf(a) - rankOf(b) })
	return out
}

// mostRun is the revision most of the Kros run, the first by name of those run by as
// many: the one a plan's changes are measured from.
func mostRun(kros []*v1alpha1.Kro, records map[string]Record) string {
	count := map[string]int{}
	for _, k := range kros {
		count[RunningRevision(k, records[KroKey(k)])]++
	}
	best := ""
	for _, rev := range slices.Sorted(maps.Keys(count)) {
		if best == "" || count[rev] > count[best] {
			best = rev
		}
	}
	return best
}

// planSummary is the plan on one line, for kubectl get -o wide and the event.
func planSummary(version string, plan *v1alpha1.PlannedRollout) string {
	n, canaries, unavailable := len(plan.Kros)+int(plan.More), 0, 0
	for _, pk := range plan.Kros {
		if pk.Canary {
			canaries++
		}
		if pk.Unavailable {
			unavailable++
		}
	}
	s := fmt.Sprintf("%s: %d Kros", version, n)
	var about []string
	switch {
	case canaries == 1:
		about = append(about, "1 canary")
	case canaries > 1:
		about = append(about, fmt.Sprintf("%d canaries", canaries))
	}
	if unavailable > 0 {
		about = append(about, fmt.Sprintf("%d unavailable", unavailable))
	}
	if len(about) > 0 {
		s += " (" + strings.Join(about, ", ") + ")"
	}
	s += fmt.Sprintf(", %d RGDs", plan.RGDs)
	if plan.Changes != "" {
		s += "; " + plan.Changes
	}
	return s
}

// planMessage is the version's message while its rollout is planned.
func planMessage(plan *v1alpha1.PlannedRollout) string {
	return fmt.Sprintf("planned: revision %s would reach %d Kros, first %s; set spec.rollout.plan to false to approve",
		plan.Revision, len(plan.Kros)+int(plan.More), plannedNames(plan))
}

// plannedNames names the plan's first Kros, and how many more it reaches.
func plannedNames(plan *v1alpha1.PlannedRollout) string {
	names := make([]string, 0, min(listedNames, len(plan.Kros)))
	for _, pk := range plan.Kros[:min(listedNames, len(plan.Kros))] {
		names = append(names, foreign.Middle(pk.Kro, listedNameMax))
	}
	return listOf(names, len(plan.Kros)+int(plan.More))
}

// artifactChanges says what changes from the artifacts of revision from (old; nil when
// they cannot be read) to the current ones: chart URL, chart version and pull secret,
// then the paths of the helmValues' leaves. Values are never shown: helmValues may hold
// credentials or other sensitive settings, and a status is read widely.
func artifactChanges(old, cur *v1alpha1.KroVersion, from string) string {
	if cur == nil {
		return ""
	}
	if old == nil {
		return "the artifacts of revision " + from + " are not kept: changes unknown"
	}
	var parts []string
	if a, b := versions.ChartURL(old), versions.ChartURL(cur); a != b {
		parts = append(parts, fmt.Sprintf("chartURL %s → %s", a, b))
	}
	if old.ChartVersion != cur.ChartVersion {
		parts = append(parts, fmt.Sprintf("chart %s → %s", old.ChartVersion, cur.ChartVersion))
	}
	if old.ChartPullSecret != cur.ChartPullSecret {
		parts = append(parts, fmt.Sprintf("chartPullSecret %s → %s", orNone(old.ChartPullSecret), orNone(cur.ChartPullSecret)))
	}
	if paths := valuesChanges(old, cur); len(paths) > 0 {
		parts = append(parts, "values: "+pathList(paths))
	}
	if len(parts) == 0 {
		return "no change"
	}
	return strings.Join(parts, "; ")
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// valuesChanges are the paths of the helmValues' leaves that change (~), appear (+) or
// go (-), sorted by path. Unreadable values count as empty.
func valuesChanges(old, cur *v1alpha1.KroVersion) []string {
	a, b := leaves(old), leaves(cur)
	var out []string
	for _, path := range slices.Sorted(maps.Keys(a)) {
		bv, ok := b[path]
		switch {
		case !ok:
			out = append(out, "-"+path)
		case !reflect.DeepEqual(a[path], bv):
			out = append(out, "~"+path)
		}
	}
	for _, path := range slices.Sorted(maps.Keys(b)) {
		if _, ok := a[path]; !ok {
			out = append(out, "+"+path)
		}
	}
	slices.SortStableFunc(out, func(x, y string) int { return strings.Compare(x[1:], y[1:]) })
	return out
}

// leaves flattens a version's helmValues into their leaves by dotted path: scalars,
// lists (compared whole) and empty objects.
func leaves(v *v1alpha1.KroVersion) map[string]any {
	out := map[string]any{}
	if v == nil || v.HelmValues == nil || len(v.HelmValues.Raw) == 0 {
		return out
	}
	var values any
	if json.Unmarshal(v.HelmValues.Raw, &values) != nil {
		return out
	}
	var walk func(prefix string, x any)
	walk = func(prefix string, x any) {
		m, ok := x.(map[string]any)
		if !ok || len(m) == 0 && prefix != "" {
			out[prefix] = x
			return
		}
		for k, child := range m {
			walk(joinPath(prefix, k), child)
		}
	}
	walk("", values)
	return out
}

// joinPath appends a key to a dotted path; a key that holds a dot (an annotation's
// name, say) is quoted in brackets.
func joinPath(prefix, key string) string {
	if strings.ContainsAny(key, ".[]\"") {
		return prefix + "[" + fmt.Sprintf("%q", key) + "]"
	}
	if prefix == "" {
		return key
	}
	return prefix + "." + key
}

// pathList lists at most planMaxPaths paths, and how many more.
func pathList(paths []string) string {
	if len(paths) > planMaxPaths {
		return strings.Join(paths[:planMaxPaths], ", ") + fmt.Sprintf(" and %d more", len(paths)-planMaxPaths)
	}
	return strings.Join(paths, ", ")
}

// RgdsTotal is how many RGDs the Kro reports on its ControlPlane.
func RgdsTotal(k *v1alpha1.Kro) int32 {
	if k.Status.ResourceGraphDefinitions == nil {
		return 0
	}
	return k.Status.ResourceGraphDefinitions.Total
}

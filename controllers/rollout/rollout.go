// Package rollout decides, purely, how a version's Kros move to its current revision: the
// plan, the admissions recorded on each Kro's HelmRelease, the health gate's verdicts and
// the revisions that keep a version's artifacts. It reads no cluster.
package rollout

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/openmcp-project/openmcp-operator/api/constants"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/foreign"
)

// A rollout moves the Kros of one version to the version's current revision a few at a
// time. The decisions are written to the ProviderConfig's status (updating, failed) and
// recorded on each Kro's HelmRelease (admission.go), from which they are rebuilt when the
// status is lost. The Kro reconciler reads the admissions (chooseRevision); this file
// decides them, purely, from the Kros' status and their records.
//
// Admission follows a Deployment's rolling update: every Kro of the version that is not
// available (Ready for its current spec) counts against maxUnavailable, whether it is
// being updated or was unavailable before (its ControlPlane stopped, its release failing).
// Kros that were unavailable are updated last, or once they recover, and never count as
// failures of the revision. A Kro that got the version without an admission (a new
// one, or a tenant's change of spec.version) is no admission either.

const (
	defaultHealthTimeout    = 10 * time.Minute
	defaultFailureThreshold = 1
)

// What a version's status holds, as the CRD bounds it (VersionStatus): whatever the
// rollout finds, the status it computes stays within, or the API server refuses all of
// it and no admission, failure or count is recorded for any version.
const (
	// messageMax is status.versions[].message's length.
	messageMax = 1024
	// maxMembers is how many Kros status.versions[].updating and failed each list: the
	// rollout admits no more at once, and counts the failed beyond it (FailedMore).
	maxMembers = 1000
	// listedNameMax and listedReasonMax bound a Kro's "namespace/name" (up to 317
	// characters) and a failure's reason as a message lists them: the lists themselves
	// hold them whole.
	listedNameMax   = 64
	listedReasonMax = 96
)

// shortMessage cuts s to the length of a condition message in a status.
func shortMessage(s string) string { return foreign.Text(s, foreign.StatusMessageMax) }

// View is what the cluster says of a version's Kros.
type View struct {
	Kros []v1alpha1.Kro
	// Records are what the Kros' HelmReleases record, by the Kro's "namespace/name".
	Records map[string]Record
	// VersionOf is the version of each revision that is kept, by the revision's name.
	VersionOf map[string]string
	// Artifacts are the artifacts of the revisions Kros are held on, by name, and current
	// the version's as spec.versions has them: what a plan compares (rollout_plan.go).
	Artifacts map[string]*v1alpha1.KroVersion
	Current   *v1alpha1.KroVersion
	// NamespaceLabels are the labels of the onboarding cluster's Namespaces, by name:
	// what spec.rollout.canary selects (rollout_canary.go).
	NamespaceLabels map[string]map[string]string
}

// Plan is one version's rollout as it stands after this reconcile.
type Plan struct {
	v1alpha1.VersionStatus
	// RecheckIn is when a health timeout of an updating Kro ends (0: none).
	RecheckIn time.Duration
	// unavailable counts the Kros that are not available and neither updating nor
	// waiting: failed ones, those given the revision while unavailable, new ones.
	unavailable int
	// handedUnavailable are the Kros given the revision while unavailable.
	handedUnavailable []string
	// carrying are the Kros whose HelmRelease carries the revision, without an admission,
	// that are not Ready with it: new ones, those a tenant moved here, broken ones.
	carrying []string
	// waiting are the Kros that run an older revision of the version: available ones
	// first, then unavailable ones, each in name order.
	waiting []*v1alpha1.Kro
	// firstUnavailable is the index in waiting of the first unavailable Kro.
	firstUnavailable int
	// budgetSpent: an available Kro waits because maxUnavailable is reached.
	budgetSpent bool
	// selfLabelled are the Kros whose own labels match spec.rollout.canary while their
	// Namespace's do not: they are no canaries.
	selfLabelled []string
}

// PlanRollout decides one version's rollout: which updating Kros became healthy or
// failed, and which Kros are admitted next. vs carries the version's counts; prev is the
// version's status as the last reconcile left it (nil: none, or lost).
func PlanRollout(policy *v1alpha1.RolloutPolicy, paused bool, vs v1alpha1.VersionStatus, prev *v1alpha1.VersionStatus, view View, now time.Time) (Plan, error) {
	p := Plan{VersionStatus: vs}
	p.Updated, p.Updating, p.Failed, p.FailedMore, p.Message, p.Plan = 0, nil, nil, 0, "", nil
	kros := view.Kros
	sortByKey(kros)
	timeout, threshold := rolloutLimits(policy)
	p.sortOut(policy != nil, prev, view, timeout, now)
	if policy == nil {
		p.Rollout = v1alpha1.RolloutProgressing
		if p.carried() == len(kros) {
			p.Rollout = v1alpha1.RolloutComplete
		}
		p.Message = foreign.Text(p.progress(len(kros), 0, nil), messageMax)
		return p, nil
	}
	sel, err := canarySelector(policy)
	if err != nil {
		return p, err
	}
	isCanary := view.canaries(sel)
	p.selfLabelled = selfLabelled(sel, isCanary, kros)
	// A plan is shown while the flag holds it, whatever else holds the rollout; once
	// approved, the plan of the revision is followed (rollout_plan.go).
	if policy.Plan && len(p.waiting) > 0 {
		p.Plan = p.makePlan(isCanary, view)
	} else if !policy.Plan {
		p.Plan = approvedPlan(prev, vs.Revision, len(p.waiting))
	}
	switch {
	case p.failed() >= threshold:
		p.Rollout = v1alpha1.RolloutPaused
		p.Message = foreign.Text(fmt.Sprintf("paused: %d Kros failed with revision %s (failureThreshold %d): %s; fix or revert the version's artifacts to go on",
			p.failed(), vs.Revision, threshold, memberList(p.Failed, int(p.FailedMore))), messageMax)
		return p, nil
	case paused:
		p.Rollout = v1alpha1.RolloutPaused
		p.Message = fmt.Sprintf("paused by the annotation %s on the ProviderConfig", v1alpha1.AnnotationRolloutPaused)
		return p, nil
	case policy.Plan && p.Plan != nil:
		p.Rollout = v1alpha1.RolloutPlanned
		p.Message = shortMessage(planMessage(p.Plan))
		return p, nil
	}
	candidates, failedCanaries := canariesFirst(isCanary, p.waiting, p.Updating, p.Failed, kros)
	candidates = followPlan(p.Plan, candidates)
	most := maxUnavailable(policy, len(kros))
	p.admit(candidates, most, timeout, now)
	p.Rollout = v1alpha1.RolloutProgressing
	if len(p.Updating) == 0 && p.failed() == 0 && p.carried() == len(kros) {
		p.Rollout = v1alpha1.RolloutComplete
	}
	p.Message = foreign.Text(p.progress(len(kros), most, failedCanaries), messageMax)
	return p, nil
}

// progress says how far the rollout is and what it waits for.
func (p *Plan) progress(kros, most int, failedCanaries []v1alpha1.RolloutMember) string {
	msg := fmt.Sprintf("%d of %d Kros run revision %s", p.Updated, kros, p.Revision)
	if len(p.Updating) > 0 {
		msg += "; updating " + memberList(p.Updating, 0)
	}
	if p.budgetSpent {
		msg += fmt.Sprintf("; the next Kros wait: %d of at most %d (maxUnavailable) are unavailable", p.unavailableNow(), most)
	}
	if n := len(p.waiting) - p.firstUnavailable; n > 0 {
		msg += fmt.Sprintf("; %d Kros that are unavailable are updated last, or once they recover: %s", n, kroList(p.waiting[p.firstUnavailable:]))
	}
	if len(p.carrying) > 0 {
		msg += fmt.Sprintf("; %d Kros have the revision but are not Ready with it: %s", len(p.carrying), nameList(p.carrying))
	}
	if len(p.handedUnavailable) > 0 {
		msg += fmt.Sprintf("; %d Kros got the revision while unavailable, which counts as no failure: %s", len(p.handedUnavailable), nameList(p.handedUnavailable))
	}
	if len(failedCanaries) > 0 {
		msg += fmt.Sprintf("; every Kro that is not a canary waits, as canaries failed with revision %s: %s; fix or revert the version's artifacts",
			p.Revision, memberList(failedCanaries, 0))
	}
	if len(p.selfLabelled) > 0 {
		msg += fmt.Sprintf("; %d Kros carry labels of their own that spec.rollout.canary matches, which make no canary (it selects the labels of a Kro's Namespace): %s",
			len(p.selfLabelled), nameList(p.selfLabelled))
	}
	return msg
}

// sortOut counts the Kros that run the revision healthily, carries the updating ones
// over (or fails them), keeps the failed ones, and collects the Kros waiting to be
// Admitted: those that run an older revision of the version, when there is a policy to
// admit them. What the previous status does not say (it was lost) comes from the Kros'
// records. Admissions to another revision than the version's current one are void.
func (p *Plan) sortOut(throttled bool, prev *v1alpha1.VersionStatus, view View, timeout time.Duration, now time.Time) {
	known := knownMembers(prev, p.Revision)
	var available, unavailable []*v1alpha1.Kro
	for i := range view.Kros {
		k := &view.Kros[i]
		rec := view.Records[KroKey(k)]
		if p.settle(k, known.of(k, rec, p.Revision), rec, timeout, now) {
			continue
		}
		switch {
		case throttled && view.waits(k, rec, p.Version, p.Revision):
			if availableKro(k) {
				available = append(available, k)
			} else {
				unavailable = append(unavailable, k)
			}
		default:
			if !availableKro(k) {
				p.unavailable++
			}
			if RunningRevision(k, rec) == p.Revision {
				p.carrying = append(p.carrying, KroKey(k))
			}
		}
	}
	p.waiting, p.firstUnavailable = append(available, unavailable...), len(available)
}

// membership is what the rollout knows of one Kro: admitted (updating), failed, or
// neither.
type membership struct {
	updating, failed *v1alpha1.RolloutMember
}

// baseline is the member that holds the Kro's health at its admission, if any.
func (ms membership) baseline() *v1alpha1.RolloutMember {
	if ms.failed != nil {
		return ms.failed
	}
	return ms.updating
}

// members are the updating and failed Kros of the previous status, by key.
type members struct {
	updating, failed map[string]v1alpha1.RolloutMember
}

func knownMembers(prev *v1alpha1.VersionStatus, revision string) members {
	ms := members{map[string]v1alpha1.RolloutMember{}, map[string]v1alpha1.RolloutMember{}}
	if prev != nil && prev.Revision == revision {
		for _, m := range prev.Updating {
			ms.updating[m.Kro] = m
		}
		for _, m := range prev.Failed {
			ms.failed[m.Kro] = m
		}
	}
	return ms
}

// of is the Kro's membership: from the previous status, or else from its record. A
// record stands for a lost status only while the Kro has not yet been Ready with the
// revision; after that it is done with it.
func (ms members) of(k *v1alpha1.Kro, rec Record, revision string) membership {
	key, done := KroKey(k), k.Status.Revision == revision
	var out membership
	if m, ok := ms.updating[key]; ok {
		m = withInstanceBaseline(m, rec)
		out.updating = &m
	} else if !done && rec.admittedTo(revision) {
		m := rec.member(key)
		out.updating = &m
	}
	if m, ok := ms.failed[key]; ok {
		out.failed = &m
	} else if !done && rec.failedWith(revision) {
		m := rec.member(key)
		out.failed = &m
	}
	return out
}

// settle places a Kro the rollout knows of, or one that runs the revision healthily,
// and tells whether it did.
func (p *Plan) settle(k *v1alpha1.Kro, ms membership, rec Record, timeout time.Duration, now time.Time) bool {
	gate := judge(k, ms, p.Revision)
	switch {
	case runsHealthy(k, p.Revision) && gate.reason == "":
		p.Updated++
	case ms.failed != nil:
		p.fail(*ms.failed)
	case ms.updating == nil:
		return false
	case (ms.updating.Unavailable || ignored(k)) && rec.Revision == p.Revision:
		// It has the revision; that it is still unavailable says nothing of the revision.
		p.handedUnavailable = append(p.handedUnavailable, ms.updating.Kro)
		p.unavailable++
	case ms.updating.Unavailable || ignored(k):
		// Admitted while unavailable, it waits for its HelmRelease to be applied (its
		// ControlPlane to answer, say) and cannot fail the revision. A Kro its tenant set
		// to ignore is not reconciled, so it never becomes healthy with the revision: it
		// counts as unavailable from then on, lest it fail the revision for every tenant.
		m := *ms.updating
		m.Unavailable = true
		p.Updating = append(p.Updating, m)
	default:
		m := *ms.updating
		if reason := failure(k, m, gate, timeout, now); reason != "" {
			m.Reason = reason
			p.fail(m)
			return true
		}
		p.Updating = append(p.Updating, m)
		p.recheck(max(timeout-now.Sub(m.Since.Time), time.Second))
	}
	return true
}

// fail counts a Kro as failed: listed while Failed has room, counted in FailedMore
// beyond it. Either way it is unavailable.
func (p *Plan) fail(m v1alpha1.RolloutMember) {
	if len(p.Failed) < maxMembers {
		p.Failed = append(p.Failed, m)
	} else {
		p.FailedMore++
	}
	p.unavailable++
}

// failed is how many Kros failed with the revision, listed or not.
func (p *Plan) failed() int { return len(p.Failed) + int(p.FailedMore) }

// waits tells whether a Kro runs an older revision of the version, kept as a
// ControllerRevision: the rollout admits it to the current one. A Kro that runs no
// revision yet, or one of another version (its tenant changed spec.version), takes the
// current revision without an admission, and so does one that was Ready with the
// current revision before (a revert returns it there).
func (v View) waits(k *v1alpha1.Kro, rec Record, version, revision string) bool {
	running := RunningRevision(k, rec)
	return running != "" && running != revision && k.Status.Revision != revision && v.VersionOf[running] == version
}

// availableKro: the Kro is Ready for its current spec, and its reconciles run (a Kro its
// tenant set to ignore keeps the status of its last reconcile, whatever happens since).
func availableKro(k *v1alpha1.Kro) bool {
	return k.Status.Phase == v1alpha1.PhaseReady && k.Status.ObservedGeneration == k.Generation && !ignored(k)
}

// ignored: the Kro carries openmcp.cloud/operation=ignore, so the Kro reconciler leaves
// it alone: it gets no revision and reports nothing.
func ignored(k *v1alpha1.Kro) bool {
	return k.Annotations[constants.OperationAnnotation] == constants.OperationAnnotationValueIgnore
}

// carried is how many Kros have the revision: Ready with it, or their HelmRelease
// carries it. A rollout is Complete when every Kro has it and none is updating or failed:
// a Kro that is not Ready for reasons of its own does not hold the version's rollout open.
func (p *Plan) carried() int {
	return int(p.Updated) + len(p.handedUnavailable) + len(p.carrying)
}

// unavailableNow is how many Kros of the version are not available now: updating,
// failed, waiting while unavailable, and the others that are not Ready.
func (p *Plan) unavailableNow() int {
	n := len(p.Updating) + p.unavailable
	for _, k := range p.waiting[p.firstUnavailable:] {
		if !slices.ContainsFunc(p.Updating, func(m v1alpha1.RolloutMember) bool { return m.Kro == KroKey(k) }) {
			n++
		}
	}
	return n
}

// admit admits candidates, in order: an available Kro while fewer than most Kros are
// unavailable; an unavailable one, which costs no availability, once no available Kro
// waits or is updating.
func (p *Plan) admit(candidates []*v1alpha1.Kro, most int, timeout time.Duration, now time.Time) {
	busy := p.unavailableNow()
	for _, k := range candidates {
		if !availableKro(k) {
			continue
		}
		if busy >= most {
			p.budgetSpent = true
			return
		}
		p.Updating = append(p.Updating, v1alpha1.RolloutMember{Kro: KroKey(k), Since: metav1.NewTime(now), RGDsReady: RgdsReady(k)})
		p.recheck(timeout)
		busy++
	}
	if slices.ContainsFunc(p.Updating, func(m v1alpha1.RolloutMember) bool { return !m.Unavailable }) {
		return
	}
	// They cost no availability, but each is a member of the status: no more than it
	// lists; the others are admitted as those go.
	for _, k := range candidates {
		if !availableKro(k) && len(p.Updating) < maxMembers {
			p.Updating = append(p.Updating, v1alpha1.RolloutMember{Kro: KroKey(k), Since: metav1.NewTime(now), RGDsReady: RgdsReady(k), Unavailable: true})
		}
	}
}

// recheck asks to look again within d.
func (p *Plan) recheck(d time.Duration) {
	if p.RecheckIn == 0 || d < p.RecheckIn {
		p.RecheckIn = d
	}
}

// maxUnavailable is the policy's maxUnavailable for a version with n Kros: at least 1,
// at most maxMembers (the length the status allows).
func maxUnavailable(policy *v1alpha1.RolloutPolicy, n int) int {
	most, err := intstr.GetScaledValueFromIntOrPercent(policy.MaxUnavailable, n, false)
	if err != nil || policy.MaxUnavailable == nil {
		most = 1
	}
	return min(max(most, 1), maxMembers)
}

// canariesFirst are the Kros to admit next, in order: while a canary is not yet healthy
// with the revision, only canaries. A canary that failed with the revision holds every
// other Kro back for good (until the revision changes); it is returned among the failed
// canaries, to be named. isCanary nil: no canaries.
func canariesFirst(isCanary canaryFunc, pending []*v1alpha1.Kro, updating, failed []v1alpha1.RolloutMember, kros []v1alpha1.Kro) ([]*v1alpha1.Kro, []v1alpha1.RolloutMember) {
	if isCanary == nil {
		return pending, nil
	}
	var canaries []*v1alpha1.Kro
	for _, k := range pending {
		if isCanary(k) {
			canaries = append(canaries, k)
		}
	}
	waiting := len(canaries) > 0
	var failedCanaries []v1alpha1.RolloutMember
	for i := range kros {
		if !isCanary(&kros[i]) {
			continue
		}
		isKro := func(m v1alpha1.RolloutMember) bool { return m.Kro == KroKey(&kros[i]) }
		if slices.ContainsFunc(updating, func(m v1alpha1.RolloutMember) bool { return isKro(m) && !m.Unavailable }) {
			waiting = true
		}
		if j := slices.IndexFunc(failed, isKro); j >= 0 {
			waiting = true
			failedCanaries = append(failedCanaries, failed[j])
		}
	}
	if waiting {
		return canaries, failedCanaries
	}
	return pending, nil
}

// runsHealthy: the Kro is Ready, for its current spec, with the revision.
func runsHealthy(k *v1alpha1.Kro, revision string) bool {
	return k.Status.Revision == revision && k.Status.Phase == v1alpha1.PhaseReady && k.Status.ObservedGeneration == k.Generation
}

// failure says why an updating Kro failed, or "": the gate failed it, its release
// failed after it was admitted, or it was not healthy within the timeout.
func failure(k *v1alpha1.Kro, m v1alpha1.RolloutMember, gate verdict, timeout time.Duration, now time.Time) string {
	if gate.final {
		return shortMessage(gate.reason)
	}
	if c := meta.FindStatusCondition(k.Status.Conditions, v1alpha1.ConditionHelmReleaseReady); c != nil &&
		c.Status == metav1.ConditionFalse && c.Reason == v1alpha1.ReasonReleaseFailed && !c.LastTransitionTime.Before(&m.Since) {
		// Both times are kept to the second: a failure in the second of the admission counts.
		return shortMessage(c.Message)
	}
	if now.Sub(m.Since.Time) >= timeout {
		msg := gate.reason
		if c := meta.FindStatusCondition(k.Status.Conditions, v1alpha1.ConditionReady); msg == "" && c != nil {
			msg = c.Reason + ": " + c.Message
		}
		if msg == "" {
			msg = "not healthy"
		}
		return shortMessage(fmt.Sprintf("not healthy within %s: %s", timeout, msg))
	}
	return ""
}

func rolloutLimits(policy *v1alpha1.RolloutPolicy) (time.Duration, int) {
	timeout, threshold := defaultHealthTimeout, defaultFailureThreshold
	if policy != nil && policy.HealthTimeout != nil && policy.HealthTimeout.Duration > 0 {
		timeout = policy.HealthTimeout.Duration
	}
	if policy != nil && policy.FailureThreshold != nil && *policy.FailureThreshold > 0 {
		threshold = int(*policy.FailureThreshold)
	}
	return timeout, threshold
}

// memberList names the members for a message, with their reasons, and how many more
// there are (more besides those of ms).
func memberList(ms []v1alpha1.RolloutMember, more int) string {
	names := make([]string, 0, min(len(ms), listedNames))
	for _, m := range ms[:min(len(ms), listedNames)] {
		if m.Reason != "" {
			names = append(names, foreign.Middle(m.Kro, listedNameMax)+" ("+foreign.Text(m.Reason, listedReasonMax)+")")
			continue
		}
		names = append(names, foreign.Middle(m.Kro, listedNameMax))
	}
	return listOf(names, len(ms)+more)
}

func kroList(kros []*v1alpha1.Kro) string {
	names := make([]string, 0, len(kros))
	for _, k := range kros {
		names = append(names, KroKey(k))
	}
	return nameList(names)
}

// listedNames is how many Kros a clause of a message names.
const listedNames = 5

// nameList names at most listedNames Kros for a message, each shortened, and how many
// more there are.
func nameList(names []string) string {
	short := make([]string, 0, min(len(names), listedNames))
	for _, n := range names[:min(len(names), listedNames)] {
		short = append(short, foreign.Middle(n, listedNameMax))
	}
	return listOf(short, len(names))
}

// listOf joins the names listed of all (those and more) and says how many more.
func listOf(listed []string, all int) string {
	if all > len(listed) {
		return strings.Join(listed, ", ") + fmt.Sprintf(" and %d more", all-len(listed))
	}
	return strings.Join(listed, ", ")
}

// KroKey is the Kro's namespace/name, as rollout members name it.
func KroKey(k *v1alpha1.Kro) string { return k.Namespace + "/" + k.Name }

// sortByKey sorts Kros by kroKey, making each key once and moving each Kro at most twice:
// a ProviderConfig reconcile sorts every Kro of a version, and a comparison that built
// both keys, over Kros moved by value, was a tenth of the provider's CPU in a burst.
func sortByKey(kros []v1alpha1.Kro) {
	keys := make([]string, len(kros))
	for i := range kros {
		keys[i] = KroKey(&kros[i])
	}
	if slices.IsSorted(keys) {
		return
	}
	order := make([]int, len(kros))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return strings.Compare(keys[a], keys[b]) })
	sorted := make([]v1alpha1.Kro, len(kros))
	for i, j := range order {
		sorted[i] = kros[j]
	}
	copy(kros, sorted)
}

// Admitted tells whether the ProviderConfig's rollout of a version's revision has
// Admitted a Kro: it is updating, or it failed and keeps the revision.
func Admitted(pc *v1alpha1.ProviderConfig, version, revision, kro string) bool {
	for _, vs := range pc.Status.Versions {
		if vs.Version != version || vs.Revision != revision {
			continue
		}
		is := func(m v1alpha1.RolloutMember) bool { return m.Kro == kro }
		if slices.ContainsFunc(vs.Updating, is) || slices.ContainsFunc(vs.Failed, is) {
			return true
		}
	}
	return false
}

// RgdsReady is how many of the Kro's RGDs are Ready.
func RgdsReady(k *v1alpha1.Kro) int32 {
	if k.Status.ResourceGraphDefinitions == nil {
		return 0
	}
	return k.Status.ResourceGraphDefinitions.Ready
}

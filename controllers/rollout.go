package controllers

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
)

// A rollout moves the Kros of one version to the version's current revision a few at a
// time. The ProviderConfig's status is its only state: the Kros it admitted (updating),
// those that failed, and the revision they are admitted to. The Kro reconciler reads the
// admissions (chooseRevision); this file decides them, purely, from the Kros' status.

const (
	defaultHealthTimeout    = 10 * time.Minute
	defaultFailureThreshold = 1
)

// rolloutPlan is one version's rollout as it stands after this reconcile.
type rolloutPlan struct {
	v1alpha1.VersionStatus
	// recheckIn is when a health timeout of an updating Kro ends (0: none).
	recheckIn time.Duration
}

// planRollout decides one version's rollout: which updating Kros became healthy or
// failed, and which Kros are admitted next. vs carries the version's counts; prev is the
// version's status as the last reconcile left it; kros are the Kros on the version.
func planRollout(policy *v1alpha1.RolloutPolicy, paused bool, vs v1alpha1.VersionStatus, prev *v1alpha1.VersionStatus, kros []v1alpha1.Kro, now time.Time) (rolloutPlan, error) {
	p := rolloutPlan{VersionStatus: vs}
	p.Updated, p.Updating, p.Failed, p.Message = 0, nil, nil, ""
	slices.SortFunc(kros, func(a, b v1alpha1.Kro) int {
		return strings.Compare(kroKey(&a), kroKey(&b))
	})
	timeout, threshold := rolloutLimits(policy)
	pending := p.sortOut(policy != nil, prev, kros, timeout, now)
	if policy == nil {
		p.Rollout = v1alpha1.RolloutProgressing
		if int(p.Updated) == len(kros) {
			p.Rollout = v1alpha1.RolloutComplete
		}
		p.Message = fmt.Sprintf("%d of %d Kros run revision %s", p.Updated, len(kros), vs.Revision)
		return p, nil
	}
	switch {
	case len(p.Failed) >= threshold:
		p.Rollout = v1alpha1.RolloutPaused
		p.Message = fmt.Sprintf("paused: %d Kros failed with revision %s (failureThreshold %d): %s; fix or revert the version's artifacts to go on",
			len(p.Failed), vs.Revision, threshold, memberList(p.Failed))
		return p, nil
	case paused:
		p.Rollout = v1alpha1.RolloutPaused
		p.Message = fmt.Sprintf("paused by the annotation %s on the ProviderConfig", v1alpha1.AnnotationRolloutPaused)
		return p, nil
	}
	candidates, failedCanaries, err := canariesFirst(policy.Canary, pending, p.Updating, p.Failed, kros)
	if err != nil {
		return p, err
	}
	p.admit(candidates, maxUnavailable(policy, len(kros)), timeout, now)
	p.Rollout = v1alpha1.RolloutProgressing
	if len(p.Updating) == 0 && len(p.Failed) == 0 && int(p.Updated) == len(kros) {
		p.Rollout = v1alpha1.RolloutComplete
	}
	p.Message = fmt.Sprintf("%d of %d Kros run revision %s", p.Updated, len(kros), vs.Revision)
	if len(p.Updating) > 0 {
		p.Message += "; updating " + memberList(p.Updating)
	}
	if len(failedCanaries) > 0 {
		p.Message += fmt.Sprintf("; every Kro that is not a canary waits, as canaries failed with revision %s: %s; fix or revert the version's artifacts",
			vs.Revision, memberList(failedCanaries))
	}
	return p, nil
}

// sortOut counts the Kros that run the revision healthily, carries the updating ones
// over (or fails them) and keeps the failed ones, and returns the Kros waiting to be
// admitted: those that run an older revision, when there is a policy to admit them.
// Admissions to another revision than the version's current one are void.
func (p *rolloutPlan) sortOut(throttled bool, prev *v1alpha1.VersionStatus, kros []v1alpha1.Kro, timeout time.Duration, now time.Time) []*v1alpha1.Kro {
	updating, failed := map[string]v1alpha1.RolloutMember{}, map[string]v1alpha1.RolloutMember{}
	if prev != nil && prev.Revision == p.Revision {
		for _, m := range prev.Updating {
			updating[m.Kro] = m
		}
		for _, m := range prev.Failed {
			failed[m.Kro] = m
		}
	}
	var pending []*v1alpha1.Kro
	for i := range kros {
		k := &kros[i]
		m, isUpdating := updating[kroKey(k)]
		switch {
		case runsHealthy(k, p.Revision) && (!isUpdating || k.Status.ResourceGraphDefinitions == nil ||
			k.Status.ResourceGraphDefinitions.Ready >= m.RGDsReady):
			p.Updated++
		case isUpdating:
			if reason := failure(k, m, timeout, now); reason != "" {
				m.Reason = reason
				p.Failed = append(p.Failed, m)
				continue
			}
			p.Updating = append(p.Updating, m)
			p.recheck(max(timeout-now.Sub(m.Since.Time), time.Second))
		case failed[kroKey(k)].Kro != "":
			p.Failed = append(p.Failed, failed[kroKey(k)])
		case k.Status.Revision != "" && throttled:
			pending = append(pending, k)
		}
	}
	return pending
}

// admit admits candidates, in order, while fewer than most are updating.
func (p *rolloutPlan) admit(candidates []*v1alpha1.Kro, most int, timeout time.Duration, now time.Time) {
	for _, k := range candidates {
		if len(p.Updating) >= most {
			return
		}
		p.Updating = append(p.Updating, v1alpha1.RolloutMember{Kro: kroKey(k), Since: metav1.NewTime(now), RGDsReady: rgdsReady(k)})
		p.recheck(timeout)
	}
}

// recheck asks to look again within d.
func (p *rolloutPlan) recheck(d time.Duration) {
	if p.recheckIn == 0 || d < p.recheckIn {
		p.recheckIn = d
	}
}

// maxUnavailable is the policy's maxUnavailable for a version with n Kros: at least 1,
// at most 1000 (the length the status allows).
func maxUnavailable(policy *v1alpha1.RolloutPolicy, n int) int {
	most, err := intstr.GetScaledValueFromIntOrPercent(policy.MaxUnavailable, n, false)
	if err != nil || policy.MaxUnavailable == nil {
		most = 1
	}
	return min(max(most, 1), 1000)
}

// canariesFirst are the Kros to admit next, in order: while a canary is not yet healthy
// with the revision, only canaries. A canary that failed with the revision holds every
// other Kro back for good (until the revision changes); it is returned among the failed
// canaries, to be named.
func canariesFirst(sel *metav1.LabelSelector, pending []*v1alpha1.Kro, updating, failed []v1alpha1.RolloutMember, kros []v1alpha1.Kro) ([]*v1alpha1.Kro, []v1alpha1.RolloutMember, error) {
	if sel == nil {
		return pending, nil, nil
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return nil, nil, fmt.Errorf("spec.rollout.canary: %w", err)
	}
	var canaries []*v1alpha1.Kro
	for _, k := range pending {
		if s.Matches(labels.Set(k.Labels)) {
			canaries = append(canaries, k)
		}
	}
	waiting := len(canaries) > 0
	var failedCanaries []v1alpha1.RolloutMember
	for i := range kros {
		if !s.Matches(labels.Set(kros[i].Labels)) {
			continue
		}
		isKro := func(m v1alpha1.RolloutMember) bool { return m.Kro == kroKey(&kros[i]) }
		if slices.ContainsFunc(updating, isKro) {
			waiting = true
		}
		if j := slices.IndexFunc(failed, isKro); j >= 0 {
			waiting = true
			failedCanaries = append(failedCanaries, failed[j])
		}
	}
	if waiting {
		return canaries, failedCanaries, nil
	}
	return pending, nil, nil
}

// runsHealthy: the Kro is Ready, for its current spec, with the revision.
func runsHealthy(k *v1alpha1.Kro, revision string) bool {
	return k.Status.Revision == revision && k.Status.Phase == v1alpha1.PhaseReady && k.Status.ObservedGeneration == k.Generation
}

// failure says why an updating Kro failed, or "": its release failed after it was
// admitted, or it was not healthy within the timeout.
func failure(k *v1alpha1.Kro, m v1alpha1.RolloutMember, timeout time.Duration, now time.Time) string {
	if c := meta.FindStatusCondition(k.Status.Conditions, v1alpha1.ConditionHelmReleaseReady); c != nil &&
		c.Status == metav1.ConditionFalse && c.Reason == v1alpha1.ReasonReleaseFailed && !c.LastTransitionTime.Before(&m.Since) {
		// Both times are kept to the second: a failure in the second of the admission counts.
		return shortenMessage(c.Message)
	}
	if now.Sub(m.Since.Time) >= timeout {
		msg := "not healthy"
		if c := meta.FindStatusCondition(k.Status.Conditions, v1alpha1.ConditionReady); c != nil {
			msg = c.Reason + ": " + c.Message
		}
		return shortenMessage(fmt.Sprintf("not healthy within %s: %s", timeout, msg))
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

func memberList(ms []v1alpha1.RolloutMember) string {
	names := make([]string, 0, len(ms))
	for _, m := range ms {
		if m.Reason != "" {
			names = append(names, m.Kro+" ("+m.Reason+")")
			continue
		}
		names = append(names, m.Kro)
	}
	const most = 5
	if len(names) > most {
		return strings.Join(names[:most], ", ") + fmt.Sprintf(" and %d more", len(names)-most)
	}
	return strings.Join(names, ", ")
}

func kroKey(k *v1alpha1.Kro) string { return client.ObjectKeyFromObject(k).String() }

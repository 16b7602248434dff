// Package rollouttest holds the fixtures of the rollout's tests: Kros on two revisions of
// version v1, canaries by Namespace, and names of members.
package rollouttest

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
)

// OldRev and NewRev are two revisions of version v1.
const OldRev = "kro-v1-aaaaaaaaaa"

// NewRev is the revision a rollout moves the Kros to.
const NewRev = "kro-v1-bbbbbbbbbb"

// T0 is the time at which the tests' rollouts begin.
var T0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// Kro is a Kro on version v1 that runs revision rev, Ready or not.
func Kro(name, rev string, ready bool, labels ...string) v1alpha1.Kro {
	k := v1alpha1.Kro{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Generation: 1}, Spec: v1alpha1.KroSpec{Version: "v1"}}
	k.Status.ObservedGeneration, k.Status.Revision, k.Status.Phase = 1, rev, v1alpha1.PhaseProgressing
	if ready {
		k.Status.Phase = v1alpha1.PhaseReady
	}
	if len(labels) == 2 {
		k.Labels = map[string]string{labels[0]: labels[1]}
	}
	return k
}

// CanaryNamespace is the Namespace the platform team labelled ring=canary in the pure
// tests: the Kros in it are the canaries of a policy that selects ring=canary.
const CanaryNamespace = "ring-canary"

// NamespaceLabels are the labels of the tests' Namespaces: CanaryNamespace is ring=canary.
var NamespaceLabels = map[string]map[string]string{CanaryNamespace: {"ring": "canary"}, "ns": {"ring": "stable"}}

// CanaryKro is rolloutKro in canaryNamespace.
func CanaryKro(name, rev string, ready bool, labels ...string) v1alpha1.Kro {
	k := Kro(name, rev, ready, labels...)
	k.Namespace = CanaryNamespace
	return k
}

// MemberNames are the keys of the rollout members.
func MemberNames(ms []v1alpha1.RolloutMember) []string {
	out := []string{}
	for _, m := range ms {
		out = append(out, m.Kro)
	}
	return out
}

// PlannedNames are the Kros of a plan, in its order.
func PlannedNames(plan *v1alpha1.PlannedRollout) []string {
	out := []string{}
	for _, pk := range plan.Kros {
		out = append(out, pk.Kro)
	}
	return out
}

// RingCanary selects the Namespaces labelled ring=canary.
func RingCanary() *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchLabels: map[string]string{"ring": "canary"}}
}

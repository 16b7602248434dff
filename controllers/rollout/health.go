package rollout

import (
	"fmt"
	"slices"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/foreign"
)

// A rollout's health gate: an admitted Kro counts as updated once it is Ready, for its
// current spec, with the revision (runsHealthy) and kro itself is no worse than at its
// admission:
//
//   - at least as many ResourceGraphDefinitions Ready (RolloutMember.RGDsReady, from the
//     Kro's status at admission);
//   - no more of the instances of the kinds kro generated not Ready than right before
//     the Kro got the revision (RolloutMember.Instances, read from the ControlPlane then,
//     kept on its HelmRelease too). Only the instances created no later than the Kro's
//     admission count, then and now: an instance a tenant creates during the upgrade has
//     not had its time to become Ready, and says nothing of the revision;
//   - kro's Deployment done rolling out (RolloutHealth.DeploymentAvailable).
//
// RGDs are watched, and kro may still be processing them after its restart: fewer
// Ready keeps the Kro updating until healthTimeout. Instances are read, not watched
// (kro_health.go), when the reconcile that finds the Kro Ready with the revision runs,
// after helm has waited for kro's new Deployment: more of them not Ready then fails the
// Kro at once, naming the instances. The Deployment not done keeps it updating.

// maxNamedRegressions bounds the RGDs or instances a failure names.
const maxNamedRegressions = 3

// verdict is the gate's judgement of a Kro that runs the revision: why it is not
// healthy yet ("": it is), and whether that fails it at once.
type verdict struct {
	reason string
	final  bool
}

// judge applies the gate to a Kro the rollout knows of; a Kro that does not run the
// revision is not judged.
func judge(k *v1alpha1.Kro, ms membership, revision string) verdict {
	base := ms.baseline()
	if base == nil || !runsHealthy(k, revision) {
		return verdict{}
	}
	if reason := rgdsFell(k, base); reason != "" {
		return verdict{reason: reason}
	}
	// A Kro admitted while unavailable cannot fail the revision: its health is not
	// read. One that failed stays failed until its health is back.
	if base.Unavailable {
		return verdict{}
	}
	// No health at all: the reconcile that made the Kro Ready did not know of the
	// admission (the ProviderConfig's status was lost meanwhile); like a missing RGD
	// summary, that is nothing to judge.
	h := k.Status.RolloutHealth
	switch {
	case h == nil:
		return verdict{}
	case h.Revision != revision:
		return verdict{reason: "kro's health on the ControlPlane has not been read with revision " + revision + " yet"}
	}
	if reason := instancesFell(base.Instances, h); reason != "" {
		return verdict{reason: reason, final: true}
	}
	if !h.DeploymentAvailable {
		return verdict{reason: "kro's Deployment is not available: " + h.Deployment}
	}
	return verdict{}
}

// rgdsFell says which RGDs are no longer Ready when fewer are than at admission.
func rgdsFell(k *v1alpha1.Kro, base *v1alpha1.RolloutMember) string {
	sum := k.Status.ResourceGraphDefinitions
	if sum == nil || sum.Ready >= base.RGDsReady {
		return ""
	}
	names := make([]string, 0, len(sum.NotReady))
	for _, s := range sum.NotReady {
		names = append(names, s.Name+" ("+s.Reason+")")
	}
	return fmt.Sprintf("ResourceGraphDefinitions Ready fell from %d to %d: %s", base.RGDsReady, sum.Ready, firstFew(names))
}

// instancesFell says which instances are not Ready when more of those the gate judges
// (created no later than the admission) are not Ready than at the admission: instances
// that were Ready turned not Ready. Instances deleted meanwhile lower both counts and
// fail nothing; new ones are not counted (RolloutHealth.NewInstances). With no instances
// at admission, or none now, there is nothing to compare.
func instancesFell(base *v1alpha1.InstanceCounts, h *v1alpha1.RolloutHealth) string {
	now := h.Instances
	if base == nil || base.Total == 0 || now.Total == 0 || now.Total-now.Ready <= base.Total-base.Ready {
		return ""
	}
	names := make([]string, 0, len(h.NotReady))
	for _, s := range h.NotReady {
		name := s.Name
		if s.Namespace != "" {
			name = s.Namespace + "/" + name
		}
		names = append(names, fmt.Sprintf("%s %s not Ready: %s", s.Kind, name, s.Reason))
	}
	return fmt.Sprintf("instances Ready fell from %d/%d to %d/%d: %s", base.Ready, base.Total, now.Ready, now.Total, firstFew(names))
}

// firstFew joins at most maxNamedRegressions names.
func firstFew(names []string) string { return foreign.JoinFew(names, maxNamedRegressions, "; ") }

// withInstanceBaseline completes a member of the previous status with the instance
// baseline its HelmRelease recorded: the Kro reconciler takes it after the admission,
// so the status learns it from the record.
func withInstanceBaseline(m v1alpha1.RolloutMember, rec Record) v1alpha1.RolloutMember {
	if m.Instances == nil && rec.Admission != nil && rec.Admission.Instances != nil && rec.Admission.Since.Unix() == m.Since.Unix() {
		m.Instances = rec.Admission.Instances.DeepCopy()
	}
	return m
}

// carryInstanceBaseline keeps the instance baseline of the HelmRelease's earlier record
// of the same admission when the status does not carry it yet.
func carryInstanceBaseline(adm *Admission, prev Record, revision string) {
	if adm == nil || adm.Instances != nil || prev.Revision != revision || prev.Admission == nil || prev.Admission.Since.Unix() != adm.Since.Unix() {
		return
	}
	adm.Instances = prev.Admission.Instances
}

// Gated tells whether the ProviderConfig's status says that a rollout is updating the
// Kro to revision, or counted it as failed with it, and it was available at admission:
// then its reconciles read kro's health.
func Gated(pc *v1alpha1.ProviderConfig, version, revision, kro string) bool {
	is := func(m v1alpha1.RolloutMember) bool { return m.Kro == kro && !m.Unavailable }
	for _, vs := range pc.Status.Versions {
		if vs.Version == version && vs.Revision == revision && (slices.ContainsFunc(vs.Updating, is) || slices.ContainsFunc(vs.Failed, is)) {
			return true
		}
	}
	return false
}

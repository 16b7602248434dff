package flux

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/owned"
	"github.com/openmcp-project/service-provider-kro/controllers/step"
)

// A Flux object's generation moves with every change of its spec, spec.interval
// included, and Flux reports it not Ready until it has reconciled that generation. A
// change of ProviderConfig.spec.pollInterval rewrites only spec.interval of every
// tenant's OCIRepository and HelmRelease. It installs nothing, and must not make a single
// Kro not Ready (issue 21, hole 6). Two things see to that:
//
//   - Each of the provider's Flux objects records what it installs: a hash of its spec
//     without spec.interval, and the first generation that carried that spec
//     (stampInstall). While Flux has not finished the newest generation but has finished
//     one that installs the same, the Kro goes on reporting what Flux said of that one,
//     or what the Kro reported before (readFlux). A failure Flux reports of the newest
//     generation counts at once.
//   - helm-controller does not reconcile a HelmRelease whose source has a generation it
//     has not observed: Ready=False (SourceNotReady), and only a new artifact revision of
//     the source wakes it before the HelmRelease's interval is up, which a change of
//     spec.interval never brings. So the source is written first and a changed
//     HelmRelease waits until source-controller has observed it, when that costs nothing
//     (releaseWaitsForSource). A new chart with new values still goes out together (hole 4).
//
// Neither is enough alone: without the first, each object reads Unknown until Flux has
// caught up with it; without the second, helm-controller's SourceNotReady is a failure
// of the newest generation, which the first rightly reports.

// Annotations on the provider's Flux objects that record what the object installs.
const (
	// AnnotationInstallHash is a hash of the object's spec as the provider applied it,
	// without spec.interval.
	AnnotationInstallHash = v1alpha1.LabelPrefix + "install-hash"
	// AnnotationInstallGeneration is the first generation of the object whose spec,
	// spec.interval aside, is the current one's.
	AnnotationInstallGeneration = v1alpha1.LabelPrefix + "install-generation"
)

// installHash hashes what a Flux object of the provider's installs: its spec without
// spec.interval.
func installHash(obj client.Object) (string, error) {
	var spec any
	switch o := obj.(type) {
	case *sourcev1.OCIRepository:
		s := o.Spec.DeepCopy()
		s.Interval = metav1.Duration{}
		spec = s
	case *helmv2.HelmRelease:
		s := o.Spec.DeepCopy()
		s.Interval = metav1.Duration{}
		spec = s
	default:
		return "", fmt.Errorf("%T is not one of the provider's Flux objects", obj)
	}
	data, err := json.Marshal(spec)
	if err != nil {
		return "", fmt.Errorf("hashing the spec of %s: %w", obj.GetName(), err)
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:16]), nil
}

// stampInstall records on desired what it installs, from the object as it is (current,
// nil when there is none). The same install keeps its first generation. A new one starts
// with the generation its apply creates: the next one, as an apply that changes the spec
// moves the generation by one. An object that lacks the stamp, or whose spec someone else
// wrote, counts as a new install: a reading is never kept for what the provider cannot
// vouch for.
func stampInstall(desired, current client.Object) error {
	hash, err := installHash(desired)
	if err != nil {
		return err
	}
	since := int64(1)
	if current != nil {
		since = current.GetGeneration() + 1
		if g, ok := installGeneration(current); ok && current.GetAnnotations()[AnnotationInstallHash] == hash && !owned.WrittenByOthers(current) {
			since = g
		}
	}
	annotations := desired.GetAnnotations()
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[AnnotationInstallHash] = hash
	annotations[AnnotationInstallGeneration] = strconv.FormatInt(since, 10)
	desired.SetAnnotations(annotations)
	return nil
}

// installGeneration reads AnnotationInstallGeneration.
func installGeneration(obj client.Object) (int64, bool) {
	g, err := strconv.ParseInt(obj.GetAnnotations()[AnnotationInstallGeneration], 10, 64)
	return g, err == nil && g > 0
}

// sameInstallObserved tells whether Flux has not finished the object's newest generation
// but has finished one that installs the same: the newest one differs from it only in
// spec.interval.
func sameInstallObserved(obj client.Object, observedGeneration int64) bool {
	since, ok := installGeneration(obj)
	return ok && obj.GetDeletionTimestamp().IsZero() &&
		since <= observedGeneration && observedGeneration < obj.GetGeneration()
}

// fluxState is what Flux reports of one of the provider's Flux objects.
func fluxState(obj client.Object) (observedGeneration int64, conds []metav1.Condition) {
	switch o := obj.(type) {
	case *sourcev1.OCIRepository:
		return o.Status.ObservedGeneration, o.Status.Conditions
	case *helmv2.HelmRelease:
		return o.Status.ObservedGeneration, o.Status.Conditions
	}
	return 0, nil
}

// readFlux is the readiness the Kro reports of one of its Flux objects: fluxReadiness,
// unless Flux has not finished a generation that installs what the one it finished
// installs. Then Flux's reading of that one holds; once Flux has begun the new
// generation and its Ready speaks of that, the Kro keeps the reading it reported before
// (before.managedResources). A Ready=False of the new generation is reported as it is.
func readFlux(obj client.Object, before *v1alpha1.KroStatus) (metav1.ConditionStatus, string) {
	observed, conds := fluxState(obj)
	status, message := step.FluxReadiness(obj.GetGeneration(), observed, conds)
	if status != metav1.ConditionUnknown || !sameInstallObserved(obj, observed) {
		return status, message
	}
	if status, message := step.FluxReadiness(observed, observed, conds); status != metav1.ConditionUnknown {
		return status, message
	}
	if prev := previousReading(before, obj); prev != nil {
		return prev.Ready, prev.Message
	}
	return status, message
}

// previousReading is the Kro's last report of a Flux object, or nil.
func previousReading(before *v1alpha1.KroStatus, obj client.Object) *v1alpha1.ManagedResource {
	if before == nil {
		return nil
	}
	want := managedFlux(obj, "", "")
	for i := range before.ManagedResources {
		m := &before.ManagedResources[i]
		if m.Cluster == want.Cluster && m.Kind == want.Kind && m.Namespace == want.Namespace && m.Name == want.Name {
			return m
		}
	}
	return nil
}

// releaseWaitsForSource tells whether a change of the HelmRelease waits, in this
// reconcile, for source-controller to observe the OCIRepository's newest generation:
// applied now, it would have helm-controller report SourceNotReady until the
// HelmRelease's interval is up. It waits when waiting changes nothing installed: the
// source's pending change is only its interval (no new chart comes, so helm-controller
// does nothing before the HelmRelease changes), or the HelmRelease's own change is (the
// values stay, so a new chart is installed with the right ones). A new chart with new
// values goes out together, and so does a new HelmRelease. The source's status change
// brings the Kro back.
func releaseWaitsForSource(repo *sourcev1.OCIRepository, current, desired client.Object) (bool, error) {
	if repo == nil || current == nil || repo.Status.ObservedGeneration == repo.Generation || !current.GetDeletionTimestamp().IsZero() {
		return false, nil
	}
	hash, err := owned.StampHash(desired)
	if err != nil || owned.IsCurrent(current, hash) {
		return false, err // unchanged: nothing to hold back
	}
	intervalOnly := current.GetAnnotations()[AnnotationInstallHash] == desired.GetAnnotations()[AnnotationInstallHash] && !owned.WrittenByOthers(current)
	return sameInstallObserved(repo, repo.Status.ObservedGeneration) || intervalOnly, nil
}

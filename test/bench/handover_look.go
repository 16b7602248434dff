package bench

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	clustersv1alpha1 "github.com/openmcp-project/openmcp-operator/api/clusters/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/owned"
	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

// maxViolationExamples caps the violations the results spell out.
const maxViolationExamples = 5

// objectKey names an object of a kind in the looks: "Kind namespace/name".
func objectKey(kind, namespace, name string) string {
	return kind + " " + namespace + "/" + name
}

// earlierKeys are the platform cluster's objects of an earlier installation, as
// objectKey names them: its HelmRelease, OCIRepository, access secret, chart pull secret
// copy, and AccessRequest when withAccess.
func earlierKeys(e testenv.EarlierInstallation, withAccess bool) []string {
	ns := e.TenantNamespace
	keys := []string{
		objectKey("HelmRelease", ns, testenv.EarlierHelmReleaseName),
		objectKey("OCIRepository", ns, testenv.EarlierOCIRepositoryName),
		objectKey("Secret", ns, e.AccessSecretName()),
	}
	if cp := e.ChartSecretCopy(); cp != nil {
		keys = append(keys, objectKey("Secret", ns, cp.Name))
	}
	if withAccess {
		keys = append(keys, objectKey("AccessRequest", ns, e.AccessRequestName()))
	}
	return keys
}

// left are the keys of which present still holds an object.
func left(keys []string, present map[string]bool) []string {
	var out []string
	for _, k := range keys {
		if present[k] {
			out = append(out, k)
		}
	}
	return out
}

// lookView is what one look saw.
type lookView struct {
	// present: the objects on the platform cluster (HelmReleases, OCIRepositories,
	// secrets, AccessRequests) by objectKey.
	present map[string]bool
	// releases are the platform cluster's HelmReleases.
	releases []helmv2.HelmRelease
	// ready: the names of the Kros Ready for their generation.
	ready map[string]bool
}

// releaseTally is what one look saw of the HelmReleases of the Helm release kro.
type releaseTally struct {
	// violations: per tenant namespace (and storage namespace) with more than one
	// HelmRelease of the release kro that is not suspended, "namespace: names".
	violations []string
	// overlaps: tenant namespaces with more than one HelmRelease of the release kro, at
	// most one of them not suspended: the hand-over's middle state.
	overlaps int
}

// tallyReleases counts, per tenant namespace, the HelmReleases that drive the Helm
// release kro (the name helm-controller gives the release, in the same storage
// namespace): two that are not suspended would both drive it, a violation.
func tallyReleases(hrs []helmv2.HelmRelease) releaseTally {
	type group struct{ all, active []string }
	groups := map[string]*group{}
	for i := range hrs {
		hr := &hrs[i]
		if hr.GetReleaseName() != owned.ReleaseName {
			continue
		}
		key := hr.Namespace + " (storage " + hr.GetStorageNamespace() + ")"
		g := groups[key]
		if g == nil {
			g = &group{}
			groups[key] = g
		}
		g.all = append(g.all, hr.Name)
		if !hr.Spec.Suspend {
			g.active = append(g.active, hr.Name)
		}
	}
	var t releaseTally
	for _, key := range slices.Sorted(maps.Keys(groups)) {
		g := groups[key]
		switch {
		case len(g.active) > 1:
			slices.Sort(g.active)
			t.violations = append(t.violations, key+": "+strings.Join(g.active, ", "))
		case len(g.all) > 1:
			t.overlaps++
		}
	}
	return t
}

// earlierSuspended tells whether the look saw the Kro's earlier HelmRelease suspended or
// gone.
func earlierSuspended(v lookView, tenant string) bool {
	for i := range v.releases {
		hr := &v.releases[i]
		if hr.Namespace == tenant && hr.Name == testenv.EarlierHelmReleaseName {
			return hr.Spec.Suspend
		}
	}
	return true
}

// ownApplied tells whether the look saw the provider's HelmRelease in the tenant namespace.
func ownApplied(v lookView, tenant string) bool {
	return v.present[objectKey("HelmRelease", tenant, providerName)]
}

// kroReady tells whether a Kro is Ready for its generation.
func kroReady(k *v1alpha1.Kro) bool {
	c := meta.FindStatusCondition(k.Status.Conditions, v1alpha1.ConditionReady)
	return c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == k.Generation
}

// looker looks, with List calls, at the Kros on the onboarding cluster and the Flux
// objects, secrets and AccessRequests on the platform cluster, and records when each Kro
// reached each stage of its hand-over and every look with two HelmReleases driving the
// release kro in one tenant namespace.
type looker struct {
	h          *harness
	kros       []*handoverKro
	withAccess bool
	start      time.Time

	looks      int
	took       []time.Duration
	violations int
	examples   []string
	overlaps   int
	last       lookView
}

func newLooker(h *harness, kros []*handoverKro, withAccess bool, start time.Time) *looker {
	return &looker{h: h, kros: kros, withAccess: withAccess, start: start}
}

// lookUntilDone looks every interval until every Kro is handed over, for at most limit
// from the start.
func (l *looker) lookUntilDone(ctx context.Context, every, limit time.Duration) error {
	deadline := l.start.Add(limit)
	for {
		at := time.Now()
		v, err := l.h.look(ctx, l.withAccess)
		if err != nil {
			return fmt.Errorf("look %d: %w", l.looks+1, err)
		}
		l.record(v, at, time.Since(at))
		if l.pending() == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the hand-over did not finish in %s: %s", limit, l.describePending())
		}
		if err := sleep(ctx, time.Until(at.Add(every))); err != nil {
			return err
		}
	}
}

// record notes what the look that began at at saw.
func (l *looker) record(v lookView, at time.Time, took time.Duration) {
	l.looks++
	l.took = append(l.took, took)
	l.last = v
	t := tallyReleases(v.releases)
	l.overlaps += t.overlaps
	l.violations += len(t.violations)
	for _, what := range t.violations {
		if len(l.examples) < maxViolationExamples {
			l.examples = append(l.examples, fmt.Sprintf("look %d at %.2f s: %s", l.looks, at.Sub(l.start).Seconds(), what))
		}
	}
	for _, k := range l.kros {
		tenant := k.ref.tenant
		if k.suspended.IsZero() && earlierSuspended(v, tenant) {
			k.suspended = at
		}
		if k.ownApplied.IsZero() && ownApplied(v, tenant) {
			k.ownApplied = at
		}
		if k.done.IsZero() && v.ready[k.ref.name] && len(left(k.keys, v.present)) == 0 {
			k.done = at
		}
	}
}

// pending counts the Kros not handed over yet.
func (l *looker) pending() int {
	n := 0
	for _, k := range l.kros {
		if k.done.IsZero() {
			n++
		}
	}
	return n
}

// describePending says which Kros the last look found not handed over, and why.
func (l *looker) describePending() string {
	var out []string
	for _, k := range l.kros {
		if !k.done.IsZero() {
			continue
		}
		if len(out) == 3 {
			out = append(out, "…")
			break
		}
		out = append(out, fmt.Sprintf("%s (Ready %v, left %v)", k.ref.name, l.last.ready[k.ref.name], left(k.keys, l.last.present)))
	}
	return fmt.Sprintf("%d of %d Kros not handed over: %s", l.pending(), len(l.kros), strings.Join(out, "; "))
}

// summarize fills in run's times and looks.
func (l *looker) summarize(run *HandoverRun) {
	var suspended, own, done []time.Duration
	for _, k := range l.kros {
		suspended = append(suspended, k.suspended.Sub(l.start))
		own = append(own, k.ownApplied.Sub(l.start))
		done = append(done, k.done.Sub(l.start))
	}
	run.Suspended, run.OwnApplied, run.HandedOver = Summarize(suspended), Summarize(own), Summarize(done)
	if len(done) > 0 {
		run.SecondsToFirst = round3(slices.Min(done).Seconds())
		run.SecondsToAll = round3(slices.Max(done).Seconds())
	}
	run.Looks, run.LookDuration = l.looks, Summarize(l.took)
	run.Violations, run.ViolationExamples, run.Overlaps = l.violations, l.examples, l.overlaps
}

// look lists, once each, the platform cluster's HelmReleases (whole), OCIRepositories,
// secrets and (withAccess) AccessRequests (metadata only), and the Kros.
func (h *harness) look(ctx context.Context, withAccess bool) (lookView, error) {
	v := lookView{present: map[string]bool{}, ready: map[string]bool{}}
	hrs := &helmv2.HelmReleaseList{}
	if err := h.pl.List(ctx, hrs); err != nil {
		return v, err
	}
	v.releases = hrs.Items
	for _, hr := range hrs.Items {
		v.present[objectKey("HelmRelease", hr.Namespace, hr.Name)] = true
	}
	lists := map[string]schema.GroupVersionKind{
		"OCIRepository": sourcev1.GroupVersion.WithKind("OCIRepositoryList"),
		"Secret":        corev1.SchemeGroupVersion.WithKind("SecretList"),
	}
	if withAccess {
		lists["AccessRequest"] = clustersv1alpha1.GroupVersion.WithKind("AccessRequestList")
	}
	for kind, gvk := range lists {
		if err := listNames(ctx, h.pl, kind, gvk, v.present); err != nil {
			return v, err
		}
	}
	kros := &v1alpha1.KroList{}
	if err := h.ob.List(ctx, kros, client.InNamespace(kroNamespace)); err != nil {
		return v, err
	}
	for i := range kros.Items {
		if kroReady(&kros.Items[i]) {
			v.ready[kros.Items[i].Name] = true
		}
	}
	return v, nil
}

// listNames lists the objects of a list kind, metadata only, into present.
func listNames(ctx context.Context, c client.Client, kind string, gvk schema.GroupVersionKind, present map[string]bool) error {
	l := &metav1.PartialObjectMetadataList{}
	l.SetGroupVersionKind(gvk)
	if err := c.List(ctx, l); err != nil {
		return fmt.Errorf("listing %s: %w", gvk.Kind, err)
	}
	for _, o := range l.Items {
		present[objectKey(kind, o.Namespace, o.Name)] = true
	}
	return nil
}

package flux

import (
	"strconv"
	"testing"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	. "github.com/onsi/gomega"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/owned"
	"github.com/openmcp-project/service-provider-kro/controllers/reach"
)

func testRepo(tag string, interval time.Duration) *sourcev1.OCIRepository {
	kro := &v1alpha1.Kro{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cp"}}
	return newOCIRepository(kro, "kro", "tenant", &v1alpha1.KroVersion{Version: "v1", ChartVersion: tag}, "", interval)
}

func testRelease(values string, interval time.Duration) *helmv2.HelmRelease {
	kro := &v1alpha1.Kro{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cp"}}
	v := &v1alpha1.KroVersion{Version: "v1", ChartVersion: "0.9.3", HelmValues: &apiextensionsv1.JSON{Raw: []byte(values)}}
	return NewHelmRelease(kro, "kro", "tenant", v, reach.SecretKey{Name: "access", Key: owned.KubeconfigKey}, interval)
}

// orNil is obj as a client.Object, nil when obj is a nil pointer.
func orNil[T interface {
	*sourcev1.OCIRepository | *helmv2.HelmRelease
	client.Object
}](obj T) client.Object {
	if obj == nil {
		return nil
	}
	return obj
}

// onServer is desired as the API server would hold it after the apply: stamped from
// current, at generation gen.
func onServer(g Gomega, desired, current *sourcev1.OCIRepository, gen int64) *sourcev1.OCIRepository {
	g.Expect(stampInstall(desired, orNil(current))).To(Succeed())
	out := desired.DeepCopy()
	out.Generation = gen
	return out
}

// TestStampInstall: an install keeps its first generation through changes of
// spec.interval; a change of anything else, an object without the stamp, or one whose
// spec someone else wrote, starts anew with the generation the apply creates.
func TestStampInstall(t *testing.T) {
	g := NewWithT(t)
	since := func(o client.Object) int64 {
		gen, ok := installGeneration(o)
		g.Expect(ok).To(BeTrue())
		return gen
	}
	first := onServer(g, testRepo("0.9.3", time.Minute), nil, 1)
	g.Expect(since(first)).To(Equal(int64(1)))

	interval := onServer(g, testRepo("0.9.3", 2*time.Minute), first, 2)
	g.Expect(since(interval)).To(Equal(int64(1)), "only spec.interval changed")
	g.Expect(interval.Annotations[AnnotationInstallHash]).To(Equal(first.Annotations[AnnotationInstallHash]))

	tag := onServer(g, testRepo("0.9.4", 2*time.Minute), interval, 3)
	g.Expect(since(tag)).To(Equal(int64(3)), "a new chart tag is a new install")
	g.Expect(tag.Annotations[AnnotationInstallHash]).NotTo(Equal(first.Annotations[AnnotationInstallHash]))

	same := onServer(g, testRepo("0.9.4", 2*time.Minute), tag, 3)
	g.Expect(same.Annotations).To(Equal(tag.Annotations), "nothing changed: nothing to write")

	unstamped := tag.DeepCopy()
	delete(unstamped.Annotations, AnnotationInstallGeneration)
	g.Expect(since(onServer(g, testRepo("0.9.4", time.Minute), unstamped, 4))).To(Equal(int64(4)))

	edited := tag.DeepCopy()
	edited.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl-edit", FieldsV1: metav1.NewFieldsV1(`{"f:spec":{"f:url":{}}}`)}}
	g.Expect(since(onServer(g, testRepo("0.9.4", time.Minute), edited, 4))).To(Equal(int64(4)))
}

// TestReadFlux: while Flux has not finished a generation that differs from the finished
// one only in spec.interval, the Kro reports Flux's reading of the finished one, or its
// own earlier report; anything else reads as fluxReadiness does.
func TestReadFlux(t *testing.T) {
	ready := func(status metav1.ConditionStatus, gen int64, message string) []metav1.Condition {
		return []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: status, ObservedGeneration: gen, Message: message}}
	}
	repo := func(gen, since, observed int64, conds []metav1.Condition) *sourcev1.OCIRepository {
		r := testRepo("0.9.3", time.Minute)
		r.Generation = gen
		r.Annotations[AnnotationInstallGeneration] = strconv.FormatInt(since, 10)
		r.Status.ObservedGeneration = observed
		r.Status.Conditions = conds
		return r
	}
	before := &v1alpha1.KroStatus{ManagedResources: []v1alpha1.ManagedResource{
		managedFlux(repo(1, 1, 1, nil), metav1.ConditionTrue, "stored artifact of before"),
	}}
	for _, tc := range []struct {
		name    string
		repo    *sourcev1.OCIRepository
		want    metav1.ConditionStatus
		message string
	}{
		{"finished", repo(2, 1, 2, ready(metav1.ConditionTrue, 2, "stored artifact")), metav1.ConditionTrue, "stored artifact"},
		{"interval changed, Flux has not begun", repo(2, 1, 1, ready(metav1.ConditionTrue, 1, "stored artifact")), metav1.ConditionTrue, "stored artifact"},
		{"interval changed, Flux is at it", repo(2, 1, 1, ready(metav1.ConditionUnknown, 2, "reconciliation in progress")), metav1.ConditionTrue, "stored artifact of before"},
		{"interval changed, Flux fails at it", repo(2, 1, 1, ready(metav1.ConditionFalse, 2, "unauthorized")), metav1.ConditionFalse, "unauthorized"},
		{"new chart", repo(2, 2, 1, ready(metav1.ConditionTrue, 1, "stored artifact")), metav1.ConditionUnknown, "waiting for Flux to reconcile it"},
		{"no stamp", repo(2, 0, 1, ready(metav1.ConditionTrue, 1, "stored artifact")), metav1.ConditionUnknown, "waiting for Flux to reconcile it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, message := readFlux(tc.repo, before)
			if status != tc.want || message != tc.message {
				t.Fatalf("readFlux = %s %q, want %s %q", status, message, tc.want, tc.message)
			}
		})
	}
	g := NewWithT(t)
	status, _ := readFlux(repo(2, 1, 1, ready(metav1.ConditionUnknown, 2, "reconciliation in progress")), &v1alpha1.KroStatus{})
	g.Expect(status).To(Equal(metav1.ConditionUnknown), "nothing reported before: nothing to keep")
}

// TestReleaseWaitsForSource: a changed HelmRelease waits for source-controller when the
// source's pending change is only its interval, or its own change is; a new chart with
// new values, a new HelmRelease, and a change while the source is observed go out at once.
func TestReleaseWaitsForSource(t *testing.T) {
	g := NewWithT(t)
	running := testRelease(`{"a":1}`, time.Minute)
	g.Expect(stampInstall(running, nil)).To(Succeed())
	_, err := owned.StampHash(running)
	g.Expect(err).NotTo(HaveOccurred())
	running.Generation = 1
	repo := func(gen, since, observed int64) *sourcev1.OCIRepository {
		r := testRepo("0.9.3", time.Minute)
		r.Generation, r.Status.ObservedGeneration = gen, observed
		r.Annotations[AnnotationInstallGeneration] = strconv.FormatInt(since, 10)
		return r
	}
	waits := func(r *sourcev1.OCIRepository, current, desired *helmv2.HelmRelease) bool {
		g.Expect(stampInstall(desired, orNil(current))).To(Succeed())
		w, err := releaseWaitsForSource(r, orNil(current), desired)
		g.Expect(err).NotTo(HaveOccurred())
		return w
	}
	intervalPending, chartPending, observed := repo(2, 1, 1), repo(2, 2, 1), repo(2, 1, 2)

	g.Expect(waits(intervalPending, running, testRelease(`{"a":1}`, 2*time.Minute))).To(BeTrue(), "interval and interval")
	g.Expect(waits(intervalPending, running, testRelease(`{"a":2}`, time.Minute))).To(BeTrue(), "values wait for a source whose change is the interval")
	g.Expect(waits(chartPending, running, testRelease(`{"a":1}`, 2*time.Minute))).To(BeTrue(), "a new chart goes with the values there are")
	g.Expect(waits(chartPending, running, testRelease(`{"a":2}`, time.Minute))).To(BeFalse(), "a new chart and new values go together")
	g.Expect(waits(observed, running, testRelease(`{"a":1}`, 2*time.Minute))).To(BeFalse(), "the source is observed")
	g.Expect(waits(intervalPending, nil, testRelease(`{"a":1}`, time.Minute))).To(BeFalse(), "a new HelmRelease")
	g.Expect(waits(intervalPending, running, testRelease(`{"a":1}`, time.Minute))).To(BeFalse(), "unchanged")
	g.Expect(waits(nil, running, testRelease(`{"a":1}`, 2*time.Minute))).To(BeFalse(), "no source applied in this reconcile")
}

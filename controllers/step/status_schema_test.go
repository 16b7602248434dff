package step_test

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	krov1alpha1 "github.com/kubernetes-sigs/kro/api/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/foreign"
	"github.com/openmcp-project/service-provider-kro/controllers/guard"
	"github.com/openmcp-project/service-provider-kro/controllers/step"
	"github.com/openmcp-project/service-provider-kro/test/crdschema"
)

// FuzzKroStatus is the Kro's half of one rule for every status (issue 40): a reconcile
// that meets hundreds of RGDs not Ready with the longest names and any reasons and
// messages, Flux messages of any length and form, and a deletion waiting on any text,
// computes a status (ComputeStatus) that the Kro's CRD accepts: OpenAPI schema, list
// types and CEL rules, as the API server serves them. The foreign strings go through
// the pure code that turns them into the status (guard.SummarizeRGDs, RgdCondition,
// FluxReadiness, FluxCondition, Observation.Set), never hand-built into it.
func FuzzKroStatus(f *testing.F) {
	f.Add(uint64(1), uint16(500), false)
	f.Add(uint64(2), uint16(3), true)
	f.Add(uint64(3), uint16(0), false)
	f.Add(uint64(4), uint16(2000), false)
	validator, err := crdschema.For("Kro")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, seed uint64, rgds uint16, deleting bool) {
		r := rand.New(rand.NewPCG(seed, ^seed))
		now := metav1.NewTime(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
		kro := &v1alpha1.Kro{
			ObjectMeta: metav1.ObjectMeta{Name: crdschema.Name(r, 253, 0), Namespace: strings.Repeat("n", 63), Generation: 7},
			Spec:       v1alpha1.KroSpec{Version: "v" + strings.Repeat("9", 63)},
		}
		for round := range 3 {
			obs := hostileObservation(r, int(rgds%3000), deleting)
			kro.Status = step.ComputeStatus(kro.Status, kro.Generation, obs, now)
			if errs := validator.Validate(kro); len(errs) > 0 {
				t.Fatalf("seed %d, %d RGDs, round %d: the API server would refuse the status: %s", seed, rgds, round, foreign.Text(errs.ToAggregate().Error(), 2000))
			}
			now = metav1.NewTime(now.Add(time.Minute))
		}
	})
}

// hostileObservation is what a reconcile may learn from other controllers and tenants.
func hostileObservation(r *rand.Rand, rgds int, deleting bool) step.Observation {
	text := func(n int) string { return crdschema.Text(r, n) }
	obs := step.Observation{
		ChartVersion: text(400), ChartObserved: true, Deleting: deleting, WaitingFor: text(3000),
		Placement: []v1alpha1.Placement{v1alpha1.PlacementControlPlane, v1alpha1.PlacementWorkloadCluster}[r.IntN(2)],
		Revision:  crdschema.Name(r, 253, 1), AccessChecked: true,
	}
	// Flux's word on its objects: any message, its conditions for any generation.
	for _, c := range []struct{ cond, what, fail string }{
		{v1alpha1.ConditionOCIRepositoryReady, "OCIRepository", v1alpha1.ReasonSourceNotReady},
		{v1alpha1.ConditionHelmReleaseReady, "HelmRelease", v1alpha1.ReasonReleaseFailed},
	} {
		status := []metav1.ConditionStatus{metav1.ConditionTrue, metav1.ConditionFalse, metav1.ConditionUnknown}[r.IntN(3)]
		flux := []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: status, Reason: text(200), Message: text(40000), ObservedGeneration: 3}}
		st, msg := step.FluxReadiness(3, int64(2+r.IntN(2)), flux)
		step.FluxCondition(&obs, c.cond, c.what+" "+text(300), st, msg, c.fail)
	}
	// Other steps' outcomes, with reasons and messages from elsewhere (an API server's
	// error, another controller's reason).
	for _, c := range []string{v1alpha1.ConditionVersionResolved, v1alpha1.ConditionPullSecretsReady, v1alpha1.ConditionControlPlaneAccessReady,
		v1alpha1.ConditionControlPlanePartsReady, v1alpha1.ConditionKroCredentialReady, v1alpha1.ConditionDeletionBlocked, v1alpha1.ConditionHandOver} {
		if r.IntN(3) > 0 {
			obs.Set(c, []metav1.ConditionStatus{metav1.ConditionTrue, metav1.ConditionFalse}[r.IntN(2)], text(2000), text(50000))
		}
	}
	// The tenant's RGDs, as kro reports them.
	list := make([]krov1alpha1.ResourceGraphDefinition, 0, rgds)
	for i := range rgds {
		rgd := krov1alpha1.ResourceGraphDefinition{ObjectMeta: metav1.ObjectMeta{Name: crdschema.Name(r, 10+r.IntN(244), i)}}
		if r.IntN(4) > 0 {
			reason, message := text(3000), text(600)
			if i < 20 {
				message = text(40000)
			}
			status := []metav1.ConditionStatus{metav1.ConditionTrue, metav1.ConditionFalse, metav1.ConditionUnknown}[r.IntN(3)]
			rgd.Status.Conditions = []krov1alpha1.Condition{{Type: "Ready", Status: status, Reason: &reason, Message: &message}}
		}
		list = append(list, rgd)
	}
	// SummarizeRGDs wants them sorted by name, as the list from the API server is.
	slices.SortFunc(list, func(a, b krov1alpha1.ResourceGraphDefinition) int { return strings.Compare(a.Name, b.Name) })
	if r.IntN(5) > 0 {
		obs.Rgds = guard.SummarizeRGDs(list)
		step.RgdCondition(&obs, obs.Rgds)
	}
	return obs
}

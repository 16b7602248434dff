package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/foreign"
	"github.com/openmcp-project/service-provider-kro/controllers/pullsecrets"
	"github.com/openmcp-project/service-provider-kro/controllers/rollout"
	"github.com/openmcp-project/service-provider-kro/controllers/rollout/rollouttest"
	"github.com/openmcp-project/service-provider-kro/test/crdschema"
)

// One rule for every status (issue 40): nothing the provider computes for a
// ProviderConfig's status can be refused by the API server for its size or its form.
// FuzzProviderConfigStatus feeds the pure status code (providerConfigStatus, and the
// rollouts it plans) a hostile cluster and checks every status it computes against the
// ProviderConfig's CRD, as the API server serves it: OpenAPI schema, list types, CEL.
// Its seeds run with every `go test`; `go test -fuzz FuzzProviderConfigStatus` looks
// further.

// hostileMaxStatusBytes bounds the status as JSON: etcd refuses an object over 1.5 MiB
// (its default --max-request-bytes). The object's spec and metadata come on top; one
// version's crowd, 1000 failed with reasons at their longest and 1000 updating, comes
// to about 1.1 MiB, so several such versions at once still can pass the limit.
const hostileMaxStatusBytes = 1536 << 10

// TestLongCanaryNamesDoNotFreezeTheProviderConfig is the case against real API
// servers: under spec.rollout.canary, a tenant makes six Kros with names of 220
// characters that carry the selector's labels themselves. The version's message names
// them; the API server accepts the ProviderConfig's status, which goes on counting.
func TestLongCanaryNamesDoNotFreezeTheProviderConfig(t *testing.T) {
	g := withClusters(t)
	ctx := context.Background()
	v := v1alpha1.KroVersion{Version: uniq("v-canary-names"), ChartVersion: "0.9.4"}
	offerVersion(g, v)
	t.Cleanup(func() { withdrawVersion(g, v.Version) })
	setRollout(t, g, &v1alpha1.RolloutPolicy{MaxUnavailable: ptr.To(intstr.FromInt32(1)), Canary: rollouttest.RingCanary()})
	ns := newNamespace(t, g)
	for i := range 6 {
		k := &v1alpha1.Kro{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("%s-%d", strings.Repeat("long-tenant-name", 13), i), Labels: map[string]string{"ring": "canary"}},
			Spec:       v1alpha1.KroSpec{Version: v.Version},
		}
		g.Expect(onboarding.Client.Create(ctx, k)).To(Succeed())
		t.Cleanup(func() { deleteKro(g, k) })
	}
	g.Eventually(func(g Gomega) {
		pc := &v1alpha1.ProviderConfig{}
		g.Expect(platform.Client.Get(ctx, client.ObjectKey{Name: providerName}, pc)).To(Succeed())
		ready := meta.FindStatusCondition(pc.Status.Conditions, v1alpha1.ConditionReady)
		g.Expect(ready).NotTo(BeNil())
		g.Expect(ready.Reason).NotTo(Equal(v1alpha1.ReasonStatusRefused), ready.Message)
		vs := versionStatus(g, v.Version)
		g.Expect(vs.Kros).To(BeEquivalentTo(6))
		g.Expect(vs.Message).To(ContainSubstring("6 Kros carry labels of their own that spec.rollout.canary matches"))
		g.Expect(vs.Message).To(ContainSubstring("and 1 more"))
	}, timeout, interval).Should(Succeed())
}

func FuzzProviderConfigStatus(f *testing.F) {
	f.Add(uint64(1), uint16(6), uint8(200), false)  // the canary: six Kros with ~200-character names
	f.Add(uint64(2), uint16(40), uint8(253), false) // names at their longest
	f.Add(uint64(3), uint16(1500), uint8(253), false)
	f.Add(uint64(4), uint16(300), uint8(120), false)
	f.Add(uint64(5), uint16(0), uint8(10), false)
	f.Add(uint64(6), uint16(1200), uint8(60), false)
	f.Add(uint64(7), uint16(2900), uint8(253), true) // more Kros failed and waiting than a status lists
	f.Add(uint64(8), uint16(1100), uint8(200), true)
	validator, err := crdschema.For("ProviderConfig")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, seed uint64, kros uint16, nameLen uint8, crowd bool) {
		w := newHostileWorld(seed, int(kros%3000), max(int(nameLen), 10), crowd)
		pc := w.pc
		for round := range 4 {
			obs := w.observation(round)
			st, _ := providerConfigStatus(pc, obs)
			pc = pc.DeepCopy()
			pc.Status = st
			if errs := validator.Validate(pc); len(errs) > 0 {
				t.Fatalf("seed %d, %d Kros, round %d: the API server would refuse the status: %s", seed, kros, round, firstErrors(errs.ToAggregate().Error()))
			}
			if raw, _ := json.Marshal(pc.Status); len(raw) > hostileMaxStatusBytes {
				t.Fatalf("seed %d, %d Kros, round %d: the status is %d bytes as JSON, over %d", seed, kros, round, len(raw), hostileMaxStatusBytes)
			}
		}
	})
}

// firstErrors keeps a refusal readable: the start of it.
func firstErrors(s string) string { return foreign.Text(s, 2000) }

// hostileWorld is a platform with long names everywhere, hostile records on the
// HelmReleases, and Kros in every state a rollout knows. A crowd is one version whose
// Kros are all unavailable on the old revision, most of them recorded as failed with the
// current one, under a policy that neither plans nor pauses: more Kros to list as
// failed or updating than a status holds.
type hostileWorld struct {
	r          *rand.Rand
	crowd      bool
	pc         *v1alpha1.ProviderConfig
	kros       []v1alpha1.Kro
	records    map[string]rollout.Record
	versionOf  map[string]string
	artifacts  map[string]*v1alpha1.KroVersion
	nsLabels   map[string]map[string]string
	oldRev     map[string]string
	currentRev map[string]string
	t0         time.Time
}

func newHostileWorld(seed uint64, n, nameLen int, crowd bool) *hostileWorld {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	w := &hostileWorld{
		r: r, crowd: crowd, records: map[string]rollout.Record{}, versionOf: map[string]string{}, artifacts: map[string]*v1alpha1.KroVersion{},
		nsLabels: map[string]map[string]string{}, oldRev: map[string]string{}, currentRev: map[string]string{},
		t0: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC),
	}
	pc := &v1alpha1.ProviderConfig{ObjectMeta: metav1.ObjectMeta{Name: crdschema.Name(r, 10+r.IntN(240), 0), Generation: 3}}
	versions := 1 + r.IntN(3)
	if crowd {
		versions = 1
	}
	for i := range versions {
		version := w.versionName(i)
		cur := v1alpha1.KroVersion{
			Version: version, ChartVersion: strings.Repeat("9", 1+r.IntN(127)),
			ChartURL: "oci://" + strings.Repeat("r", r.IntN(500)), ChartPullSecret: crdschema.Name(r, 10+r.IntN(243), i),
			HelmValues: hostileValues(r),
		}
		old := cur
		old.ChartVersion, old.HelmValues = "1.0.0", hostileValues(r)
		pc.Spec.Versions = append(pc.Spec.Versions, cur)
		curRev, _ := rollout.RevisionName(pc.Name, &cur)
		oldRev, _ := rollout.RevisionName(pc.Name, &old)
		w.currentRev[version], w.oldRev[version] = curRev, oldRev
		w.versionOf[curRev], w.versionOf[oldRev] = version, version
		w.artifacts[oldRev] = &old
	}
	if r.IntN(6) > 0 || crowd {
		pc.Spec.Rollout = w.policy()
	}
	if r.IntN(5) == 0 && !crowd {
		pc.Annotations = map[string]string{v1alpha1.AnnotationRolloutPaused: "true"}
	}
	w.pc = pc
	for i := range n {
		w.kros = append(w.kros, w.kro(i, nameLen))
	}
	return w
}

// versionName is a valid version of up to 64 characters.
func (w *hostileWorld) versionName(i int) string {
	const chars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._+-"
	b := []byte("v" + strconv.Itoa(i))
	for n := w.r.IntN(64); len(b) < n; {
		b = append(b, chars[w.r.IntN(len(chars))])
	}
	return string(b)
}

// hostileValues are helmValues with many long keys, dots and quotes in them.
func hostileValues(r *rand.Rand) *apiextensionsv1.JSON {
	values := map[string]any{}
	for i := range r.IntN(30) {
		values[strings.Repeat("k.\"[", r.IntN(40))+strconv.Itoa(i)] = map[string]any{strings.Repeat("x", r.IntN(200)): i}
	}
	raw, _ := json.Marshal(values)
	return &apiextensionsv1.JSON{Raw: raw}
}

func (w *hostileWorld) policy() *v1alpha1.RolloutPolicy {
	r := w.r
	p := &v1alpha1.RolloutPolicy{
		MaxUnavailable:   ptr.To(intstr.FromInt32(int32(1 + r.IntN(2000)))),
		FailureThreshold: ptr.To(int32(1 + r.IntN(3000))),
		HealthTimeout:    &metav1.Duration{Duration: 30 * time.Second},
		Plan:             r.IntN(4) == 0,
	}
	if r.IntN(2) == 0 || w.crowd {
		p.MaxUnavailable = ptr.To(intstr.FromString("100%"))
	}
	if w.crowd {
		p.Plan, p.FailureThreshold = false, ptr.To(int32(5000))
	}
	if r.IntN(4) > 0 {
		p.Canary = &metav1.LabelSelector{MatchLabels: map[string]string{"ring": "canary"}}
	}
	return p
}

// kro is the i-th Kro: a name of nameLen characters in a Namespace of up to 63, on one of
// the versions (or none on offer), running the old or the current revision, Ready or not,
// carrying the canary's labels itself or in a canary Namespace, with a failed release,
// RGDs and kro's health as its status can hold them at their longest.
func (w *hostileWorld) kro(i, nameLen int) v1alpha1.Kro {
	r := w.r
	ns := "ns" + strconv.Itoa(r.IntN(8)) + "-" + strings.Repeat("n", r.IntN(58))
	if r.IntN(3) == 0 {
		w.nsLabels[ns] = map[string]string{"ring": "canary"}
	}
	v := w.pc.Spec.Versions[r.IntN(len(w.pc.Spec.Versions))].Version
	if r.IntN(20) == 0 {
		v = "not-offered"
	}
	k := v1alpha1.Kro{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: crdschema.Name(r, nameLen, i), Generation: 1}, Spec: v1alpha1.KroSpec{Version: v}}
	if r.IntN(2) == 0 {
		k.Labels = map[string]string{"ring": "canary"}
	}
	st := &k.Status
	st.ObservedGeneration, st.Phase = 1, v1alpha1.PhaseProgressing
	if r.IntN(3) > 0 && !w.crowd {
		st.Phase = v1alpha1.PhaseReady
	}
	st.Revision = []string{w.oldRev[v], w.currentRev[v], ""}[r.IntN(3)]
	if w.crowd {
		st.Revision = w.oldRev[v]
	}
	msg := func() string { return foreign.Text(crdschema.Text(r, 2000), foreign.StatusMessageMax) }
	reason := func() string { return foreign.Reason(crdschema.Text(r, 300), 128) }
	at := metav1.NewTime(w.t0.Add(time.Duration(r.IntN(3600)) * time.Second))
	st.Conditions = []metav1.Condition{
		{Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: reason(), Message: msg(), LastTransitionTime: at},
		{Type: v1alpha1.ConditionHelmReleaseReady, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonReleaseFailed, Message: msg(), LastTransitionTime: at},
	}
	total := int32(r.IntN(5000))
	sum := &v1alpha1.ResourceGraphDefinitionSummary{Total: total, Ready: int32(r.IntN(int(total) + 1))}
	for j := range 10 {
		sum.NotReady = append(sum.NotReady, v1alpha1.ResourceGraphDefinitionState{Name: crdschema.Name(r, 253, j), Reason: reason(), Message: msg()})
	}
	st.ResourceGraphDefinitions = sum
	if r.IntN(2) == 0 {
		h := &v1alpha1.RolloutHealth{Revision: w.currentRev[v], Instances: v1alpha1.InstanceCounts{Total: 100, Ready: int32(r.IntN(100))}, Deployment: msg()}
		for j := range 5 {
			h.NotReady = append(h.NotReady, v1alpha1.InstanceState{Kind: strings.Repeat("K", 63), Namespace: strings.Repeat("s", 63), Name: crdschema.Name(r, 253, j), Reason: reason()})
		}
		st.RolloutHealth = h
	}
	if rec := w.record(v); rec.Revision != "" {
		w.records[rollout.KroKey(&k)] = rec
	}
	return k
}

// record is what a HelmRelease's annotations say: anyone with access to the platform
// cluster can write them, so the failure is any text at all.
func (w *hostileWorld) record(version string) rollout.Record {
	r := w.r
	if w.crowd {
		if r.IntN(5) == 0 {
			return rollout.Record{Revision: w.oldRev[version]}
		}
		return rollout.Record{Revision: w.currentRev[version], Admission: &rollout.Admission{Since: metav1.NewTime(w.t0)}, Failed: crdschema.Text(r, 5000)}
	}
	if r.IntN(3) == 0 {
		return rollout.Record{}
	}
	rec := rollout.Record{Revision: []string{w.oldRev[version], w.currentRev[version]}[r.IntN(2)]}
	if r.IntN(3) > 0 {
		rec.Admission = &rollout.Admission{
			Since: metav1.NewTime(w.t0), RGDsReady: int32(r.IntN(5000)), Unavailable: r.IntN(4) == 0,
			Instances: &v1alpha1.InstanceCounts{Total: 100, Ready: 100},
		}
	}
	if r.IntN(3) == 0 {
		rec.Failed = crdschema.Text(r, 5000)
	}
	return rec
}

// observation is what a reconcile of round finds: the same Kros later (health timeouts
// run out), and pull secret problems with long messages.
func (w *hostileWorld) observation(round int) providerConfigObservation {
	obs := providerConfigObservation{
		kros: w.kros, records: w.records, versionOf: w.versionOf, artifacts: w.artifacts, namespaceLabels: w.nsLabels,
		now: w.t0.Add(time.Duration(round) * 11 * time.Minute),
	}
	for i := range w.r.IntN(70) {
		obs.problems = append(obs.problems, pullsecrets.SecretProblem{Reason: v1alpha1.ReasonPullSecretMissing,
			Message: fmt.Sprintf("secret %d: %s", i, crdschema.Text(w.r, 700))})
	}
	return obs
}

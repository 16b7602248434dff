//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/test/e2e/env"
)

// The rollout of a change of a version's artifacts (issue 15, item 5): three ControlPlanes
// on the same version, real Flux and kro's real chart. A harmless change of the version's
// helmValues reaches the Kros one at a time; a change whose Helm upgrade fails pauses
// after the first Kro and leaves the others alone; reverting it returns every Kro to the
// earlier revision.

const (
	// rolloutVersion is the version whose helmValues change; the environment offers it
	// without helmValues.
	rolloutVersion = "v0.9.3"
	// rolloutHealthTimeout is spec.rollout.healthTimeout: long enough for an upgrade on a
	// busy machine, and longer than the failure below takes to show, so that the pause
	// comes from the failed release and not from the timeout.
	rolloutHealthTimeout = 3 * time.Minute
	// rolloutPoll is how often the specs look at the HelmReleases, Kros and ProviderConfig.
	rolloutPoll = 200 * time.Millisecond
	// rolloutQuiet is how long the paused rollout is watched for anything that moves.
	rolloutQuiet = 20 * time.Second
)

// The version's helmValues: a pod annotation of kro's Deployment (chart values
// deployment.podAnnotations), which changes the pod template and so makes a real
// rollout of the Deployment; and the same with a CPU limit the API server cannot parse
// (deployment.resources is passed through with toYaml), so that Helm's upgrade fails.
const (
	rolloutGoodValues   = `{"deployment":{"podAnnotations":{"e2e.kro.run/rollout":"good"}}}`
	rolloutBrokenValues = `{"deployment":{"podAnnotations":{"e2e.kro.run/rollout":"broken"},"resources":{"limits":{"cpu":"not-a-quantity"}}}}`
)

// rolloutSnapshot is one look, in this order, at the HelmReleases, the Kros and the
// ProviderConfig: what a HelmRelease shows was there before the Kro was read.
type rolloutSnapshot struct {
	values []string // per ControlPlane: "none", "good", "broken", "good2" or the JSON
	hrGen  []int64
	kros   []*v1alpha1.Kro
	vs     v1alpha1.VersionStatus
}

func (s rolloutSnapshot) String() string {
	var b strings.Builder
	for i, k := range s.kros {
		fmt.Fprintf(&b, "\n  HelmRelease values %s (generation %d); Kro %s/%s phase %s revision %s", s.values[i], s.hrGen[i],
			k.Namespace, k.Name, k.Status.Phase, k.Status.Revision)
		for _, t := range []string{v1alpha1.ConditionReady, v1alpha1.ConditionHelmReleaseReady, v1alpha1.ConditionVersionResolved} {
			c := condition(k, t)
			fmt.Fprintf(&b, "\n    %s=%s %s: %s", t, c.Status, c.Reason, c.Message)
		}
	}
	fmt.Fprintf(&b, "\n  version %s: revision %s rollout %s updated %d updating %v failed %v: %s", s.vs.Version, s.vs.Revision,
		s.vs.Rollout, s.vs.Updated, s.vs.Updating, s.vs.Failed, s.vs.Message)
	return b.String()
}

var _ = Describe("rollout of a version's changed artifacts", Ordered, Label("rollout"), func() {
	var (
		se  *env.Env
		cps []*env.ControlPlane
		// The revisions of the version: as the environment offers it, with the good
		// values, with the broken ones.
		oldRev, goodRev, brokenRev string
		// goodGen is each HelmRelease's generation once it has the good values.
		goodGen []int64
	)
	refs := []env.ControlPlaneRef{{Name: "roll-a", Namespace: "rollout-a"}, {Name: "roll-b", Namespace: "rollout-b"}, {Name: "roll-c", Namespace: "rollout-c"}}
	keyOf := func(cp *env.ControlPlane) string { return cp.Namespace + "/" + cp.Name }

	fluxKeyIn := func(cp *env.ControlPlane) client.ObjectKey {
		return client.ObjectKey{Namespace: cp.TenantNamespace, Name: se.ProviderName}
	}
	valuesName := func(v *apiextensionsv1.JSON) string {
		if v == nil || len(v.Raw) == 0 {
			return "none"
		}
		var got any
		Expect(json.Unmarshal(v.Raw, &got)).To(Succeed())
		for name, raw := range map[string]string{"good": rolloutGoodValues, "broken": rolloutBrokenValues, "good2": rolloutGood2Values} {
			var want any
			Expect(json.Unmarshal([]byte(raw), &want)).To(Succeed())
			if reflect.DeepEqual(got, want) {
				return name
			}
		}
		return string(v.Raw)
	}
	getPC := func() *v1alpha1.ProviderConfig {
		GinkgoHelper()
		pc := &v1alpha1.ProviderConfig{}
		Expect(se.Platform.Client.Get(suiteCtx, client.ObjectKey{Name: se.ProviderName}, pc)).To(Succeed())
		return pc
	}
	versionStatus := func(pc *v1alpha1.ProviderConfig) v1alpha1.VersionStatus {
		for _, vs := range pc.Status.Versions {
			if vs.Version == rolloutVersion {
				return vs
			}
		}
		return v1alpha1.VersionStatus{Version: rolloutVersion}
	}
	snapshot := func() rolloutSnapshot {
		GinkgoHelper()
		var s rolloutSnapshot
		for _, cp := range cps {
			hr := &helmv2.HelmRelease{}
			Expect(se.Platform.Client.Get(suiteCtx, fluxKeyIn(cp), hr)).To(Succeed())
			s.values = append(s.values, valuesName(hr.Spec.Values))
			s.hrGen = append(s.hrGen, hr.Generation)
		}
		for _, cp := range cps {
			kro := kroOf(cp)
			Expect(se.Onboarding.Client.Get(suiteCtx, client.ObjectKeyFromObject(kro), kro)).To(Succeed())
			s.kros = append(s.kros, kro)
		}
		s.vs = versionStatus(getPC())
		return s
	}
	// watch looks every rolloutPoll until check says done; check fails the spec on
	// anything that must not happen. It fails after d.
	watch := func(d time.Duration, check func(s rolloutSnapshot) bool) rolloutSnapshot {
		GinkgoHelper()
		deadline := time.Now().Add(d)
		for {
			s := snapshot()
			if check(s) {
				return s
			}
			if time.Now().After(deadline) {
				Fail(fmt.Sprintf("not done within %s:%s", d, s))
			}
			time.Sleep(rolloutPoll)
		}
	}
	// runs: the Kro is Ready, for its current spec, with that revision.
	runs := runsRevision
	updatePC := func(mutate func(pc *v1alpha1.ProviderConfig)) { GinkgoHelper(); updateProviderConfig(se, mutate) }
	setValues := func(raw string) func(pc *v1alpha1.ProviderConfig) {
		return func(pc *v1alpha1.ProviderConfig) {
			found := false
			for i := range pc.Spec.Versions {
				if pc.Spec.Versions[i].Version == rolloutVersion {
					pc.Spec.Versions[i].HelmValues = &apiextensionsv1.JSON{Raw: []byte(raw)}
					found = true
				}
			}
			Expect(found).To(BeTrue(), "the environment offers %s", rolloutVersion)
		}
	}
	// pcEvents are the ProviderConfig's events of a reason last seen at or after since.
	pcEvents := func(g Gomega, reason string, since time.Time) []eventsv1.Event {
		var list eventsv1.EventList
		g.Expect(se.Platform.Client.List(suiteCtx, &list, client.InNamespace(metav1.NamespaceDefault))).To(Succeed())
		var out []eventsv1.Event
		for _, ev := range list.Items {
			if ev.Regarding.Kind != "ProviderConfig" || ev.Regarding.Name != se.ProviderName || ev.Reason != reason {
				continue
			}
			last := ev.EventTime.Time
			if ev.Series != nil && ev.Series.LastObservedTime.After(last) {
				last = ev.Series.LastObservedTime.Time
			}
			if !last.Before(since) {
				out = append(out, ev)
			}
		}
		return out
	}
	logEvents := func() {
		var list eventsv1.EventList
		Expect(se.Platform.Client.List(suiteCtx, &list, client.InNamespace(metav1.NamespaceDefault))).To(Succeed())
		for _, ev := range list.Items {
			if ev.Regarding.Kind == "ProviderConfig" {
				count := int32(1)
				if ev.Series != nil {
					count = ev.Series.Count
				}
				fmt.Fprintf(GinkgoWriter, "event on the ProviderConfig: %s %s (x%d, first %s): %s\n", ev.Type, ev.Reason, count,
					ev.EventTime.Format(time.RFC3339), ev.Note)
			}
		}
	}
	// untouched expects the Kros after the first to keep the good revision: their
	// HelmReleases unchanged since they got it, their Kros Ready with it.
	untouched := func(s rolloutSnapshot) {
		GinkgoHelper()
		for i := 1; i < len(cps); i++ {
			Expect(s.values[i]).To(Equal("good"), "HelmRelease of %s changed:%s", cps[i].Name, s)
			Expect(s.hrGen[i]).To(Equal(goodGen[i]), "HelmRelease of %s changed:%s", cps[i].Name, s)
			Expect(runs(s.kros[i], goodRev)).To(BeTrue(), "Kro %s is not Ready with %s:%s", cps[i].Name, goodRev, s)
		}
	}

	BeforeAll(func() {
		se = startRolloutEnv("rollout", "rollout", refs)
		for _, ref := range refs {
			cp := se.ControlPlane(ref.Name)
			Expect(cp).NotTo(BeNil())
			cps = append(cps, cp)
			Expect(se.Onboarding.Client.Create(suiteCtx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: cp.Namespace}})).To(Succeed())
		}
	})

	It("rolls a harmless change of the version's helmValues out one Kro at a time", func() {
		for _, cp := range cps {
			kro := kroOf(cp)
			kro.Spec.Version = rolloutVersion
			Expect(se.Onboarding.Client.Create(suiteCtx, kro)).To(Succeed())
		}
		measure("rollout: three Kros Ready", func() {
			eventually(5*time.Minute, func(g Gomega) {
				for _, cp := range cps {
					kro := kroOf(cp)
					g.Expect(se.Onboarding.Client.Get(suiteCtx, client.ObjectKeyFromObject(kro), kro)).To(Succeed())
					g.Expect(kro.Status.ObservedGeneration).To(Equal(kro.Generation), describeKro(kro))
					g.Expect(kro.Status.Phase).To(Equal(v1alpha1.PhaseReady), describeKro(kro))
					g.Expect(kro.Status.ChartVersion).To(Equal("0.9.3"), describeKro(kro))
				}
			})
		})
		By("every Kro runs the version's revision, and the ProviderConfig says so")
		eventually(time.Minute, func(g Gomega) {
			s := snapshot()
			oldRev = s.vs.Revision
			g.Expect(oldRev).To(HavePrefix(se.ProviderName+"-v0-9-3-"), "%s", s)
			g.Expect(s.vs.Rollout).To(Equal(v1alpha1.RolloutComplete), "%s", s)
			g.Expect(s.vs.Updated).To(BeEquivalentTo(3), "%s", s)
			for i := range cps {
				g.Expect(runs(s.kros[i], oldRev)).To(BeTrue(), "%s", s)
				g.Expect(s.values[i]).To(Equal("none"), "%s", s)
			}
		})

		By("spec.rollout {maxUnavailable: 1} and new helmValues for " + rolloutVersion)
		changed := time.Now()
		updatePC(func(pc *v1alpha1.ProviderConfig) {
			pc.Spec.Rollout = &v1alpha1.RolloutPolicy{
				MaxUnavailable: ptr.To(intstr.FromInt32(1)),
				HealthTimeout:  &metav1.Duration{Duration: rolloutHealthTimeout},
			}
			setValues(rolloutGoodValues)(pc)
		})
		n := len(cps)
		changedTick, readyTick := make([]int, n), make([]int, n)
		changedAt, readyAt := make([]time.Duration, n), make([]time.Duration, n)
		pendingSeen := make([]bool, n)
		for i := range cps {
			changedTick[i], readyTick[i] = -1, -1
		}
		tick := 0
		var last rolloutSnapshot
		measure("rollout: three Kros, one at a time", func() {
			last = watch(8*time.Minute, func(s rolloutSnapshot) bool {
				tick++
				rev := ""
				if s.vs.Revision != oldRev {
					rev = s.vs.Revision
				}
				inFlight := 0
				for i := range cps {
					Expect(s.values[i]).To(BeElementOf("none", "good"), "%s", s)
					if s.values[i] == "good" && changedTick[i] < 0 {
						changedTick[i], changedAt[i] = tick, time.Since(changed)
					}
					if runs(s.kros[i], rev) && readyTick[i] < 0 {
						readyTick[i], readyAt[i] = tick, time.Since(changed)
					}
					// Admitted and not yet seen Ready with the new revision.
					if changedTick[i] >= 0 && readyTick[i] < 0 {
						inFlight++
					}
					if condition(s.kros[i], v1alpha1.ConditionVersionResolved).Reason == v1alpha1.ReasonRolloutPending {
						pendingSeen[i] = true
					}
				}
				Expect(inFlight).To(BeNumerically("<=", 1), "more than maxUnavailable=1 HelmReleases have the new values without their Kro Ready with them:%s", s)
				if rev != "" {
					Expect(len(s.vs.Updating)).To(BeNumerically("<=", 1), "%s", s)
					Expect(s.vs.Failed).To(BeEmpty(), "%s", s)
				}
				done := rev != "" && s.vs.Rollout == v1alpha1.RolloutComplete && s.vs.Updated == 3
				for i := range cps {
					done = done && readyTick[i] >= 0
				}
				return done
			})
		})
		for i, cp := range cps {
			fmt.Fprintf(GinkgoWriter, "rollout: %s got the new values after %s, Ready with them after %s\n", cp.Name,
				changedAt[i].Round(100*time.Millisecond), readyAt[i].Round(100*time.Millisecond))
			recordTiming("rollout: "+cp.Name+" Ready with the new values", readyAt[i])
		}
		By("the HelmReleases changed in name order, each after the one before was Ready with the new revision")
		for i := 1; i < n; i++ {
			Expect(changedTick[i]).To(BeNumerically(">", changedTick[i-1]), "%s changed before %s", cps[i].Name, cps[i-1].Name)
			Expect(changedTick[i]).To(BeNumerically(">=", readyTick[i-1]),
				"%s got the new values (after %s) before %s was Ready with them (after %s)", cps[i].Name, changedAt[i], cps[i-1].Name, readyAt[i-1])
		}
		By("the Kros that waited said RolloutPending meanwhile")
		Expect(pendingSeen[1:]).To(HaveEach(BeTrue()), "%v", pendingSeen)

		goodRev = last.vs.Revision
		Expect(goodRev).To(HavePrefix(se.ProviderName+"-v0-9-3-"), "%s", last)
		Expect(last.vs.Updating).To(BeEmpty(), "%s", last)
		for i := range cps {
			Expect(condition(last.kros[i], v1alpha1.ConditionVersionResolved).Reason).NotTo(Equal(v1alpha1.ReasonRolloutPending), "%s", last)
		}
		goodGen = last.hrGen
		By("both revisions are kept as ControllerRevisions")
		for _, rev := range []string{oldRev, goodRev} {
			cr := &appsv1.ControllerRevision{}
			Expect(se.Platform.Client.Get(suiteCtx, client.ObjectKey{Namespace: se.PodNamespace, Name: rev}, cr)).To(Succeed())
			Expect(cr.Labels).To(HaveKeyWithValue(v1alpha1.LabelVersion, rolloutVersion))
		}
		By("a RolloutComplete event on the ProviderConfig")
		eventually(30*time.Second, func(g Gomega) {
			g.Expect(pcEvents(g, "RolloutComplete", changed)).NotTo(BeEmpty())
		})
		logEvents()
	})

	It("pauses after the first Kro when the change makes the upgrade fail, and leaves the others alone", func() {
		first := keyOf(cps[0])
		changed := time.Now()
		updatePC(setValues(rolloutBrokenValues))
		var paused rolloutSnapshot
		measure("rollout: broken change → paused", func() {
			paused = watch(rolloutHealthTimeout+time.Minute, func(s rolloutSnapshot) bool {
				if s.vs.Revision != goodRev && s.vs.Revision != "" {
					brokenRev = s.vs.Revision
				}
				untouched(s)
				Expect(s.values[0]).To(BeElementOf("good", "broken"), "%s", s)
				if s.vs.Revision == brokenRev {
					Expect(s.vs.Rollout).NotTo(Equal(v1alpha1.RolloutComplete), "%s", s)
					Expect(len(s.vs.Updating)).To(BeNumerically("<=", 1), "%s", s)
				}
				return brokenRev != "" && s.vs.Revision == brokenRev && s.vs.Rollout == v1alpha1.RolloutPaused
			})
		})
		pausedAfter := time.Since(changed)
		fmt.Fprintf(GinkgoWriter, "rollout: paused %s after the broken change:%s\n", pausedAfter.Round(100*time.Millisecond), paused)

		By("the failure is " + first + "'s failed release, named in the status")
		Expect(pausedAfter).To(BeNumerically("<", rolloutHealthTimeout), "the pause came from the health timeout, not from the failed release")
		Expect(paused.values[0]).To(Equal("broken"), "%s", paused)
		Expect(paused.vs.Failed).To(HaveLen(1), "%s", paused)
		Expect(paused.vs.Failed[0].Kro).To(Equal(first), "%s", paused)
		Expect(paused.vs.Failed[0].Reason).NotTo(HavePrefix("not healthy within"), "%s", paused)
		Expect(paused.vs.Updating).To(BeEmpty(), "%s", paused)
		Expect(paused.vs.Updated).To(BeEquivalentTo(0), "%s", paused)
		Expect(paused.vs.Message).To(And(HavePrefix("paused"), ContainSubstring(first), ContainSubstring(brokenRev)), "%s", paused)
		eventually(2*time.Minute, func(g Gomega) {
			kro := kroOf(cps[0])
			g.Expect(se.Onboarding.Client.Get(suiteCtx, client.ObjectKeyFromObject(kro), kro)).To(Succeed())
			hr := condition(kro, v1alpha1.ConditionHelmReleaseReady)
			g.Expect(hr.Status).To(Equal(metav1.ConditionFalse), describeKro(kro))
			g.Expect(hr.Reason).To(Equal(v1alpha1.ReasonReleaseFailed), describeKro(kro))
			g.Expect(hr.LastTransitionTime.Time).To(BeTemporally(">=", changed.Truncate(time.Second)), describeKro(kro))
			g.Expect(kro.Status.Phase).NotTo(Equal(v1alpha1.PhaseReady), describeKro(kro))
			// It never became Ready with the broken revision.
			g.Expect(kro.Status.Revision).To(Equal(goodRev), describeKro(kro))
			fmt.Fprintf(GinkgoWriter, "rollout: %s reports %s\n", first, hr.Message)
		})

		By("for " + rolloutQuiet.String() + " nothing else moves")
		quietUntil := time.Now().Add(rolloutQuiet)
		watch(rolloutQuiet+time.Minute, func(s rolloutSnapshot) bool {
			untouched(s)
			Expect(s.values[0]).To(Equal("broken"), "%s", s)
			Expect(s.vs.Revision).To(Equal(brokenRev), "%s", s)
			Expect(s.vs.Rollout).To(Equal(v1alpha1.RolloutPaused), "%s", s)
			Expect(s.vs.Updating).To(BeEmpty(), "%s", s)
			Expect(s.vs.Failed).To(HaveLen(1), "%s", s)
			for i := 1; i < len(cps); i++ {
				c := condition(s.kros[i], v1alpha1.ConditionVersionResolved)
				Expect(c.Status).To(Equal(metav1.ConditionTrue), "%s", s)
				Expect(c.Reason).To(Equal(v1alpha1.ReasonRolloutPending), "%s", s)
				Expect(c.Message).To(And(ContainSubstring(goodRev), ContainSubstring(brokenRev)), "%s", s)
			}
			return time.Now().After(quietUntil)
		})

		By("a RolloutPaused Warning event on the ProviderConfig names " + first)
		eventually(30*time.Second, func(g Gomega) {
			evs := pcEvents(g, "RolloutPaused", changed)
			g.Expect(evs).To(HaveLen(1))
			g.Expect(evs[0].Type).To(Equal(corev1.EventTypeWarning))
			g.Expect(evs[0].Note).To(ContainSubstring(first))
		})
	})

	kit := rolloutKit{
		env: func() *env.Env { return se }, cps: func() []*env.ControlPlane { return cps },
		goodRev: func() string { return goodRev }, brokenRev: func() string { return brokenRev },
		snapshot: snapshot, watch: watch, runs: runs, untouched: untouched, updatePC: updatePC, setValues: setValues,
	}
	pausedRolloutSpecs(kit)

	It("returns every Kro to the earlier revision when the change is reverted", func() {
		reverted := time.Now()
		updatePC(setValues(rolloutGoodValues))
		var last rolloutSnapshot
		measure("rollout: reverted → restored", func() {
			last = watch(5*time.Minute, func(s rolloutSnapshot) bool {
				untouched(s)
				Expect(s.values[0]).To(BeElementOf("good", "broken"), "%s", s)
				return s.vs.Revision == goodRev && s.vs.Rollout == v1alpha1.RolloutComplete && s.vs.Updated == 3 &&
					s.values[0] == "good" && runs(s.kros[0], goodRev)
			})
		})
		Expect(last.vs.Failed).To(BeEmpty(), "%s", last)
		Expect(last.vs.Updating).To(BeEmpty(), "%s", last)
		Expect(last.vs.Message).NotTo(ContainSubstring("paused"), "%s", last)
		for i := range cps {
			Expect(condition(last.kros[i], v1alpha1.ConditionVersionResolved).Reason).NotTo(Equal(v1alpha1.ReasonRolloutPending), "%s", last)
			Expect(condition(last.kros[i], v1alpha1.ConditionHelmReleaseReady).Status).To(Equal(metav1.ConditionTrue), "%s", last)
		}
		By("a RolloutResumed event on the ProviderConfig")
		eventually(30*time.Second, func(g Gomega) {
			evs := pcEvents(g, "RolloutResumed", reverted)
			g.Expect(evs).To(HaveLen(1))
			g.Expect(evs[0].Type).To(Equal(corev1.EventTypeNormal))
		})
		logEvents()
	})

	rolloutFaultSpecs(kit)

	It("deletes the Kros, leaving nothing behind", func() {
		for _, cp := range cps {
			Expect(se.Onboarding.Client.Delete(suiteCtx, kroOf(cp))).To(Succeed())
		}
		// helm-controller uninstalls a release only after the reconcile it is in: an upgrade
		// that began while the stopped tenant came back may still wait out Helm's timeout (5m).
		measure("rollout: Kros deleted", func() {
			eventually(10*time.Minute, func(g Gomega) {
				for _, cp := range cps {
					kro := &v1alpha1.Kro{}
					err := se.Onboarding.Client.Get(suiteCtx, client.ObjectKeyFromObject(kroOf(cp)), kro)
					g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "still there: %s", describeKro(kro))
				}
			})
		})
		left, err := se.CheckLeftovers(suiteCtx, true, cps...)
		Expect(err).NotTo(HaveOccurred())
		Expect(left.Orphaned).To(BeEmpty(), "orphaned: %s", left.Names())
		Eventually(func(g Gomega) {
			vs := versionStatus(getPC())
			g.Expect(vs.Kros).To(BeEquivalentTo(0))
			g.Expect(vs.Rollout).To(Equal(v1alpha1.RolloutComplete))
		}).WithContext(suiteCtx).WithTimeout(30 * time.Second).Should(Succeed())
	})
})

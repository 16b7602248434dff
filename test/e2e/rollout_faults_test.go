//go:build e2e

package e2e

import (
	"fmt"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/test/e2e/env"
)

// The rollout in the situations it exists for (issue 21), in the rollout environment of
// rollout_test.go: the ProviderConfig's status lost while a rollout is paused, a canary
// that fails under failureThreshold 2, and a tenant whose ControlPlane is stopped.

// rolloutGood2Values are harmless values other than rolloutGoodValues.
const rolloutGood2Values = `{"deployment":{"podAnnotations":{"e2e.kro.run/rollout":"good2"}}}`

// rolloutKit is what the rollout specs share: the environment and the looks at it.
type rolloutKit struct {
	env                func() *env.Env
	cps                func() []*env.ControlPlane
	goodRev, brokenRev func() string
	snapshot           func() rolloutSnapshot
	watch              func(d time.Duration, check func(s rolloutSnapshot) bool) rolloutSnapshot
	runs               func(k *v1alpha1.Kro, revision string) bool
	untouched          func(s rolloutSnapshot)
	updatePC           func(mutate func(pc *v1alpha1.ProviderConfig))
	setValues          func(raw string) func(pc *v1alpha1.ProviderConfig)
}

// pausedRolloutSpecs run while the broken change's rollout is paused.
func pausedRolloutSpecs(k rolloutKit) {
	It("stays paused, with the held-back Kros on the good values, when the ProviderConfig's status is wiped", func() {
		se := k.env()
		Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
			pc := &v1alpha1.ProviderConfig{}
			if err := se.Platform.Client.Get(suiteCtx, client.ObjectKey{Name: se.ProviderName}, pc); err != nil {
				return err
			}
			pc.Status = v1alpha1.ProviderConfigStatus{}
			return se.Platform.Client.Status().Update(suiteCtx, pc)
		})).To(Succeed())
		wiped := time.Now()
		var rebuilt time.Duration
		quietUntil := wiped.Add(rolloutQuiet)
		k.watch(rolloutQuiet+time.Minute, func(s rolloutSnapshot) bool {
			k.untouched(s)
			Expect(s.values[0]).To(Equal("broken"), "%s", s)
			if s.vs.Revision == "" {
				return false // not yet written again
			}
			if rebuilt == 0 {
				rebuilt = time.Since(wiped)
			}
			Expect(s.vs.Revision).To(Equal(k.brokenRev()), "%s", s)
			Expect(s.vs.Rollout).To(Equal(v1alpha1.RolloutPaused), "%s", s)
			Expect(kroKeys(s.vs.Failed)).To(Equal([]string{keyOfCP(k.cps()[0])}), "%s", s)
			Expect(s.vs.Updating).To(BeEmpty(), "%s", s)
			return time.Now().After(quietUntil)
		})
		fmt.Fprintf(GinkgoWriter, "rollout: the wiped status was rebuilt, paused, after %s\n", rebuilt.Round(10*time.Millisecond))
		recordTiming("rollout: wiped status rebuilt", rebuilt)
	})
}

// rolloutFaultSpecs run once every Kro is back on the good revision.
func rolloutFaultSpecs(k rolloutKit) {
	It("holds every other Kro back while a canary failed, under failureThreshold 2", func() {
		se, cps := k.env(), k.cps()
		canary := cps[2]
		// Canaries are chosen by their Namespace's labels, which the platform team sets.
		labelNamespace(se, canary, `{"ring":"canary"}`)
		DeferCleanup(func() { labelNamespace(se, canary, `{"ring":null}`) })
		k.updatePC(func(pc *v1alpha1.ProviderConfig) {
			pc.Spec.Rollout = &v1alpha1.RolloutPolicy{
				MaxUnavailable: ptr.To(intstr.FromInt32(2)), FailureThreshold: ptr.To(int32(2)),
				HealthTimeout: &metav1.Duration{Duration: rolloutHealthTimeout},
				Canary:        &metav1.LabelSelector{MatchLabels: map[string]string{"ring": "canary"}},
			}
			k.setValues(rolloutBrokenValues)(pc)
		})
		good := k.snapshot()
		others := func(s rolloutSnapshot) {
			GinkgoHelper()
			for i := range 2 {
				Expect(s.values[i]).To(Equal("good"), "%s got other values:%s", cps[i].Name, s)
				Expect(s.hrGen[i]).To(Equal(good.hrGen[i]), "HelmRelease of %s changed:%s", cps[i].Name, s)
			}
		}
		measure("rollout: failed canary", func() {
			k.watch(rolloutHealthTimeout, func(s rolloutSnapshot) bool {
				others(s)
				return s.values[2] == "broken" && len(s.vs.Failed) == 1
			})
		})
		quietUntil := time.Now().Add(rolloutQuiet)
		last := k.watch(rolloutQuiet+time.Minute, func(s rolloutSnapshot) bool {
			others(s)
			Expect(kroKeys(s.vs.Failed)).To(Equal([]string{keyOfCP(canary)}), "%s", s)
			Expect(s.vs.Rollout).To(Equal(v1alpha1.RolloutProgressing), "one failure of two allowed does not pause:%s", s)
			Expect(s.vs.Updating).To(BeEmpty(), "%s", s)
			return time.Now().After(quietUntil)
		})
		Expect(last.vs.Message).To(ContainSubstring("canaries failed"), "%s", last)

		By("reverting takes the canary back")
		k.updatePC(k.setValues(rolloutGoodValues))
		k.watch(5*time.Minute, func(s rolloutSnapshot) bool {
			others(s)
			return s.vs.Revision == k.goodRev() && s.vs.Rollout == v1alpha1.RolloutComplete && s.values[2] == "good" && k.runs(s.kros[2], k.goodRev())
		})
	})

	It("updates the others while a tenant's ControlPlane is stopped, and that tenant once it is back", func() {
		se, cps := k.env(), k.cps()
		sleeper := cps[0]
		Expect(se.StopControlPlaneAPIServer(sleeper)).To(Succeed())
		restarted := false
		DeferCleanup(func() {
			if !restarted {
				Expect(se.StartControlPlaneAPIServer(suiteCtx, sleeper)).To(Succeed())
			}
		})
		k.watch(2*time.Minute, func(s rolloutSnapshot) bool { return s.kros[0].Status.Phase != v1alpha1.PhaseReady })
		k.updatePC(func(pc *v1alpha1.ProviderConfig) {
			pc.Spec.Rollout = &v1alpha1.RolloutPolicy{MaxUnavailable: ptr.To(intstr.FromInt32(2)), HealthTimeout: &metav1.Duration{Duration: rolloutHealthTimeout}}
			k.setValues(rolloutGood2Values)(pc)
		})
		var newRev string
		measure("rollout: two Kros updated beside a stopped ControlPlane", func() {
			k.watch(6*time.Minute, func(s rolloutSnapshot) bool {
				Expect(s.values[0]).To(Equal("good"), "the stopped tenant's release changed:%s", s)
				Expect(s.vs.Failed).To(BeEmpty(), "%s", s)
				if s.vs.Revision != k.goodRev() {
					newRev = s.vs.Revision
				}
				inFlight := 0
				for i := 1; i < 3; i++ {
					if s.values[i] == "good2" && !k.runs(s.kros[i], newRev) {
						inFlight++
					}
				}
				Expect(inFlight).To(BeNumerically("<=", 1), "the stopped tenant takes one of maxUnavailable 2:%s", s)
				return newRev != "" && k.runs(s.kros[1], newRev) && k.runs(s.kros[2], newRev)
			})
		})
		By("the stopped tenant waits, admitted as unavailable, and fails nothing")
		k.watch(time.Minute, func(s rolloutSnapshot) bool {
			Expect(s.values[0]).To(Equal("good"), "%s", s)
			Expect(s.vs.Failed).To(BeEmpty(), "%s", s)
			return len(s.vs.Updating) == 1 && s.vs.Updating[0].Unavailable
		})

		By("back, it gets the new values, and the rollout completes without a failure")
		Expect(se.StartControlPlaneAPIServer(suiteCtx, sleeper)).To(Succeed())
		restarted = true
		var last rolloutSnapshot
		measure("rollout: the stopped tenant given the new values once back", func() {
			last = k.watch(5*time.Minute, func(s rolloutSnapshot) bool {
				Expect(s.vs.Failed).To(BeEmpty(), "%s", s)
				return s.vs.Rollout == v1alpha1.RolloutComplete && s.values[0] == "good2"
			})
		})
		// Whether it is Ready soon is helm-controller's matter: an upgrade that began while
		// the API server came back may wait out Helm's timeout (5m) before it is retried.
		fmt.Fprintf(GinkgoWriter, "rollout: once back, the stopped tenant is Ready with the new revision: %t:%s\n", k.runs(last.kros[0], newRev), last)
	})
}

// startRolloutEnv brings up an environment of its own for rollout specs (process backend
// only, like the other labelled environments), stopped when the container ends, and
// records its bring-up time under what.
func startRolloutEnv(dir, what string, refs []env.ControlPlaneRef, with ...func(*env.Options)) *env.Env {
	GinkgoHelper()
	backend, err := env.BackendFromEnvironment()
	Expect(err).NotTo(HaveOccurred())
	if backend != env.BackendProcess {
		Skip("the rollout specs run with the process backend only, like the other labelled environments")
	}
	start := time.Now()
	opts := env.Options{Dir: filepath.Join(logDir, dir), Log: GinkgoWriter, Backend: backend, ControlPlanes: refs}
	for _, f := range with {
		f(&opts)
	}
	se, err := env.Start(suiteCtx, opts)
	DeferCleanup(func() {
		if err := se.Stop(); err != nil {
			fmt.Fprintf(GinkgoWriter, "stopping the %s environment: %v\n", what, err)
		}
	})
	Expect(err).NotTo(HaveOccurred())
	recordTiming(what+": bring-up", time.Since(start))
	return se
}

// runsRevision: the Kro is Ready, for its current spec, with that revision.
func runsRevision(k *v1alpha1.Kro, revision string) bool {
	return revision != "" && k.Status.Revision == revision && k.Status.Phase == v1alpha1.PhaseReady &&
		k.Status.ObservedGeneration == k.Generation && condition(k, v1alpha1.ConditionReady).Status == metav1.ConditionTrue
}

// updateProviderConfig changes the environment's ProviderConfig, retrying on conflicts.
func updateProviderConfig(se *env.Env, mutate func(pc *v1alpha1.ProviderConfig)) {
	GinkgoHelper()
	Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pc := &v1alpha1.ProviderConfig{}
		if err := se.Platform.Client.Get(suiteCtx, client.ObjectKey{Name: se.ProviderName}, pc); err != nil {
			return err
		}
		mutate(pc)
		return se.Platform.Client.Update(suiteCtx, pc)
	})).To(Succeed())
}

func keyOfCP(cp *env.ControlPlane) string { return cp.Namespace + "/" + cp.Name }

func kroKeys(ms []v1alpha1.RolloutMember) []string {
	out := []string{}
	for _, m := range ms {
		out = append(out, m.Kro)
	}
	return out
}

// labelNamespace merges labels (JSON, null removes) into the onboarding cluster's
// Namespace of a ControlPlane's Kro, as the platform team would.
func labelNamespace(se *env.Env, cp *env.ControlPlane, labels string) {
	GinkgoHelper()
	Expect(se.Onboarding.Client.Patch(suiteCtx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: cp.Namespace}},
		client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":`+labels+`}}`)))).To(Succeed())
}

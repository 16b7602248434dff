//go:build e2e

package e2e

import (
	"bytes"
	"fmt"
	"strings"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/jsonpath"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/test/e2e/env"
	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

// A rollout plan (issue 21, spec.rollout.plan): two ControlPlanes on the same version,
// real Flux and kro's real chart. A change of the version's helmValues under plan: true
// moves nothing; the ProviderConfig shows the plan (the canary first, its RGD, the path
// that changes); approving it rolls the change out in that order.

const (
	planVersion = "v0.9.3"
	// planValues adds a pod annotation to kro's Deployment: a real, harmless upgrade.
	planValues = `{"deployment":{"podAnnotations":{"e2e.kro.run/plan":"approved"}}}`
	// planQuiet is how long the planned rollout is watched for anything that moves.
	planQuiet = 20 * time.Second
)

var _ = Describe("a rollout plan", Ordered, Label("rollout"), func() {
	var (
		se *env.Env
		// canary and other: the canary sorts after the other by name, so that the plan's
		// order is not the order of the names.
		canary, other *env.ControlPlane
	)
	refs := []env.ControlPlaneRef{{Name: "plan-a", Namespace: "plan-a"}, {Name: "plan-b", Namespace: "plan-b"}}
	keyOf := func(cp *env.ControlPlane) string { return cp.Namespace + "/" + cp.Name }
	getPC := func(g Gomega) *v1alpha1.ProviderConfig {
		pc := &v1alpha1.ProviderConfig{}
		g.Expect(se.Platform.Client.Get(suiteCtx, client.ObjectKey{Name: se.ProviderName}, pc)).To(Succeed())
		return pc
	}
	versionOf := func(pc *v1alpha1.ProviderConfig) v1alpha1.VersionStatus {
		for _, vs := range pc.Status.Versions {
			if vs.Version == planVersion {
				return vs
			}
		}
		return v1alpha1.VersionStatus{Version: planVersion}
	}
	getKroOf := func(g Gomega, cp *env.ControlPlane) *v1alpha1.Kro {
		kro := kroOf(cp)
		g.Expect(se.Onboarding.Client.Get(suiteCtx, client.ObjectKeyFromObject(kro), kro)).To(Succeed())
		return kro
	}
	release := func(g Gomega, cp *env.ControlPlane) *helmv2.HelmRelease {
		hr := &helmv2.HelmRelease{}
		g.Expect(se.Platform.Client.Get(suiteCtx, client.ObjectKey{Namespace: cp.TenantNamespace, Name: se.ProviderName}, hr)).To(Succeed())
		return hr
	}
	hasValues := func(hr *helmv2.HelmRelease) bool { return hr.Spec.Values != nil && len(hr.Spec.Values.Raw) > 0 }
	runs := runsRevision
	updatePC := func(mutate func(pc *v1alpha1.ProviderConfig)) { GinkgoHelper(); updateProviderConfig(se, mutate) }
	pcEvents := func(g Gomega, reason string) []eventsv1.Event {
		var list eventsv1.EventList
		g.Expect(se.Platform.Client.List(suiteCtx, &list, client.InNamespace(metav1.NamespaceDefault))).To(Succeed())
		var out []eventsv1.Event
		for _, ev := range list.Items {
			if ev.Regarding.Kind == "ProviderConfig" && ev.Regarding.Name == se.ProviderName && ev.Reason == reason {
				out = append(out, ev)
			}
		}
		return out
	}
	// wideColumn evaluates the ProviderConfig CRD's printcolumn as kubectl get -o wide does.
	wideColumn := func(g Gomega, name string) (string, int32) {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		g.Expect(se.Platform.Client.Get(suiteCtx, client.ObjectKey{Name: "providerconfigs.kro.services.open-control-plane.io"}, crd)).To(Succeed())
		for _, col := range crd.Spec.Versions[0].AdditionalPrinterColumns {
			if col.Name != name {
				continue
			}
			jp := jsonpath.New(name)
			g.Expect(jp.Parse("{" + col.JSONPath + "}")).To(Succeed())
			obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(getPC(g))
			g.Expect(err).NotTo(HaveOccurred())
			var out bytes.Buffer
			g.Expect(jp.Execute(&out, obj)).To(Succeed())
			return out.String(), col.Priority
		}
		g.Expect(name).To(BeEmpty(), "no printcolumn %s", name)
		return "", 0
	}

	BeforeAll(func() {
		se = startRolloutEnv("rollout-plan", "rollout plan", refs)
		other, canary = se.ControlPlane("plan-a"), se.ControlPlane("plan-b")
		Expect(other).NotTo(BeNil())
		Expect(canary).NotTo(BeNil())
		for _, cp := range []*env.ControlPlane{other, canary} {
			ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: cp.Namespace}}
			if cp == canary {
				// Canaries are chosen by their Namespace's labels, which the platform team sets.
				ns.Labels = map[string]string{"ring": "canary"}
			}
			Expect(se.Onboarding.Client.Create(suiteCtx, ns)).To(Succeed())
		}
	})

	It("a plan shown, then approved", func() {
		for _, cp := range []*env.ControlPlane{other, canary} {
			kro := kroOf(cp)
			kro.Spec.Version = planVersion
			Expect(se.Onboarding.Client.Create(suiteCtx, kro)).To(Succeed())
		}
		By("two Kros Ready, the canary with a ResourceGraphDefinition")
		measure("rollout plan: two Kros Ready, one RGD", func() {
			eventually(5*time.Minute, func(g Gomega) {
				for _, cp := range []*env.ControlPlane{other, canary} {
					kro := getKroOf(g, cp)
					g.Expect(kro.Status.Phase).To(Equal(v1alpha1.PhaseReady), describeKro(kro))
				}
			})
			Expect(se.StartKroController(suiteCtx, canary)).To(Succeed())
			Expect(canary.Client.Create(suiteCtx, testenv.ConfigMapRGD("e2e-plan", "E2EPlan"))).To(Succeed())
			eventually(3*time.Minute, func(g Gomega) {
				kro := getKroOf(g, canary)
				g.Expect(kro.Status.ResourceGraphDefinitions).NotTo(BeNil(), describeKro(kro))
				g.Expect(kro.Status.ResourceGraphDefinitions.Total).To(BeEquivalentTo(1), describeKro(kro))
			})
		})
		var oldRev string
		eventually(time.Minute, func(g Gomega) {
			vs := versionOf(getPC(g))
			oldRev = vs.Revision
			g.Expect(vs.Rollout).To(Equal(v1alpha1.RolloutComplete))
			for _, cp := range []*env.ControlPlane{other, canary} {
				g.Expect(runs(getKroOf(g, cp), oldRev)).To(BeTrue(), describeKro(getKroOf(g, cp)))
			}
		})
		gens := map[string]int64{keyOf(other): release(Default, other).Generation, keyOf(canary): release(Default, canary).Generation}

		By("spec.rollout {plan: true, canary ring=canary} and new helmValues")
		planned := time.Now()
		updatePC(func(pc *v1alpha1.ProviderConfig) {
			pc.Spec.Rollout = &v1alpha1.RolloutPolicy{Plan: true, MaxUnavailable: ptr.To(intstr.FromInt32(1)),
				HealthTimeout: &metav1.Duration{Duration: 3 * time.Minute},
				Canary:        &metav1.LabelSelector{MatchLabels: map[string]string{"ring": "canary"}}}
			for i := range pc.Spec.Versions {
				if pc.Spec.Versions[i].Version == planVersion {
					pc.Spec.Versions[i].HelmValues = &apiextensionsv1.JSON{Raw: []byte(planValues)}
				}
			}
		})
		var plan v1alpha1.PlannedRollout
		var newRev string
		measure("rollout plan: change → plan shown", func() {
			eventually(time.Minute, func(g Gomega) {
				vs := versionOf(getPC(g))
				g.Expect(vs.Revision).NotTo(Equal(oldRev))
				g.Expect(vs.Rollout).To(Equal(v1alpha1.RolloutPlanned), "%+v", vs)
				g.Expect(vs.Plan).NotTo(BeNil())
				plan, newRev = *vs.Plan, vs.Revision
			})
		})
		fmt.Fprintf(GinkgoWriter, "rollout plan: %+v\n", plan)
		Expect(plan.Revision).To(Equal(newRev))
		Expect(plan.From).To(Equal(oldRev))
		Expect(plan.Kros).To(HaveLen(2))
		Expect(plan.Kros[0].Kro).To(Equal(keyOf(canary)), "the canary first, although it sorts last")
		Expect(plan.Kros[0].Canary).To(BeTrue())
		Expect(plan.Kros[0].RGDs).To(HaveValue(BeEquivalentTo(1)))
		Expect(plan.Kros[1].Kro).To(Equal(keyOf(other)))
		Expect(plan.RGDs).To(BeEquivalentTo(1))
		Expect(plan.Changes).To(Equal(`values: +deployment.podAnnotations["e2e.kro.run/plan"]`))
		Expect(plan.Changes).NotTo(ContainSubstring("approved"), "paths only, never values")
		Expect(plan.Summary).To(Equal(planVersion + `: 2 Kros (1 canary), 1 RGDs; values: +deployment.podAnnotations["e2e.kro.run/plan"]`))

		By("kubectl get -o wide shows the plan's summary")
		eventually(10*time.Second, func(g Gomega) {
			col, priority := wideColumn(g, "Plan")
			g.Expect(priority).To(BeEquivalentTo(1))
			g.Expect(col).To(Equal(plan.Summary))
			col, _ = wideColumn(g, "Rollout")
			g.Expect(strings.Fields(col)).To(ContainElement(string(v1alpha1.RolloutPlanned)))
		})
		By("a RolloutPlanned event on the ProviderConfig")
		eventually(30*time.Second, func(g Gomega) {
			evs := pcEvents(g, "RolloutPlanned")
			g.Expect(evs).To(HaveLen(1))
			g.Expect(evs[0].Note).To(ContainSubstring(plan.Summary))
		})

		By("for " + planQuiet.String() + " nothing moves")
		Consistently(func(g Gomega) {
			for _, cp := range []*env.ControlPlane{other, canary} {
				hr := release(g, cp)
				g.Expect(hasValues(hr)).To(BeFalse(), "HelmRelease of %s changed", cp.Name)
				g.Expect(hr.Generation).To(Equal(gens[keyOf(cp)]), "HelmRelease of %s changed", cp.Name)
				kro := getKroOf(g, cp)
				g.Expect(runs(kro, oldRev)).To(BeTrue(), describeKro(kro))
			}
			vs := versionOf(getPC(g))
			g.Expect(vs.Rollout).To(Equal(v1alpha1.RolloutPlanned))
			g.Expect(vs.Updating).To(BeEmpty())
		}).WithContext(suiteCtx).WithTimeout(planQuiet).WithPolling(500 * time.Millisecond).Should(Succeed())
		for _, cp := range []*env.ControlPlane{other, canary} {
			kro := getKroOf(Default, cp)
			Expect(condition(kro, v1alpha1.ConditionVersionResolved).Reason).To(Equal(v1alpha1.ReasonRolloutPending), describeKro(kro))
		}

		By("approved: the canary first, the other once the canary is Ready with the new revision")
		updatePC(func(pc *v1alpha1.ProviderConfig) { pc.Spec.Rollout.Plan = false })
		var canaryChanged, canaryReady, otherChanged time.Duration
		approved := time.Now()
		measure("rollout plan: approved → both Kros updated", func() {
			deadline := time.Now().Add(6 * time.Minute)
			for {
				// The canary is read before the other's HelmRelease: what that shows came after.
				if hasValues(release(Default, canary)) && canaryChanged == 0 {
					canaryChanged = time.Since(approved)
				}
				if canaryReady == 0 && runs(getKroOf(Default, canary), newRev) {
					canaryReady = time.Since(approved)
				}
				if hasValues(release(Default, other)) && otherChanged == 0 {
					otherChanged = time.Since(approved)
					Expect(canaryReady).NotTo(BeZero(), "%s got the new values before the canary was Ready with them", other.Name)
				}
				vs := versionOf(getPC(Default))
				Expect(len(vs.Updating)).To(BeNumerically("<=", 1), "%+v", vs)
				Expect(vs.Failed).To(BeEmpty(), "%+v", vs)
				if vs.Revision == newRev && vs.Rollout == v1alpha1.RolloutComplete && vs.Updated == 2 && runs(getKroOf(Default, other), newRev) {
					Expect(vs.Plan).To(BeNil(), "no Kro waits: the plan is done")
					break
				}
				if time.Now().After(deadline) {
					Fail(fmt.Sprintf("not complete within 6m: %+v", vs))
				}
				time.Sleep(200 * time.Millisecond)
			}
		})
		fmt.Fprintf(GinkgoWriter, "rollout plan: canary changed after %s, Ready after %s; other changed after %s (%s after the plan)\n",
			canaryChanged.Round(100*time.Millisecond), canaryReady.Round(100*time.Millisecond), otherChanged.Round(100*time.Millisecond),
			time.Since(planned).Round(time.Second))
		Expect(canaryChanged).NotTo(BeZero())
		Expect(otherChanged).To(BeNumerically(">", canaryChanged))
		eventually(30*time.Second, func(g Gomega) { g.Expect(pcEvents(g, "RolloutApproved")).To(HaveLen(1)) })
	})
})

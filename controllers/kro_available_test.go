package controllers

import (
	"context"
	"testing"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	. "github.com/onsi/gomega"
	"github.com/openmcp-project/openmcp-operator/api/constants"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/rollout/rollouttest"
	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

// kro's own health in the Kro's status (issue 40): KroAvailable reads kro's Deployment
// from the ControlPlane's watched cache. The suite's poll interval is ten minutes, so
// every change below reaches the Kro through the watch alone.

// scaleKro sets the replicas of kro's Deployment on a ControlPlane, and its status as
// the Deployment controller would once done.
func scaleKro(g Gomega, c client.Client, replicas int32) {
	g.Eventually(func(g Gomega) {
		d := testenv.AvailableKroDeployment()
		g.Expect(c.Get(context.Background(), client.ObjectKeyFromObject(d), d)).To(Succeed())
		d.Spec.Replicas = ptr.To(replicas)
		g.Expect(c.Update(context.Background(), d)).To(Succeed())
		d.Status.ObservedGeneration, d.Status.Replicas, d.Status.UpdatedReplicas = d.Generation, replicas, replicas
		d.Status.ReadyReplicas, d.Status.AvailableReplicas = replicas, replicas
		g.Expect(c.Status().Update(context.Background(), d)).To(Succeed())
	}, timeout, interval).Should(Succeed())
}

// TestKroAvailableFollowsKrosDeployment: a Ready Kro reports kro's Deployment available;
// scaled down or deleted, the Kro says so at once (KroAvailable and Ready False, reason
// KroUnavailable, with what to expect), and Ready again when it is back. A Deployment the
// tenant made with kro's labels, but not through kro's Helm release, does not stand in
// for kro's. The HelmRelease asks helm-controller to repair such drift.
func TestKroAvailableFollowsKrosDeployment(t *testing.T) {
	g := withClusters(t)
	ctx := context.Background()
	cp := startControlPlane(t, g, "kro-available", true)
	k := readyKroOn(t, g, cp, newNamespace(t, g), "cp-1", baseVersion)
	eventuallyCondition(g, k, v1alpha1.ConditionKroAvailable, metav1.ConditionTrue, v1alpha1.ReasonReconcileSuccess,
		"Deployment kro-system/kro has 2 of 2 replicas available")
	g.Expect(getHelmRelease(g, k).Spec.DriftDetection).To(Equal(&helmv2.DriftDetection{Mode: helmv2.DriftDetectionEnabled}),
		"helm-controller puts back what is deleted or changed of kro's release")

	scaleKro(g, cp.Client, 0)
	got := eventuallyCondition(g, k, v1alpha1.ConditionKroAvailable, metav1.ConditionFalse, v1alpha1.ReasonKroUnavailable,
		"Deployment kro-system/kro is scaled to 0 replicas", "drift detection")
	g.Expect(condition(got, v1alpha1.ConditionReady).Reason).To(Equal(v1alpha1.ReasonKroUnavailable))
	g.Expect(condition(got, v1alpha1.ConditionReady).Message).To(ContainSubstring("scaled to 0 replicas"))
	g.Expect(got.Status.Phase).To(Equal(v1alpha1.PhaseProgressing))
	eventuallyEvent(g, k, "Warning/KroUnavailable", "scaled to 0 replicas")

	scaleKro(g, cp.Client, 1)
	eventuallyCondition(g, k, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReconcileSuccess)

	g.Expect(cp.Client.Delete(ctx, testenv.AvailableKroDeployment())).To(Succeed())
	got = eventuallyCondition(g, k, v1alpha1.ConditionKroAvailable, metav1.ConditionFalse, v1alpha1.ReasonKroUnavailable,
		"kro's Deployment is missing: no Deployment of Helm release kro in namespace kro-system")
	g.Expect(condition(got, v1alpha1.ConditionReady).Status).To(Equal(metav1.ConditionFalse))

	// The tenant's own Deployment, available, with kro's labels and Helm's managed-by
	// label, but not made by kro's release: kro is still missing.
	tenants := testenv.AvailableKroDeployment()
	tenants.Name, tenants.Annotations = "tenant-kro", nil
	g.Expect(testenv.PlayDeployment(ctx, cp.Client, tenants)).To(Succeed())
	g.Consistently(func(g Gomega) {
		g.Expect(condition(getKro(g, k), v1alpha1.ConditionKroAvailable).Reason).To(Equal(v1alpha1.ReasonKroUnavailable))
	}).WithTimeout(2 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())

	g.Expect(testenv.PlayKroDeployment(ctx, cp.Client)).To(Succeed())
	eventuallyCondition(g, k, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReconcileSuccess)
	eventuallyCondition(g, k, v1alpha1.ConditionKroAvailable, metav1.ConditionTrue, v1alpha1.ReasonReconcileSuccess)
}

// TestATenantsDeploymentDoesNotHoldTheGate (issue 40): a tenant makes, in kro-system of
// its ControlPlane, a Deployment with kro's instance label that is never available. The
// rollout's gate reads only the Deployment that kro's Helm release made, so the admitted
// Kro is updated once its upgrade is done, and the next one is admitted.
func TestATenantsDeploymentDoesNotHoldTheGate(t *testing.T) {
	g := withClusters(t)
	ctx := context.Background()
	stuck := testenv.AvailableKroDeployment()
	stuck.Name, stuck.Annotations = uniq("tenant-kro"), nil
	stuck.Status = appsv1.DeploymentStatus{} // never observed, never available
	g.Expect(controlPlane.Client.Create(ctx, stuck)).To(Succeed())
	t.Cleanup(func() { _ = controlPlane.Client.Delete(context.Background(), stuck) })

	kros, v, _, after := changeUnderRollout(t, g)
	first, second := client.ObjectKeyFromObject(kros[0]).String(), client.ObjectKeyFromObject(kros[1]).String()
	g.Eventually(func(g Gomega) {
		g.Expect(rollouttest.MemberNames(versionStatus(g, v.Version).Updating)).To(Equal([]string{first}))
		g.Expect(valuesOf(g, kros[0])).To(ContainSubstring("debug"))
	}, timeout, interval).Should(Succeed())
	fluxReady(g, getHelmRelease(g, kros[0]), metav1.ConditionTrue, "Helm upgrade succeeded")
	g.Eventually(func(g Gomega) {
		k := getKro(g, kros[0])
		g.Expect(k.Status.Revision).To(Equal(after))
		vs := versionStatus(g, v.Version)
		g.Expect(vs.Updated).To(BeEquivalentTo(1), "status %+v, Kro's health %+v", vs, k.Status.RolloutHealth)
		g.Expect(rollouttest.MemberNames(vs.Updating)).To(Equal([]string{second}))
	}, timeout, interval).Should(Succeed())
}

// TestAnIgnoredKroDoesNotFailTheRollout (issue 40): the tenant of an admitted Kro sets
// openmcp.cloud/operation=ignore, so the Kro is never reconciled with the revision. Past
// the health timeout the rollout counts it as unavailable, not as failed: the version is
// not paused for every other tenant.
func TestAnIgnoredKroDoesNotFailTheRollout(t *testing.T) {
	g := withClusters(t)
	ctx := context.Background()
	healthTimeout := 30 * time.Second // the least the API allows
	kros, v, _, _ := changeUnderPolicy(t, g, &v1alpha1.RolloutPolicy{MaxUnavailable: ptr.To(intstr.FromInt32(1)), HealthTimeout: &metav1.Duration{Duration: healthTimeout}}, nil)
	first := client.ObjectKeyFromObject(kros[0]).String()
	g.Eventually(func(g Gomega) {
		g.Expect(rollouttest.MemberNames(versionStatus(g, v.Version).Updating)).To(Equal([]string{first}))
	}, timeout, interval).Should(Succeed())

	k := getKro(g, kros[0])
	orig := k.DeepCopy()
	if k.Annotations == nil {
		k.Annotations = map[string]string{}
	}
	k.Annotations[constants.OperationAnnotation] = constants.OperationAnnotationValueIgnore
	g.Expect(onboarding.Client.Patch(ctx, k, client.MergeFrom(orig))).To(Succeed())
	t.Cleanup(func() {
		k := getKro(NewWithT(t), kros[0])
		orig := k.DeepCopy()
		delete(k.Annotations, constants.OperationAnnotation)
		_ = onboarding.Client.Patch(context.Background(), k, client.MergeFrom(orig))
	})

	// Past the health timeout, when the rollout looks again at the latest.
	time.Sleep(healthTimeout)
	// Its HelmRelease carries the revision already (the admission applied it), or not
	// yet: either way it counts as unavailable.
	unavailable := Or(
		HaveField("Updating", ContainElement(And(HaveField("Kro", first), HaveField("Unavailable", true)))),
		HaveField("Message", ContainSubstring("got the revision while unavailable, which counts as no failure: "+first)))
	g.Eventually(func(g Gomega) {
		vs := versionStatus(g, v.Version)
		g.Expect(vs).To(unavailable)
	}, timeout, interval).Should(Succeed())
	g.Consistently(func(g Gomega) {
		vs := versionStatus(g, v.Version)
		g.Expect(vs.Failed).To(BeEmpty(), "status %+v", vs)
		g.Expect(vs.Rollout).NotTo(Equal(v1alpha1.RolloutPaused))
		g.Expect(vs).To(unavailable)
	}).WithTimeout(5 * time.Second).WithPolling(500 * time.Millisecond).Should(Succeed())
}

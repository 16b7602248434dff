//go:build e2e

package e2e

import (
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/owned"
	"github.com/openmcp-project/service-provider-kro/test/e2e/env"
)

// kro's drift on a ControlPlane (issue 40): a tenant deletes or scales down kro's
// Deployment in kro-system. The Kro says so within seconds (KroAvailable, from the
// provider's watch), and helm-controller's drift detection puts kro back at the
// HelmRelease's next reconcile (the ProviderConfig's pollInterval, 10 s here). The
// spec has a ControlPlane of its own, so that it runs alone as well as in the suite.
var _ = Describe("kro's drift on a ControlPlane", Ordered, func() {
	var cp *env.ControlPlane

	BeforeAll(func() {
		useSharedEnv()
		added, err := e.AddControlPlanes(suiteCtx, env.ControlPlaneRef{Name: "drift", Namespace: "drift"})
		Expect(err).NotTo(HaveOccurred())
		cp = added[0]
		DeferCleanup(func() {
			kro := kroOf(cp)
			Expect(client.IgnoreNotFound(e.Onboarding.Client.Delete(suiteCtx, kro))).To(Succeed())
			eventually(3*time.Minute, func(g Gomega) {
				g.Expect(apierrors.IsNotFound(e.Onboarding.Client.Get(suiteCtx, client.ObjectKeyFromObject(kro), kro))).To(BeTrue(), describeKro(kro))
			})
			Expect(e.RemoveControlPlane(suiteCtx, cp.Name)).To(Succeed())
		})
		Expect(e.Onboarding.Client.Create(suiteCtx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: cp.Namespace}})).To(Succeed())
		kro := kroOf(cp)
		kro.Spec.Version = "v0.9.4"
		Expect(e.Onboarding.Client.Create(suiteCtx, kro)).To(Succeed())
		eventually(5*time.Minute, func(g Gomega) {
			expectReady(g, cp, "0.9.4")
			g.Expect(condition(getKro(g, cp), v1alpha1.ConditionKroAvailable).Status).To(Equal(metav1.ConditionTrue))
		})
	})

	It("reports kro's Deployment deleted at once, and Flux's drift detection puts it back", func() {
		d := krosDeployment(Default, cp)
		Expect(cp.Client.Delete(suiteCtx, d)).To(Succeed())
		deleted := time.Now()
		expectKroUnavailable(cp, "kro's Deployment is missing")
		reported := time.Since(deleted)
		expectKroBack(cp)
		back := time.Since(deleted)
		recordTiming("drift: kro's Deployment deleted → Kro reports it", reported)
		recordTiming("drift: kro's Deployment deleted → Kro Ready again", back)
		fmt.Fprintf(GinkgoWriter, "deleted kro's Deployment: reported after %s, back and Ready after %s\n", reported.Round(100*time.Millisecond), back.Round(100*time.Millisecond))
	})

	It("reports kro's Deployment scaled to zero at once, and Flux's drift detection scales it back", func() {
		d := krosDeployment(Default, cp)
		Expect(cp.Client.Patch(suiteCtx, d, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"replicas":0}}`)))).To(Succeed())
		scaled := time.Now()
		expectKroUnavailable(cp, "scaled to 0 replicas")
		reported := time.Since(scaled)
		expectKroBack(cp)
		recordTiming("drift: kro scaled to 0 → Kro reports it", reported)
		recordTiming("drift: kro scaled to 0 → Kro Ready again", time.Since(scaled))
	})
})

// krosDeployment is the Deployment of kro's Helm release in kro-system.
func krosDeployment(g Gomega, cp *env.ControlPlane) *appsv1.Deployment {
	list := &appsv1.DeploymentList{}
	g.Expect(cp.Client.List(suiteCtx, list, client.InNamespace(owned.KroNamespace), client.MatchingLabels{"app.kubernetes.io/instance": owned.ReleaseName})).To(Succeed())
	g.Expect(list.Items).To(HaveLen(1), "kro's Deployment on %s", cp.Name)
	return &list.Items[0]
}

// expectKroUnavailable waits until the Kro reports kro unavailable, in KroAvailable and
// in Ready. The watch brings it: the poll interval alone would take up to 10 s.
func expectKroUnavailable(cp *env.ControlPlane, text string) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		kro := getKro(g, cp)
		c := condition(kro, v1alpha1.ConditionKroAvailable)
		g.Expect(c.Status).To(Equal(metav1.ConditionFalse), describeKro(kro))
		g.Expect(c.Reason).To(Equal(v1alpha1.ReasonKroUnavailable), describeKro(kro))
		g.Expect(c.Message).To(ContainSubstring(text), describeKro(kro))
		g.Expect(condition(kro, v1alpha1.ConditionReady).Reason).To(Equal(v1alpha1.ReasonKroUnavailable), describeKro(kro))
	}).WithContext(suiteCtx).WithTimeout(time.Minute).WithPolling(200 * time.Millisecond).Should(Succeed())
}

// expectKroBack waits until helm-controller has put kro's Deployment back (available,
// with the chart's replicas), and the Kro is Ready again.
func expectKroBack(cp *env.ControlPlane) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		d := krosDeployment(g, cp)
		g.Expect(d.Spec.Replicas).NotTo(BeNil())
		g.Expect(*d.Spec.Replicas).To(BeNumerically(">", 0), "helm-controller restores the chart's replicas")
		g.Expect(d.Status.AvailableReplicas).To(BeNumerically(">", 0))
		expectReady(g, cp, "0.9.4")
		g.Expect(condition(getKro(g, cp), v1alpha1.ConditionKroAvailable).Status).To(Equal(metav1.ConditionTrue))
	}).WithContext(suiteCtx).WithTimeout(3 * time.Minute).WithPolling(time.Second).Should(Succeed())
}

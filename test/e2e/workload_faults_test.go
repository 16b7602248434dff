//go:build e2e

package e2e

import (
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

// Faults of the WorkloadCluster placement: the workload cluster's API server down while a
// tenant is installed and while one is deleted, and kro's credential renewed. A third
// tenant (wl-c) comes and goes for them; the two others share the workload cluster
// meanwhile and must come back by themselves.

// workloadKit is what the fault specs need of the workload environment.
type workloadKit struct {
	env        func() *env.Env
	cps        func() []*env.ControlPlane
	wc         func() *env.ControlPlane
	workloadNS func(cp *env.ControlPlane) string
}

func workloadFaultSpecs(k workloadKit) {
	var extra *env.ControlPlane

	It("installs a tenant while the workload cluster's API server is down, once it is back", func() {
		se, wc := k.env(), k.wc()
		added, err := se.AddControlPlanes(suiteCtx, env.ControlPlaneRef{Name: "wl-c", Namespace: "wl-c"})
		Expect(err).NotTo(HaveOccurred())
		extra = added[0]
		Expect(se.Platform.Client.Create(suiteCtx, se.WorkloadSecret(extra, wc))).To(Succeed())
		Expect(se.StopControlPlaneAPIServer(wc)).To(Succeed())
		restarted := false
		DeferCleanup(func() {
			if !restarted {
				Expect(se.StartControlPlaneAPIServer(suiteCtx, wc)).To(Succeed())
			}
		})
		Expect(se.Onboarding.Client.Create(suiteCtx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: extra.Namespace}})).To(Succeed())
		kro := kroOf(extra)
		kro.Spec.Version = workloadVersion
		Expect(se.Onboarding.Client.Create(suiteCtx, kro)).To(Succeed())

		By("the new tenant and the running ones say the workload cluster does not answer")
		for _, cp := range append([]*env.ControlPlane{extra}, k.cps()[0]) {
			eventually(2*time.Minute, func(g Gomega) {
				kro := getKroIn(g, se, cp)
				c := condition(kro, v1alpha1.ConditionWorkloadClusterReady)
				g.Expect(c.Reason).To(Equal(v1alpha1.ReasonWorkloadClusterUnreachable), describeKro(kro))
				g.Expect(c.Message).To(ContainSubstring("does not answer"), describeKro(kro))
				g.Expect(condition(kro, v1alpha1.ConditionReady).Reason).To(Equal(v1alpha1.ReasonReconcileError), describeKro(kro))
			})
		}
		By("back, the new tenant is installed and the others recover")
		Expect(se.StartControlPlaneAPIServer(suiteCtx, wc)).To(Succeed())
		restarted = true
		measure("workload: installed once the workload cluster is back", func() {
			for _, cp := range append([]*env.ControlPlane{extra}, k.cps()...) {
				eventually(5*time.Minute, func(g Gomega) {
					kro := getKroIn(g, se, cp)
					g.Expect(kro.Status.Phase).To(Equal(v1alpha1.PhaseReady), describeKro(kro))
				})
			}
		})
		deps := &appsv1.DeploymentList{}
		Expect(wc.Client.List(suiteCtx, deps, client.InNamespace(k.workloadNS(extra)))).To(Succeed())
		Expect(deps.Items).To(HaveLen(1))
	})

	It("renews kro's credential in place, and kro goes on with the new one", func() {
		se, wc, cp := k.env(), k.wc(), k.cps()[0]
		key := client.ObjectKey{Namespace: k.workloadNS(cp), Name: owned.KroCredentialSecretName}
		secret := &corev1.Secret{}
		Expect(wc.Client.Get(suiteCtx, key, secret)).To(Succeed())
		oldToken := string(secret.Data["token"])
		// Due for renewal: issued long ago, as if two thirds of its lifetime had passed.
		Expect(wc.Client.Patch(suiteCtx, secret, client.RawPatch(types.MergePatchType,
			[]byte(`{"metadata":{"annotations":{"`+v1alpha1.AnnotationTokenIssued+`":"2026-01-01T00:00:00Z"}}}`)))).To(Succeed())
		eventually(time.Minute, func(g Gomega) {
			g.Expect(wc.Client.Get(suiteCtx, key, secret)).To(Succeed())
			g.Expect(string(secret.Data["token"])).NotTo(Equal(oldToken))
			g.Expect(secret.Annotations[v1alpha1.AnnotationTokenIssued]).NotTo(Equal("2026-01-01T00:00:00Z"))
		})
		By("a CredentialRotated event on the Kro, which names no token")
		eventually(30*time.Second, func(g Gomega) {
			var list corev1.EventList
			g.Expect(se.Onboarding.Client.List(suiteCtx, &list, client.InNamespace(cp.Namespace))).To(Succeed())
			found := false
			for _, e := range list.Items {
				if e.Reason == "CredentialRotated" && e.InvolvedObject.Name == cp.Name {
					found = true
					g.Expect(e.Message).NotTo(ContainSubstring(oldToken))
					g.Expect(e.Message).NotTo(ContainSubstring(string(secret.Data["token"])))
				}
			}
			g.Expect(found).To(BeTrue())
		})
		By("kro, given the renewed files, reconciles a new instance")
		Expect(se.StopKroControllerOnWorkload(cp)).To(Succeed())
		Expect(se.StartKroControllerOnWorkload(suiteCtx, cp, wc)).To(Succeed())
		inst := instanceOfName(cp, "after-rotation")
		Expect(cp.Client.Create(suiteCtx, inst)).To(Succeed())
		eventually(2*time.Minute, func(g Gomega) {
			g.Expect(cp.Client.Get(suiteCtx, client.ObjectKeyFromObject(inst), inst)).To(Succeed())
			g.Expect(instanceReady(inst)).To(BeTrue(), "instance %s: %v", inst.GetName(), inst.Object["status"])
		})
		Expect(cp.Client.Delete(suiteCtx, inst)).To(Succeed())
		eventually(time.Minute, func(g Gomega) {
			g.Expect(apierrors.IsNotFound(cp.Client.Get(suiteCtx, client.ObjectKeyFromObject(inst), inst))).To(BeTrue())
		})
	})

	It("deletes a tenant while the workload cluster's API server is down, leaving nothing once it is back", func() {
		se, wc := k.env(), k.wc()
		Expect(extra).NotTo(BeNil(), "the install spec ran")
		Expect(se.StopControlPlaneAPIServer(wc)).To(Succeed())
		restarted := false
		DeferCleanup(func() {
			if !restarted {
				Expect(se.StartControlPlaneAPIServer(suiteCtx, wc)).To(Succeed())
			}
		})
		Expect(se.Onboarding.Client.Delete(suiteCtx, kroOf(extra))).To(Succeed())
		By("the deletion waits for the uninstall, and says so")
		eventually(2*time.Minute, func(g Gomega) {
			kro := getKroIn(g, se, extra)
			g.Expect(kro.Status.Phase).To(Equal(v1alpha1.PhaseTerminating), describeKro(kro))
			g.Expect(condition(kro, v1alpha1.ConditionDeletionBlocked).Message).To(ContainSubstring("uninstall"), describeKro(kro))
		})
		Consistently(func() error {
			return se.Onboarding.Client.Get(suiteCtx, client.ObjectKeyFromObject(kroOf(extra)), &v1alpha1.Kro{})
		}).WithContext(suiteCtx).WithTimeout(20*time.Second).WithPolling(2*time.Second).Should(Succeed(), "the Kro stays while kro cannot be uninstalled")
		Expect(se.StartControlPlaneAPIServer(suiteCtx, wc)).To(Succeed())
		restarted = true
		measure("workload: deleted once the workload cluster is back", func() {
			eventually(8*time.Minute, func(g Gomega) {
				err := se.Onboarding.Client.Get(suiteCtx, client.ObjectKeyFromObject(kroOf(extra)), &v1alpha1.Kro{})
				g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "Kro %s still there", extra.Name)
			})
		})
		eventually(time.Minute, func(g Gomega) {
			ns := &corev1.Namespace{}
			err := wc.Client.Get(suiteCtx, client.ObjectKey{Name: k.workloadNS(extra)}, ns)
			g.Expect(apierrors.IsNotFound(err) || !ns.DeletionTimestamp.IsZero()).To(BeTrue(), "namespace %s: %v", k.workloadNS(extra), err)
		})
		left, err := se.CheckLeftovers(suiteCtx, true, extra)
		Expect(err).NotTo(HaveOccurred())
		Expect(left.Orphaned).To(BeEmpty(), "orphaned: %s", left.Names())
	})
}

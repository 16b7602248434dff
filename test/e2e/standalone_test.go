//go:build e2e

package e2e

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/openmcp-project/service-provider-kro/controllers/owned"
	"github.com/openmcp-project/service-provider-kro/test/e2e/env"
)

// documentedRunSpec runs the provider the way docs/operations.md installs it without
// openmcp and without a pod (init, then run), in place of the environment's provider,
// and shows that it acts: it repairs the image pull secret it replicated onto a
// ControlPlane, from the source in the namespace the documented --pod-namespace names.
// The kind e2e runs the rest of that section, which needs a cluster to deploy into.
func documentedRunSpec(controlPlane func() *env.ControlPlane) {
	It("runs as docs/operations.md starts it without openmcp: init, then run", func() {
		cp := controlPlane()
		Expect(imagePullSecretCopies(Default, cp)).To(ConsistOf(env.PullSecretName))
		Expect(e.KillProvider()).To(Succeed())
		DeferCleanup(func() { Expect(e.RestartProvider(suiteCtx)).To(Succeed()) })

		p, initOut, err := e.StartDocumentedProvider(suiteCtx)
		Expect(err).NotTo(HaveOccurred(), initOut)
		DeferCleanup(p.Stop) // before the environment's provider is restarted
		Expect(initOut).To(ContainSubstring("onboarding cluster: CRDs"))
		Expect(initOut).To(ContainSubstring("platform cluster: CRDs"))

		By("the documented provider puts back the image pull secret deleted from kro-system on " + cp.Name)
		copied := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: owned.KroNamespace, Name: env.PullSecretName}}
		Expect(cp.Client.Delete(suiteCtx, copied)).To(Succeed())
		eventually(time.Minute, func(g Gomega) {
			g.Expect(imagePullSecretCopies(g, cp)).To(ConsistOf(env.PullSecretName))
		})
		Expect(p.ExitError()).NotTo(HaveOccurred(), p.LogTail(30))
		eventually(time.Minute, func(g Gomega) { expectReady(g, cp, "0.9.4") })
	})
}

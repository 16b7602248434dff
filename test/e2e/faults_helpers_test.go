//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/owned"
	"github.com/openmcp-project/service-provider-kro/test/e2e/env"
)

// Helpers of the fault suite's specs: the Kro of a ControlPlane created, read, waited for
// and deleted, what it left checked, the finalizer guarded during a deletion, and the
// cleanup after a failed spec.

func fluxKeyOf(cp *env.ControlPlane) client.ObjectKey {
	return client.ObjectKey{Namespace: cp.TenantNamespace, Name: fe.ProviderName}
}

func getKroOf(g Gomega, cp *env.ControlPlane) *v1alpha1.Kro {
	kro := kroOf(cp)
	g.Expect(fe.Onboarding.Client.Get(suiteCtx, client.ObjectKeyFromObject(kro), kro)).To(Succeed())
	return kro
}

func patchKroOf(cp *env.ControlPlane, patch string) {
	GinkgoHelper()
	Expect(fe.Onboarding.Client.Patch(suiteCtx, kroOf(cp), client.RawPatch(types.MergePatchType, []byte(patch)))).To(Succeed())
}

func createKro(cp *env.ControlPlane, version string) time.Time {
	GinkgoHelper()
	kro := kroOf(cp)
	kro.Spec.Version = version
	Expect(fe.Onboarding.Client.Create(suiteCtx, kro)).To(Succeed())
	return time.Now()
}

// installReady creates the Kro of cp and waits until it is Ready: the starting point of
// the faults that hit an upgrade or a deletion.
func installReady(cp *env.ControlPlane, version string) {
	GinkgoHelper()
	createKro(cp, version)
	waitUntil(3*time.Minute, poll, func(g Gomega) { expectKroReady(g, cp, strings.TrimPrefix(version, "v")) })
}

func expectKroReady(g Gomega, cp *env.ControlPlane, chartVersion string) {
	kro := getKroOf(g, cp)
	g.Expect(kro.Status.ObservedGeneration).To(Equal(kro.Generation), describeKro(kro))
	g.Expect(condition(kro, v1alpha1.ConditionReady).Status).To(Equal(metav1.ConditionTrue), describeKro(kro))
	g.Expect(kro.Status.Phase).To(Equal(v1alpha1.PhaseReady), describeKro(kro))
	g.Expect(kro.Status.ChartVersion).To(Equal(chartVersion), describeKro(kro))
}

// expectBlocked expects the Kro's deletion blocked with that reason and a message that
// contains text, and returns the condition.
func expectBlocked(g Gomega, cp *env.ControlPlane, reason, text string) metav1.Condition {
	kro := getKroOf(g, cp)
	blocked := condition(kro, v1alpha1.ConditionDeletionBlocked)
	g.Expect(kro.Status.Phase).To(Equal(v1alpha1.PhaseTerminating), describeKro(kro))
	g.Expect(blocked.Status).To(Equal(metav1.ConditionTrue), describeKro(kro))
	g.Expect(blocked.Reason).To(Equal(reason), describeKro(kro))
	g.Expect(blocked.Message).To(ContainSubstring(text), describeKro(kro))
	return blocked
}

// waitUntil polls f every interval for up to d and returns how long it took to succeed.
func waitUntil(d, interval time.Duration, f func(g Gomega)) time.Duration {
	GinkgoHelper()
	start := time.Now()
	Eventually(f).WithContext(suiteCtx).WithTimeout(d).WithPolling(interval).Should(Succeed())
	return time.Since(start)
}

func waitGone(d time.Duration, cps ...*env.ControlPlane) {
	GinkgoHelper()
	waitUntil(d, poll, func(g Gomega) {
		for _, cp := range cps {
			kro := kroOf(cp)
			err := fe.Onboarding.Client.Get(suiteCtx, client.ObjectKeyFromObject(kro), kro)
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "still there: %s", describeKro(kro))
		}
	})
}

// deleteAndCheck deletes the Kros of cps, waits until they are gone while guarding their
// finalizers, and checks what they left.
func deleteAndCheck(row *faultRow, cps ...*env.ControlPlane) {
	GinkgoHelper()
	var guards []func() guardResult
	// Two requests per look and Kro: fewer looks when many Kros go at once.
	every := 100 * time.Millisecond * time.Duration(max(1, len(cps)/4))
	for _, cp := range cps {
		guards = append(guards, guardFinalizerEvery(cp, every))
		Expect(fe.Onboarding.Client.Delete(suiteCtx, kroOf(cp))).To(Succeed())
	}
	waitGone(5*time.Minute, cps...)
	for _, g := range guards {
		row.finalizerGuard(g())
	}
	checkLeftovers(row, true, cps...)
}

// checkLeftovers runs the checker for Kros that are gone, records the count in the row
// and fails on anything orphaned.
func checkLeftovers(row *faultRow, checkControlPlanes bool, cps ...*env.ControlPlane) env.Leftovers {
	GinkgoHelper()
	left, err := fe.CheckLeftovers(suiteCtx, checkControlPlanes, cps...)
	Expect(err).NotTo(HaveOccurred())
	row.orphans(left)
	Expect(left.Orphaned).To(BeEmpty(), "orphaned: %s", left.Names())
	return left
}

// helmReleaseSecrets are the storage secrets of kro's Helm release on the ControlPlane.
func helmReleaseSecrets(g Gomega, cp *env.ControlPlane) []string {
	var list corev1.SecretList
	g.Expect(cp.Client.List(suiteCtx, &list, client.InNamespace(owned.KroNamespace))).To(Succeed())
	var names []string
	for _, s := range list.Items {
		if strings.HasPrefix(s.Name, env.HelmReleaseSecretPrefix) {
			names = append(names, s.Name)
		}
	}
	return names
}

// cleanUpAfterFailure lets the next fault start from no Kro on these ControlPlanes when
// the running spec fails: their Kros are deleted (their finalizers removed when they do
// not go within two minutes) and so are ResourceGraphDefinitions left on them. Registered
// first, it runs after the spec's other cleanups, which restart what it stopped.
func cleanUpAfterFailure(cps ...*env.ControlPlane) {
	DeferCleanup(func() {
		if !CurrentSpecReport().Failed() {
			return
		}
		for _, cp := range cps {
			rgds := &unstructured.UnstructuredList{}
			rgds.SetAPIVersion("kro.run/v1alpha1")
			rgds.SetKind("ResourceGraphDefinitionList")
			if err := cp.Client.List(suiteCtx, rgds); err == nil {
				for i := range rgds.Items {
					_ = cp.Client.Delete(suiteCtx, &rgds.Items[i])
				}
			}
			_ = client.IgnoreNotFound(fe.Onboarding.Client.Delete(suiteCtx, kroOf(cp)))
		}
		for _, cp := range cps {
			err := wait(2*time.Minute, func() bool {
				return apierrors.IsNotFound(fe.Onboarding.Client.Get(suiteCtx, client.ObjectKeyFromObject(kroOf(cp)), kroOf(cp)))
			})
			if err != nil {
				fmt.Fprintf(GinkgoWriter, "cleanup: the Kro of %s does not go; removing its finalizer\n", cp.Name)
				_ = fe.Onboarding.Client.Patch(suiteCtx, kroOf(cp), client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
			}
		}
	})
}

// wait polls cond until it holds or d has passed.
func wait(d time.Duration, cond func() bool) error {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %s", d)
		}
		time.Sleep(poll)
	}
	return nil
}

// guardResult is what guardFinalizer saw.
type guardResult struct {
	kro string
	// polls counts the looks that found both the Kro and kro's Helm release.
	polls int
	// violation describes the Kro gone while kro's Helm release was still there.
	violation string
}

// guardFinalizer polls, from now until it is stopped, that the Kro of cp exists as long
// as kro's Helm release does on the ControlPlane: the provider must not drop the
// finalizer before Flux has uninstalled kro. It looks at the Kro first and the release
// second, so a release seen after the Kro was seen gone was there after the Kro went.
// A ControlPlane that does not answer is not looked at.
func guardFinalizer(cp *env.ControlPlane) func() guardResult {
	return guardFinalizerEvery(cp, 100*time.Millisecond)
}

// guardFinalizerEvery is guardFinalizer, looking every interval.
func guardFinalizerEvery(cp *env.ControlPlane, interval time.Duration) func() guardResult {
	res := guardResult{kro: cp.Namespace + "/" + cp.Name}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		defer GinkgoRecover()
		for {
			select {
			case <-stop:
				return
			case <-time.After(interval):
			}
			err := fe.Onboarding.Client.Get(suiteCtx, client.ObjectKeyFromObject(kroOf(cp)), kroOf(cp))
			if err != nil && !apierrors.IsNotFound(err) {
				continue
			}
			ctx, cancel := context.WithTimeout(suiteCtx, 2*time.Second)
			var list corev1.SecretList
			lerr := cp.Client.List(ctx, &list, client.InNamespace(owned.KroNamespace))
			cancel()
			if lerr != nil {
				continue
			}
			var release []string
			for _, s := range list.Items {
				if strings.HasPrefix(s.Name, env.HelmReleaseSecretPrefix) {
					release = append(release, s.Name)
				}
			}
			switch {
			case err == nil && len(release) > 0:
				res.polls++
			case err != nil && len(release) > 0 && res.violation == "":
				res.violation = fmt.Sprintf("the Kro %s was gone at %s while kro's Helm release %v was still on the ControlPlane",
					res.kro, time.Now().UTC().Format(time.RFC3339Nano), release)
			}
		}
	})
	var once sync.Once
	end := func() guardResult {
		once.Do(func() {
			close(stop)
			wg.Wait()
		})
		return res
	}
	DeferCleanup(func() { end() }) // a spec that fails early leaves no guard behind
	return end
}

// ms rounds a duration for a row.
func ms(d time.Duration) string {
	switch {
	case d < time.Second:
		return d.Round(10 * time.Millisecond).String()
	default:
		return d.Round(100 * time.Millisecond).String()
	}
}

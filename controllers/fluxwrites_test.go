package controllers

import (
	"context"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/clusters"
)

// Tests of when the provider writes its Flux objects, and of what the Kro reports while
// Flux catches up with them.

// TestChartSourceWaitsForTheControlPlane (issue 21, hole 4): while a Ready Kro's
// ControlPlane cannot be reached, a change of its version's chart and values reaches
// neither the OCIRepository nor the HelmRelease; once the ControlPlane is back, both
// change. A new chart tag applied alone would have helm-controller upgrade kro to the new
// chart with the old values.
func TestChartSourceWaitsForTheControlPlane(t *testing.T) {
	g := withClusters(t)
	ctx := context.Background()
	v := v1alpha1.KroVersion{Version: uniq("v-source"), ChartVersion: "0.9.3",
		HelmValues: &apiextensionsv1.JSON{Raw: []byte(`{"config":{"logLevel":"info"}}`)}}
	offerVersion(g, v)
	t.Cleanup(func() { withdrawVersion(NewWithT(t), v.Version) })
	k := readyKro(t, g, newNamespace(t, g), "source", v.Version)

	g.Expect(platform.Client.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: tenantNamespace(g, k), Name: "controlplane-access"}})).To(Succeed())
	eventuallyCondition(g, k, v1alpha1.ConditionControlPlaneAccessReady, metav1.ConditionFalse, v1alpha1.ReasonControlPlaneAccessMissing)

	v.ChartVersion = "0.9.4"
	v.HelmValues = &apiextensionsv1.JSON{Raw: []byte(`{"config":{"logLevel":"debug"}}`)}
	offerVersion(g, v)
	// The Kro has seen the change; neither Flux object has.
	eventuallyCondition(g, k, v1alpha1.ConditionVersionResolved, metav1.ConditionTrue, v1alpha1.ReasonReconcileSuccess, ":0.9.4")
	g.Consistently(func(g Gomega) {
		g.Expect(getOCIRepository(g, k).Spec.Reference.Tag).To(Equal("0.9.3"))
		g.Expect(valuesOf(g, k)).To(ContainSubstring(`"info"`))
	}).WithTimeout(2 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
	// And the Kro says why.
	got := getKro(g, k)
	g.Expect(condition(got, v1alpha1.ConditionOCIRepositoryReady).Reason).To(Equal(v1alpha1.ReasonNotChecked))
	g.Expect(condition(got, v1alpha1.ConditionOCIRepositoryReady).Message).To(Equal("not checked: ControlPlaneAccessReady is False (ControlPlaneAccessMissing)"))
	g.Expect(condition(got, v1alpha1.ConditionHelmReleaseReady).Reason).To(Equal(v1alpha1.ReasonNotChecked))

	grantAccess(g, k, controlPlane)
	g.Eventually(func(g Gomega) {
		g.Expect(getOCIRepository(g, k).Spec.Reference.Tag).To(Equal("0.9.4"))
		g.Expect(valuesOf(g, k)).To(ContainSubstring(`"debug"`))
	}, timeout, interval).Should(Succeed())
	eventuallyCondition(g, k, v1alpha1.ConditionHelmReleaseReady, metav1.ConditionFalse, v1alpha1.ReasonUpgradeInProgress, "upgrading kro from 0.9.3 to 0.9.4")
}

// TestFluxFlipsRightAfterAStatusWriteAreSeen: the HelmRelease goes not Ready, and back to
// Ready the moment the Kro reports it, many times. The reconcile that follows the second
// change must not take its own previous status write for missing (a stale cached Kro
// whose status already looks right would leave the Kro not Ready until the poll interval,
// 10 minutes in this suite).
func TestFluxFlipsRightAfterAStatusWriteAreSeen(t *testing.T) {
	g := withClusters(t)
	ctx := context.Background()
	k := readyKro(t, g, newNamespace(t, g), "flips", baseVersion)
	key := client.ObjectKeyFromObject(k)
	readyIs := func(want metav1.ConditionStatus) func(g Gomega) {
		return func(g Gomega) {
			kro := &v1alpha1.Kro{}
			g.Expect(onboarding.Client.Get(ctx, key, kro)).To(Succeed())
			g.Expect(condition(kro, v1alpha1.ConditionReady).Status).To(Equal(want))
		}
	}
	for i := range 20 {
		fluxReady(g, getHelmRelease(g, k), metav1.ConditionFalse, fmt.Sprintf("upgrade %d failed", i))
		g.Eventually(readyIs(metav1.ConditionFalse)).WithTimeout(timeout).WithPolling(2*time.Millisecond).Should(Succeed(), "flip %d", i)
		fluxReady(g, getHelmRelease(g, k), metav1.ConditionTrue, "Helm upgrade succeeded")
		g.Eventually(readyIs(metav1.ConditionTrue)).WithTimeout(10*time.Second).WithPolling(10*time.Millisecond).Should(Succeed(), "flip %d: the Kro missed the HelmRelease's Ready", i)
	}
}

// setPollInterval sets the suite ProviderConfig's pollInterval, and puts the suite's
// back at the end of the test.
func setPollInterval(t *testing.T, g Gomega, d time.Duration) {
	t.Helper()
	update := func(d time.Duration) error {
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			pc := &v1alpha1.ProviderConfig{}
			if err := platform.Client.Get(context.Background(), client.ObjectKey{Name: providerName}, pc); err != nil {
				return err
			}
			pc.Spec.PollInterval = &metav1.Duration{Duration: d}
			return platform.Client.Update(context.Background(), pc)
		})
	}
	g.Expect(update(d)).To(Succeed())
	t.Cleanup(func() {
		if err := update(suitePollInterval); err != nil {
			t.Errorf("restoring the poll interval: %v", err)
		}
	})
}

// TestAPollIntervalChangeKeepsTheKroReady (issue 21, hole 6): a new pollInterval changes
// spec.interval of both Flux objects and nothing they install. The Kro stays Ready,
// without a single transition, while the played source-controller and helm-controller
// lag behind; the HelmRelease takes the new interval only once source-controller has
// observed the OCIRepository's (helm-controller would otherwise report SourceNotReady
// until its interval is up).
func TestAPollIntervalChangeKeepsTheKroReady(t *testing.T) {
	g := withClusters(t)
	k := readyKro(t, g, newNamespace(t, g), "interval", baseVersion)
	before := *condition(k, v1alpha1.ConditionReady)
	stillReady := func(g Gomega) {
		got := getKro(g, k)
		ready := condition(got, v1alpha1.ConditionReady)
		g.Expect(ready.Status).To(Equal(metav1.ConditionTrue), ready.Message)
		g.Expect(ready.LastTransitionTime).To(Equal(before.LastTransitionTime))
		g.Expect(got.Status.Phase).To(Equal(v1alpha1.PhaseReady))
	}
	const changed = 11 * time.Minute
	setPollInterval(t, g, changed)

	g.Eventually(func(g Gomega) {
		g.Expect(getOCIRepository(g, k).Spec.Interval.Duration).To(Equal(changed))
	}, timeout, interval).Should(Succeed())
	g.Consistently(func(g Gomega) {
		stillReady(g)
		g.Expect(getHelmRelease(g, k).Spec.Interval.Duration).To(Equal(suitePollInterval), "the HelmRelease waits for source-controller")
	}).WithTimeout(3 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())

	// source-controller observes the OCIRepository; helm-controller lags behind.
	fluxReady(g, getOCIRepository(g, k), metav1.ConditionTrue, "stored artifact")
	g.Eventually(func(g Gomega) {
		g.Expect(getHelmRelease(g, k).Spec.Interval.Duration).To(Equal(changed))
	}, timeout, interval).Should(Succeed())
	g.Consistently(stillReady).WithTimeout(2 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())

	fluxReady(g, getHelmRelease(g, k), metav1.ConditionTrue, "Helm upgrade succeeded")
	g.Eventually(func(g Gomega) {
		hr := findManaged(getKro(g, k), "HelmRelease")
		g.Expect(hr).NotTo(BeNil())
		g.Expect(hr.Message).To(Equal("Helm upgrade succeeded"))
	}, timeout, interval).Should(Succeed())
	stillReady(g)
}

// findManaged is the Kro's managedResources entry of a kind on the platform cluster.
func findManaged(k *v1alpha1.Kro, kind string) *v1alpha1.ManagedResource {
	for i := range k.Status.ManagedResources {
		if m := &k.Status.ManagedResources[i]; m.Cluster == clusters.Platform && m.Kind == kind {
			return m
		}
	}
	return nil
}

package controllers

import (
	"context"
	"strings"
	"testing"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	"github.com/fluxcd/pkg/apis/meta"
	. "github.com/onsi/gomega"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
)

// playStuckInstall plays helm-controller after the status patch of an install was lost
// (fluxcd/helm-controller#1409): the release at the head of the history is deployed, but
// Released is missing and Ready still says the install runs, since the time given.
func playStuckInstall(g Gomega, hr *helmv2.HelmRelease, since time.Time) {
	ctx := context.Background()
	g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := platform.Client.Get(ctx, client.ObjectKeyFromObject(hr), hr); err != nil {
			return err
		}
		g.Expect(hr.Status.History).NotTo(BeEmpty())
		g.Expect(hr.Status.History[0].Status).To(Equal("deployed"))
		apimeta.RemoveStatusCondition(&hr.Status.Conditions, helmv2.ReleasedCondition)
		apimeta.RemoveStatusCondition(&hr.Status.Conditions, meta.ReadyCondition) // so that it takes the time given
		apimeta.SetStatusCondition(&hr.Status.Conditions, metav1.Condition{
			Type: meta.ReadyCondition, Status: metav1.ConditionUnknown, Reason: meta.ProgressingReason,
			Message: "Running 'install' action with timeout of 5m0s", LastTransitionTime: metav1.NewTime(since),
		})
		return platform.Client.Status().Update(ctx, hr)
	})).To(Succeed())
}

// TestStuckReleaseIsForced: a HelmRelease that helm-controller leaves saying "Running
// 'install' action" although its release is deployed is left alone while the install
// could still run, and once that is past the release's timeout the provider asks for a
// forced upgrade (reconcile.fluxcd.io/forceAt equal to requestedAt) once, with one event;
// once helm-controller has handled it the request stays as it is and nothing more is
// written.
func TestStuckReleaseIsForced(t *testing.T) {
	g := withClusters(t)
	k := readyKro(t, g, newNamespace(t, g), "cp-1", baseVersion)

	playStuckInstall(g, getHelmRelease(g, k), time.Now())
	eventuallyCondition(g, k, v1alpha1.ConditionHelmReleaseReady, metav1.ConditionUnknown, v1alpha1.ReasonReconciling, "Running 'install' action")
	g.Consistently(func(g Gomega) {
		g.Expect(getHelmRelease(g, k).Annotations).NotTo(HaveKey(meta.ForceRequestAnnotation))
	}, 3*time.Second, interval).Should(Succeed(), "an install within its timeout may still run")

	since := time.Now().Add(-6 * time.Minute).Truncate(time.Second)
	episode := "stuck-release/" + since.UTC().Format(time.RFC3339)
	playStuckInstall(g, getHelmRelease(g, k), since)
	var hr *helmv2.HelmRelease
	g.Eventually(func(g Gomega) {
		hr = getHelmRelease(g, k)
		g.Expect(hr.Annotations).To(HaveKeyWithValue(meta.ReconcileRequestAnnotation, episode))
		g.Expect(hr.Annotations).To(HaveKeyWithValue(meta.ForceRequestAnnotation, episode))
	}, timeout, interval).Should(Succeed())
	eventuallyEvent(g, k, "Normal/"+v1alpha1.ReasonFluxReleaseForced+": HelmRelease ",
		"Running 'install' action", "revision 1 is deployed with chart", "a forced upgrade was requested")

	// helm-controller handles the request: it upgrades and reports the release Ready.
	g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		hr = getHelmRelease(g, k)
		hr.Status.LastHandledForceAt, hr.Status.LastHandledReconcileAt = episode, episode
		return platform.Client.Status().Update(context.Background(), hr)
	})).To(Succeed())
	fluxReady(g, getHelmRelease(g, k), metav1.ConditionTrue, "Helm upgrade succeeded")
	eventuallyCondition(g, k, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReconcileSuccess)

	settled := getHelmRelease(g, k)
	g.Expect(settled.Annotations).To(HaveKeyWithValue(meta.ForceRequestAnnotation, episode), "the handled request is kept, not removed by a write")
	g.Consistently(func(g Gomega) string { return getHelmRelease(g, k).ResourceVersion }, 3*time.Second, interval).
		Should(Equal(settled.ResourceVersion), "nothing more is written once it is handled")
	forced := 0
	for _, e := range kroEvents(g, k) {
		if strings.HasPrefix(e, "Normal/"+v1alpha1.ReasonFluxReleaseForced) {
			forced++
		}
	}
	g.Expect(forced).To(Equal(1), "one event for the episode: %v", kroEvents(g, k))
}

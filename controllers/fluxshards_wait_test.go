package controllers

import (
	"context"
	"strings"
	"testing"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	"github.com/fluxcd/pkg/apis/meta"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"

	. "github.com/onsi/gomega"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/flux"
)

// setReconciling plays helm-controller on the HelmRelease's status: Reconciling=True
// with reason Progressing while a release operation runs (since the time given), none
// once it has ended.
func setReconciling(g Gomega, hr *helmv2.HelmRelease, since *time.Time) {
	ctx := context.Background()
	g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := platform.Client.Get(ctx, client.ObjectKeyFromObject(hr), hr); err != nil {
			return err
		}
		if since == nil {
			apimeta.RemoveStatusCondition(&hr.Status.Conditions, meta.ReconcilingCondition)
		} else {
			apimeta.SetStatusCondition(&hr.Status.Conditions, metav1.Condition{
				Type: meta.ReconcilingCondition, Status: metav1.ConditionTrue, Reason: meta.ProgressingReason,
				Message: "Running 'upgrade' action with timeout of 5m0s", LastTransitionTime: metav1.NewTime(*since),
			})
		}
		return platform.Client.Status().Update(ctx, hr)
	})).To(Succeed())
}

// setFluxShardKeys sets the ProviderConfig's spec.fluxShards.
func setFluxShardKeys(g Gomega, keys ...string) {
	ctx := context.Background()
	g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pc := &v1alpha1.ProviderConfig{}
		if err := platform.Client.Get(ctx, client.ObjectKey{Name: providerName}, pc); err != nil {
			return err
		}
		pc.Spec.FluxShards = keys
		return platform.Client.Update(ctx, pc)
	})).To(Succeed())
}

// handleSourceMove plays the source's new shard: it waits for the OCIRepository to carry
// key with its move request and marks the request handled.
func handleSourceMove(g Gomega, k *v1alpha1.Kro, key string) {
	var repo *sourcev1.OCIRepository
	g.Eventually(func(g Gomega) {
		repo = getOCIRepository(g, k)
		g.Expect(repo.Labels[v1alpha1.LabelFluxShard]).To(Equal(key))
		g.Expect(repo.Annotations[meta.ReconcileRequestAnnotation]).To(HavePrefix(flux.ShardMovePrefix(key)))
	}, timeout, interval).Should(Succeed())
	patch := client.MergeFrom(repo.DeepCopy())
	repo.Status.LastHandledReconcileAt = repo.Annotations[meta.ReconcileRequestAnnotation]
	repo.Status.Artifact = playedArtifact() // the chart fetched into the new shard's storage
	g.Expect(platform.Client.Status().Patch(context.Background(), repo, patch)).To(Succeed())
}

// playedArtifact is an artifact as a shard's source-controller records it once it has
// fetched the chart into its own storage.
func playedArtifact() *meta.Artifact {
	return &meta.Artifact{
		Path: "ocirepository/kro.tar.gz", URL: "http://source-controller.shard.svc/ocirepository/kro.tar.gz",
		Revision: "0.9.3@sha256:0123", Digest: "sha256:0123", LastUpdateTime: metav1.Now(),
	}
}

// helmReleaseEntry is the HelmRelease's entry in the Kro's status.managedResources.
func helmReleaseEntry(g Gomega, k *v1alpha1.Kro) v1alpha1.ManagedResource {
	got := &v1alpha1.Kro{}
	g.Expect(onboarding.Client.Get(context.Background(), client.ObjectKeyFromObject(k), got)).To(Succeed())
	for _, m := range got.Status.ManagedResources {
		if m.Kind == "HelmRelease" {
			return m
		}
	}
	g.Expect(got.Status.ManagedResources).To(ContainElement(HaveField("Kind", "HelmRelease")))
	return v1alpha1.ManagedResource{}
}

// TestFluxShardMoveWaitsForReleaseOperation: while helm-controller reports a release
// operation in flight (Reconciling=True, Progressing, as it writes before an upgrade
// begins), a shard move leaves the HelmRelease on its old shard even once the source's
// new shard has handled the move, says so in the Kro's status and in an event, and moves
// it once the operation has ended. A Reconciling condition older than any operation
// takes (its shard's controllers are gone) no longer holds the move.
func TestFluxShardMoveWaitsForReleaseOperation(t *testing.T) {
	g := withClusters(t)
	k := readyKro(t, g, newNamespace(t, g), "cp-1", baseVersion)
	t.Cleanup(func() { setFluxShardKeys(NewWithT(t)) })
	keys := []string{"shard-a", "shard-b"}
	key := flux.ShardOf(k, keys)
	shardOf := func(g Gomega) string { return getHelmRelease(g, k).Labels[v1alpha1.LabelFluxShard] }

	now := time.Now()
	setReconciling(g, getHelmRelease(g, k), &now)
	setFluxShardKeys(g, keys...)
	handleSourceMove(g, k, key)
	g.Consistently(shardOf, 3*time.Second, interval).Should(BeEmpty(), "the HelmRelease stays on the unsharded controllers while its upgrade runs")

	g.Eventually(func(g Gomega) {
		g.Expect(helmReleaseEntry(g, k).Message).To(HavePrefix(
			"the move to Flux shard " + key + " waits for helm-controller to end the release operation in flight (Reconciling=True, Progressing, since "))
	}, timeout, interval).Should(Succeed())
	eventuallyEvent(g, k, "Normal/"+v1alpha1.ReasonFluxShardMoveWaiting+": HelmRelease ", "the move to Flux shard "+key+" waits for helm-controller")

	setReconciling(g, getHelmRelease(g, k), nil)
	g.Eventually(shardOf, timeout, interval).Should(Equal(key), "the HelmRelease moves once the operation has ended")
	g.Eventually(func(g Gomega) {
		g.Expect(helmReleaseEntry(g, k).Message).NotTo(ContainSubstring("waits for"))
	}, timeout, interval).Should(Succeed())
	waits := 0
	for _, e := range kroEvents(g, k) {
		if strings.Contains(e, "waits for helm-controller") {
			waits++
		}
	}
	g.Expect(waits).To(Equal(1), "one event for the wait: %v", kroEvents(g, k))

	// A Reconciling condition left by controllers that are gone holds the move back to the
	// unsharded controllers only until it is stale.
	stale := time.Now().Add(-flux.ShardMoveStaleAfter(getHelmRelease(g, k)) - time.Minute)
	setReconciling(g, getHelmRelease(g, k), &stale)
	setFluxShardKeys(g)
	handleSourceMove(g, k, "")
	g.Eventually(shardOf, timeout, interval).Should(BeEmpty())
}

// TestReleaseBusy: what counts as a release operation in flight, and for how long.
func TestReleaseBusy(t *testing.T) {
	g := NewWithT(t)
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	hr := &helmv2.HelmRelease{}
	wait, _ := flux.ReleaseBusy(hr, now)
	g.Expect(wait).To(BeEmpty(), "no conditions, no history: nothing in flight")

	reconciling := func(reason string, since time.Time) {
		hr.Status.Conditions = []metav1.Condition{{Type: meta.ReconcilingCondition, Status: metav1.ConditionTrue, Reason: reason, LastTransitionTime: metav1.NewTime(since)}}
	}
	reconciling(meta.ProgressingReason, now.Add(-time.Minute))
	wait, until := flux.ReleaseBusy(hr, now)
	g.Expect(wait).To(ContainSubstring("Reconciling=True, Progressing, since 2026-12-04T11:59:00Z"))
	g.Expect(until).To(Equal(now.Add(-time.Minute).Add(16*time.Minute)), "three timeouts of 5 m and a minute")
	hr.Spec.Timeout = &metav1.Duration{Duration: time.Minute}
	wait, _ = flux.ReleaseBusy(hr, now.Add(3*time.Minute))
	g.Expect(wait).To(BeEmpty(), "past three timeouts of the release and a minute the condition is stale")
	reconciling(meta.ProgressingWithRetryReason, now)
	wait, _ = flux.ReleaseBusy(hr, now)
	g.Expect(wait).To(BeEmpty(), "between retries no operation runs")

	hr.Status.Conditions = nil
	hr.Status.History = helmv2.Snapshots{{Version: 3, Status: "pending-upgrade", LastDeployed: metav1.NewTime(now.Add(-time.Minute))}, {Version: 2, Status: "deployed"}}
	wait, _ = flux.ReleaseBusy(hr, now)
	g.Expect(wait).To(ContainSubstring("revision 3 is pending-upgrade since 2026-12-04T11:59:00Z"))
	hr.Status.History[0].Status = "failed"
	wait, _ = flux.ReleaseBusy(hr, now)
	g.Expect(wait).To(BeEmpty())

	reported := flux.ShardWaitMessage("b", "helm-controller to end the release operation in flight (x)")
	g.Expect(flux.WithoutShardWait(reported+"; Helm upgrade succeeded")).To(Equal("Helm upgrade succeeded"), "a kept message does not report the wait twice")
	g.Expect(flux.WithoutShardWait(reported)).To(BeEmpty())
	g.Expect(flux.WithoutShardWait("Helm upgrade succeeded")).To(Equal("Helm upgrade succeeded"))
}

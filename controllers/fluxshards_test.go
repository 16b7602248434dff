package controllers

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/flux"
	"github.com/openmcp-project/service-provider-kro/controllers/reach"
)

func TestFluxShards(t *testing.T) {
	g := NewWithT(t)
	kros := make([]v1alpha1.Kro, 300)
	for i := range kros {
		kros[i].ObjectMeta = metav1.ObjectMeta{Namespace: fmt.Sprintf("team-%d", i), Name: "cp"}
	}
	two := []string{"a", "b"}
	three := []string{"a", "b", "c"}

	g.Expect(flux.ShardOf(&kros[0], nil)).To(BeEmpty(), "no shards, no key")
	g.Expect(flux.ShardCounts(nil, kros)).To(BeNil())

	counts := flux.ShardCounts(three, kros)
	g.Expect(counts).To(HaveLen(3))
	total := int32(0)
	for i, c := range counts {
		g.Expect(c.Key).To(Equal(three[i]), "in the order of the keys")
		g.Expect(c.Kros).To(BeNumerically(">", 60), "an even spread: %+v", counts)
		total += c.Kros
	}
	g.Expect(total).To(BeEquivalentTo(len(kros)))

	moved := 0
	for i := range kros {
		before, after := flux.ShardOf(&kros[i], two), flux.ShardOf(&kros[i], three)
		if before != after {
			g.Expect(after).To(Equal("c"), "adding a key moves Kros to it only")
			moved++
		}
		g.Expect(flux.ShardOf(&kros[i], []string{"b", "a"})).To(Equal(before), "the keys' order does not matter")
	}
	g.Expect(moved).To(BeNumerically("~", len(kros)/3, len(kros)/10), "about 1/n move")

	hr := flux.NewHelmRelease(&kros[0], providerName, "t", &v1alpha1.KroVersion{Version: "v1", ChartVersion: "0.9.4"}, reach.SecretKey{Name: "k", Key: "kubeconfig"}, 0)
	flux.LabelFluxShard(hr, "")
	g.Expect(hr.Labels).NotTo(HaveKey(v1alpha1.LabelFluxShard))
	flux.LabelFluxShard(hr, "b")
	g.Expect(hr.Labels).To(HaveKeyWithValue(v1alpha1.LabelFluxShard, "b"))
	g.Expect(hr.Labels).To(HaveKeyWithValue(v1alpha1.LabelManagedBy, v1alpha1.ManagedByValue), "the provider's labels stay")
}

// TestFluxShardLabels: the ProviderConfig's fluxShards label a Ready Kro's Flux objects
// with its key and count it in the status, source first: the HelmRelease follows once
// the source's new shard (played here, as the suite plays Flux) has handled the move's
// reconcile request. Removing the keys removes the labels the same way, and neither
// move makes the release install again.
func TestFluxShardLabels(t *testing.T) {
	g := withClusters(t)
	ctx := context.Background()
	k := readyKro(t, g, newNamespace(t, g), "cp-1", baseVersion)
	installed := len(getHelmRelease(g, k).Status.History)
	setFluxShards := func(g Gomega, keys ...string) {
		g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
			pc := &v1alpha1.ProviderConfig{}
			if err := platform.Client.Get(ctx, client.ObjectKey{Name: providerName}, pc); err != nil {
				return err
			}
			pc.Spec.FluxShards = keys
			return platform.Client.Update(ctx, pc)
		})).To(Succeed())
	}
	t.Cleanup(func() { setFluxShards(NewWithT(t)) })
	// move waits for the source to carry key with a move request, checks that the
	// HelmRelease stays where it was, plays the new shard's source-controller handling
	// the request, and waits for the HelmRelease to follow.
	move := func(key, was string) {
		var repo *sourcev1.OCIRepository
		g.Eventually(func(g Gomega) {
			repo = getOCIRepository(g, k)
			g.Expect(repo.Labels[v1alpha1.LabelFluxShard]).To(Equal(key))
			g.Expect(repo.Annotations[meta.ReconcileRequestAnnotation]).To(HavePrefix(flux.ShardMovePrefix(key)))
		}, timeout, interval).Should(Succeed())
		g.Consistently(func(g Gomega) {
			g.Expect(getHelmRelease(g, k).Labels[v1alpha1.LabelFluxShard]).To(Equal(was))
		}, 2*time.Second, interval).Should(Succeed(), "the HelmRelease waits for the source's new shard")
		patch := client.MergeFrom(repo.DeepCopy())
		repo.Status.LastHandledReconcileAt = repo.Annotations[meta.ReconcileRequestAnnotation]
		repo.Status.Artifact = playedArtifact() // the chart fetched into the new shard's storage
		g.Expect(platform.Client.Status().Patch(ctx, repo, patch)).To(Succeed())
		g.Eventually(func(g Gomega) {
			g.Expect(getHelmRelease(g, k).Labels[v1alpha1.LabelFluxShard]).To(Equal(key))
		}, timeout, interval).Should(Succeed())
	}

	keys := []string{"shard-a", "shard-b"}
	setFluxShards(g, keys...)
	want := flux.ShardOf(k, keys)
	move(want, "")
	g.Eventually(func(g Gomega) {
		pc := &v1alpha1.ProviderConfig{}
		g.Expect(platform.Client.Get(ctx, client.ObjectKey{Name: providerName}, pc)).To(Succeed())
		g.Expect(pc.Status.FluxShards).To(HaveLen(2))
		g.Expect(pc.Status.FluxShards[0].Key).To(Equal("shard-a"))
		g.Expect(pc.Status.FluxShards[0].Kros + pc.Status.FluxShards[1].Kros).To(Equal(pc.Status.Kros))
	}, timeout, interval).Should(Succeed())

	setFluxShards(g)
	move("", want)
	fluxReady(g, getHelmRelease(g, k), metav1.ConditionTrue, "")
	g.Expect(getHelmRelease(g, k).Status.History).To(HaveLen(installed), "kro is not installed again")
}

// TestShardMoveGoesSourceFirst: a move asks the source's new shard to reconcile it, and
// the HelmRelease follows only once that shard has handled the request and has an artifact.
func TestShardMoveGoesSourceFirst(t *testing.T) {
	g := NewWithT(t)
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	labelled := func(key string, annotations map[string]string) *sourcev1.OCIRepository {
		o := &sourcev1.OCIRepository{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{}, Annotations: annotations}}
		flux.LabelFluxShard(o, key)
		return o
	}

	desired := labelled("b", nil)
	flux.MoveSourceShard(desired, nil, "b", now)
	g.Expect(desired.Annotations).NotTo(HaveKey(meta.ReconcileRequestAnnotation), "a new source needs no request")
	flux.MoveSourceShard(desired, labelled("a", nil), "b", now)
	request := desired.Annotations[meta.ReconcileRequestAnnotation]
	g.Expect(request).To(Equal("shard-move/b/2026-12-02T12:00:00Z"))
	later := labelled("b", nil)
	flux.MoveSourceShard(later, labelled("b", map[string]string{meta.ReconcileRequestAnnotation: request}), "b", now.Add(time.Hour))
	g.Expect(later.Annotations).To(HaveKeyWithValue(meta.ReconcileRequestAnnotation, request), "the request stays as it was")
	other := labelled("b", nil)
	flux.MoveSourceShard(other, labelled("b", map[string]string{meta.ReconcileRequestAnnotation: "by-hand"}), "b", now)
	g.Expect(other.Annotations).NotTo(HaveKey(meta.ReconcileRequestAnnotation), "someone else's request is not the provider's")

	repo := labelled("b", nil)
	hr := labelled("b", nil)
	flux.HoldReleaseShard(hr, labelled("a", nil), repo, "b", now)
	g.Expect(hr.Labels).To(HaveKeyWithValue(v1alpha1.LabelFluxShard, "a"), "held on its shard while the source's new shard has not answered")
	repo.Status.LastHandledReconcileAt = request
	hr = labelled("b", nil)
	wait, _ := flux.HoldReleaseShard(hr, labelled("a", nil), repo, "b", now)
	g.Expect(hr.Labels).To(HaveKeyWithValue(v1alpha1.LabelFluxShard, "a"), "held while the source's new shard has no artifact (its fetch failed)")
	g.Expect(wait).To(ContainSubstring("to store the chart"))
	repo.Status.Artifact = &meta.Artifact{Revision: "0.9.3@sha256:0123"}
	hr = labelled("b", nil)
	wait, _ = flux.HoldReleaseShard(hr, labelled("a", nil), repo, "b", now)
	g.Expect(wait).To(BeEmpty())
	g.Expect(hr.Labels).To(HaveKeyWithValue(v1alpha1.LabelFluxShard, "b"))
	unsharded := labelled("", nil)
	flux.HoldReleaseShard(unsharded, labelled("", nil), repo, "", now)
	g.Expect(unsharded.Labels).NotTo(HaveKey(v1alpha1.LabelFluxShard))
	toShard := labelled("c", nil)
	flux.HoldReleaseShard(toShard, labelled("", nil), repo, "c", now)
	g.Expect(toShard.Labels).NotTo(HaveKey(v1alpha1.LabelFluxShard), "held on the unsharded controllers")
}

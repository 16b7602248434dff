package controllers

import (
	"strings"
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/providers/sharding"
)

// Flux's own sharding (spec.fluxShards): each Kro's OCIRepository and HelmRelease carry
// Flux's label sharding.fluxcd.io/key, so that one source-controller and helm-controller
// pair per key reconciles them, and neither Flux controller is the ceiling at many
// ControlPlanes. The key is the rendezvous owner of the Kro's ControlPlane among the keys
// (providers/sharding, the hash the provider's own replicas share work by): adding a key
// moves only about 1/n of the Kros to it, removing one moves only its own. A moved Kro's
// objects change only their label; the new shard's helm-controller finds the release
// installed as the HelmRelease's status records it, and does not install it again.
//
// A move goes source first. The OCIRepository is relabelled with a reconcile request
// (Flux's reconcile.fluxcd.io/requestedAt, "shard-move/<key>/<time>"), and the
// HelmRelease keeps its old key until the new shard's source-controller has handled that
// request (status.lastHandledReconcileAt): a helm-controller of the new shard that saw
// the HelmRelease first would find the source without an artifact of its own and wait
// out its dependency requeue (30 s), with the Kro not Ready meanwhile.

// shardMovePrefix starts the reconcile request of a move to key.
func shardMovePrefix(key string) string { return "shard-move/" + key + "/" }

// moveSourceShard asks, in desired, the source's new shard to reconcile it when its
// key changes, and keeps a request made before (so that it is handled even when the
// new shard comes up later). current is the OCIRepository as it is, or nil.
func moveSourceShard(desired, current client.Object, key string, now time.Time) {
	if current == nil {
		return
	}
	request := current.GetAnnotations()[meta.ReconcileRequestAnnotation]
	if current.GetLabels()[v1alpha1.LabelFluxShard] != key {
		request = shardMovePrefix(key) + now.UTC().Format(time.RFC3339Nano)
	}
	if !strings.HasPrefix(request, "shard-move/") {
		return // someone else's request: not the provider's to keep
	}
	annotations := desired.GetAnnotations()
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[meta.ReconcileRequestAnnotation] = request
	desired.SetAnnotations(annotations)
}

// holdReleaseShard keeps, in desired, the HelmRelease on its current shard until the
// source's new shard has handled the move (moveSourceShard). current is the HelmRelease
// as it is, or nil.
func holdReleaseShard(desired, current client.Object, repo *sourcev1.OCIRepository, key string) {
	if current == nil || repo == nil {
		return
	}
	was := current.GetLabels()[v1alpha1.LabelFluxShard]
	if was == key || strings.HasPrefix(repo.Status.LastHandledReconcileAt, shardMovePrefix(key)) {
		return
	}
	labels := desired.GetLabels()
	if was == "" {
		delete(labels, v1alpha1.LabelFluxShard)
		return
	}
	labels[v1alpha1.LabelFluxShard] = was
}

// FluxShardOf is the Flux shard key of a Kro's Flux objects; "" without shards.
func FluxShardOf(kro client.Object, shards []string) string {
	if len(shards) == 0 {
		return ""
	}
	return sharding.Owner(kro.GetNamespace()+"/"+kro.GetName(), shards)
}

// labelFluxShard puts the shard key on a Flux object; without a key there is no label,
// and server-side apply removes one the provider set before.
func labelFluxShard(o client.Object, shard string) {
	if shard == "" {
		return
	}
	labels := o.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	labels[v1alpha1.LabelFluxShard] = shard
	o.SetLabels(labels)
}

// fluxShardCounts counts the Kros on each shard, in the order of the keys; nil without
// shards.
func fluxShardCounts(shards []string, kros []v1alpha1.Kro) []v1alpha1.FluxShardStatus {
	if len(shards) == 0 {
		return nil
	}
	out := make([]v1alpha1.FluxShardStatus, len(shards))
	at := make(map[string]int, len(shards))
	for i, k := range shards {
		out[i].Key, at[k] = k, i
	}
	for i := range kros {
		out[at[FluxShardOf(&kros[i], shards)]].Kros++
	}
	return out
}

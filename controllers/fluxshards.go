package controllers

import (
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

// fluxShardOf is the Flux shard key of a Kro's Flux objects; "" without shards.
func fluxShardOf(kro client.Object, shards []string) string {
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
		out[at[fluxShardOf(&kros[i], shards)]].Kros++
	}
	return out
}

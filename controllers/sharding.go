package controllers

import (
	"context"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/providers/controlplane"
	"github.com/openmcp-project/service-provider-kro/providers/sharding"
)

// Under --sharding, several replicas run the Kro controller, and each acts only on the
// Kros whose ControlPlane it owns (providers/sharding). A replica that does not own a
// Kro's ControlPlane neither engages it nor writes anything for the Kro: not its Flux
// objects, not its status, not its finalizer.

// owns tells whether this replica acts on the Kro of a ControlPlane; without sharding it
// acts on all.
func owns(shard *sharding.Membership, kro types.NamespacedName) bool {
	return shard == nil || shard.Owns(shardKey(kro))
}

// shardKey is what the owner of a Kro is computed from: its ControlPlane's cluster name.
func shardKey(kro types.NamespacedName) string { return string(controlplane.ClusterName(kro)) }

// shardChanges enqueues the Kros whose owner changed as this replica sees the members:
// the ones it takes over are reconciled and engaged, the ones it hands over disengaged.
func (r *kroWatches) shardChanges() source.Source {
	return source.Func(func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		self := r.Shard.Identity()
		r.Shard.Subscribe(func(before, after []string) {
			list := &v1alpha1.KroList{}
			if err := r.Onboarding.List(ctx, list); err != nil {
				ctrl.LoggerFrom(ctx).Error(err, "listing Kros after the members changed; the poll brings them back")
				return
			}
			moved := 0
			for i := range list.Items {
				key := client.ObjectKeyFromObject(&list.Items[i])
				if (sharding.Owner(shardKey(key), before) == self) != (sharding.Owner(shardKey(key), after) == self) {
					q.Add(reconcile.Request{NamespacedName: key})
					moved++
				}
			}
			ctrl.LoggerFrom(ctx).Info("members changed", "members", after, "krosMoved", moved)
		})
		return nil
	})
}

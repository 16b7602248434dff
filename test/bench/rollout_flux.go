package bench

import (
	"context"
	"fmt"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// upgradeState is an upgrade of a HelmRelease the harness plays: the generation it
// upgrades to and when it is done.
type upgradeState struct {
	generation int64
	due        time.Time
}

// upgradeDue plays helm-controller's upgrade of a HelmRelease whose spec changed (its
// Ready stands for an older generation) when h.helmUpgrade > 0: at once it sets Ready
// Unknown (Progressing) for the new generation, as helm-controller does when it takes the
// upgrade up, and only h.helmUpgrade later may the worker set Ready True; a timer queues
// the HelmRelease again then. An install (no Ready yet) is not delayed. It returns the
// HelmRelease as it is now and whether the worker should set it Ready.
func (h *harness) upgradeDue(ctx context.Context, hr *helmv2.HelmRelease) (client.Object, bool) {
	fresh := &helmv2.HelmRelease{}
	if err := h.pl.Get(ctx, client.ObjectKeyFromObject(hr), fresh); err != nil || !fresh.DeletionTimestamp.IsZero() {
		return nil, false
	}
	c := meta.FindStatusCondition(fresh.Status.Conditions, "Ready")
	if c == nil {
		return fresh, true
	}
	if c.Status == metav1.ConditionTrue && c.ObservedGeneration == fresh.Generation && fresh.Status.ObservedGeneration == fresh.Generation {
		return nil, false
	}
	key := fresh.Namespace + "/" + fresh.Name
	h.fluxMu.Lock()
	u, ok := h.upgrades[key]
	if ok && u.generation == fresh.Generation {
		h.fluxMu.Unlock()
		return fresh, !time.Now().Before(u.due)
	}
	h.upgrades[key] = upgradeState{generation: fresh.Generation, due: time.Now().Add(h.helmUpgrade)}
	h.upgraded++
	h.fluxMu.Unlock()
	_ = h.setFluxCondition(ctx, fresh.DeepCopy(), metav1.ConditionUnknown)
	time.AfterFunc(h.helmUpgrade, func() {
		if ctx.Err() == nil {
			h.playFlux(fresh, fresh.Generation, 0, nil)
		}
	})
	return nil, false
}

// upgradesPlayed is how many upgrades the harness has taken up so far.
func (h *harness) upgradesPlayed() int {
	h.fluxMu.Lock()
	defer h.fluxMu.Unlock()
	return h.upgraded
}

// upgradeFailedMessage is helm-controller's message for a release whose upgrade failed;
// the harness fails the releases of the Kros it keeps unavailable with it.
const upgradeFailedMessage = "Helm upgrade failed for release kro-system/kro with chart kro@" + chartVersion +
	": resource Deployment/kro-system/kro not ready. status: InProgress, message: Available: 0/1"

// failReleases makes the harness, as helm-controller, fail the releases of the tenant
// namespaces: their HelmRelease gets Ready False (UpgradeFailed) for its generation now,
// and every later generation fails the same way once its upgrade time is over (Ready
// Unknown meanwhile). The release history keeps the last deployed release.
func (h *harness) failReleases(ctx context.Context, tenants []string) error {
	for _, ns := range tenants {
		h.failing.Store(ns, true)
		hrs := &helmv2.HelmReleaseList{}
		if err := h.pl.List(ctx, hrs, client.InNamespace(ns)); err != nil {
			return err
		}
		if len(hrs.Items) == 0 {
			return fmt.Errorf("no HelmRelease in %s to fail", ns)
		}
		for i := range hrs.Items {
			if err := h.setFluxCondition(ctx, &hrs.Items[i], metav1.ConditionFalse); err != nil {
				return fmt.Errorf("failing HelmRelease %s/%s: %w", ns, hrs.Items[i].Name, err)
			}
		}
	}
	return nil
}

// releaseFails: obj is a HelmRelease whose release the harness fails.
func (h *harness) releaseFails(obj client.Object) bool {
	if _, ok := obj.(*helmv2.HelmRelease); !ok {
		return false
	}
	_, failing := h.failing.Load(obj.GetNamespace())
	return failing
}

// failedFor: obj is a HelmRelease the harness fails, and it already says so for its
// generation, so there is nothing to play.
func (h *harness) failedFor(obj client.Object, generation, observed int64, conds []metav1.Condition) bool {
	c := meta.FindStatusCondition(conds, "Ready")
	return h.releaseFails(obj) && c != nil && c.Status == metav1.ConditionFalse && c.Reason == helmv2.UpgradeFailedReason &&
		c.ObservedGeneration == generation && observed == generation
}

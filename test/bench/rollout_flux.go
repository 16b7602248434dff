package bench

import (
	"context"
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

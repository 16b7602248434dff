package bench

import (
	"context"
	"fmt"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

// playFlux queues a Flux object whose Ready condition does not yet stand for its
// generation; fluxWorker sets it through the status subresource, as Flux would.
func (h *harness) playFlux(obj client.Object, generation, observed int64, conds []metav1.Condition) {
	if c := meta.FindStatusCondition(conds, "Ready"); c != nil && c.Status == metav1.ConditionTrue && observed == generation && c.ObservedGeneration == generation {
		return
	}
	if !obj.GetDeletionTimestamp().IsZero() {
		return
	}
	// helm-controller leaves a suspended HelmRelease alone (the earlier provider's, once
	// the provider has taken it over).
	if hr, ok := obj.(*helmv2.HelmRelease); ok && hr.Spec.Suspend {
		return
	}
	if _, held := h.fluxHold.Load(obj.GetNamespace()); held {
		return
	}
	if h.failedFor(obj, generation, observed, conds) {
		return
	}
	key := fmt.Sprintf("%T|%s/%s", obj, obj.GetNamespace(), obj.GetName())
	h.fluxMu.Lock()
	defer h.fluxMu.Unlock()
	if h.fluxQueued[key] {
		return
	}
	h.fluxQueued[key] = true
	h.fluxQueue <- obj.DeepCopyObject().(client.Object)
}

func (h *harness) fluxWorker(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case obj := <-h.fluxQueue:
			key := fmt.Sprintf("%T|%s/%s", obj, obj.GetNamespace(), obj.GetName())
			h.fluxMu.Lock()
			delete(h.fluxQueued, key)
			h.fluxMu.Unlock()
			if hr, ok := obj.(*helmv2.HelmRelease); ok && h.helmUpgrade > 0 {
				fresh, due := h.upgradeDue(ctx, hr)
				if !due {
					continue
				}
				obj = fresh
			}
			if h.releaseFails(obj) {
				_ = h.setFluxCondition(ctx, obj, metav1.ConditionFalse)
				continue
			}
			h.setFluxReady(ctx, obj)
		}
	}
}

func (h *harness) setFluxReady(ctx context.Context, obj client.Object) {
	_ = h.setFluxCondition(ctx, obj, metav1.ConditionTrue)
}

// setFluxCondition sets the Ready condition of a Flux object as Flux does: True when
// done, Unknown (reason Progressing) while at work, False (a HelmRelease's upgrade
// failed) when the harness fails its release.
func (h *harness) setFluxCondition(ctx context.Context, obj client.Object, status metav1.ConditionStatus) error {
	var err error
	for range 10 {
		cond := metav1.Condition{Type: "Ready", Status: status, Reason: "Succeeded", ObservedGeneration: obj.GetGeneration(), LastTransitionTime: metav1.Now()}
		switch status {
		case metav1.ConditionUnknown:
			cond.Reason = "Progressing"
		case metav1.ConditionFalse:
			cond.Reason = helmv2.UpgradeFailedReason
		}
		kind := ""
		switch o := obj.(type) {
		case *sourcev1.OCIRepository:
			cond.Message = "stored artifact for digest 'sha256:bench'"
			o.Status.ObservedGeneration = o.Generation
			meta.SetStatusCondition(&o.Status.Conditions, cond)
			if h.artifact != nil && status == metav1.ConditionTrue {
				a := h.artifact.DeepCopy()
				a.LastUpdateTime = metav1.Now()
				o.Status.Artifact = a
				cond.Message = "stored artifact for digest '" + a.Digest + "'"
				meta.SetStatusCondition(&o.Status.Conditions, cond)
			}
			kind = "oci"
		case *helmv2.HelmRelease:
			cond.Message = "Helm install succeeded for release kro-system/kro.v1 with chart kro@" + chartVersion
			if status == metav1.ConditionFalse {
				cond.Message = upgradeFailedMessage
			}
			o.Status.ObservedGeneration = o.Generation
			meta.SetStatusCondition(&o.Status.Conditions, cond)
			testenv.RecordRelease(o, chartVersion, status == metav1.ConditionTrue)
			kind = "hr"
		}
		// Flux's Ready is the moment the status write starts; the provider can only see it later.
		at := time.Now()
		err = h.pl.Status().Update(ctx, obj)
		if err == nil {
			if status == metav1.ConditionTrue {
				h.tr.mark("fluxready-"+kind+"|"+obj.GetNamespace(), at)
			}
			return nil
		}
		if !apierrors.IsConflict(err) {
			return err
		}
		fresh := obj.DeepCopyObject().(client.Object)
		if err := h.pl.Get(ctx, client.ObjectKeyFromObject(obj), fresh); err != nil {
			return err
		}
		obj = fresh
	}
	return err
}

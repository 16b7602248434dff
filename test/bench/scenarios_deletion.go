package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

// Run's blocked deletions: a dedicated Kro's deletion blocked by the last RGD
// or by the last instance of a kind kro generated, timed from its removal until the Kro
// is gone.

// blocker puts something on a dedicated Kro's ControlPlane that blocks the Kro's
// deletion, and returns what removes it again.
type blocker func(ctx context.Context, c client.Client, k *kroRef, repeat int) (unblock func() error, err error)

// blockedDeletion times, Repeats times for each dedicated Kro, from the removal of what
// blocks its deletion until the Kro is gone: block, delete the Kro, wait until the
// deletion is blocked (the tracker key blockedKey), unblock, wait until it is gone, then
// create the Kro again.
func (h *harness) blockedDeletion(ctx context.Context, ded []*kroRef, blockedKey string, block blocker) (Dist, error) {
	var mu sync.Mutex
	var ds []time.Duration
	err := h.parallel(ded, func(k *kroRef) error {
		c := h.ded[k.dedicated]
		for r := range h.cfg.Repeats {
			unblock, err := block(ctx, c, k, r)
			if err != nil {
				return err
			}
			if err := h.ob.Delete(ctx, k.object()); err != nil {
				return err
			}
			if _, err := h.tr.wait(ctx, []string{blockedKey + "|" + string(k.uid)}, "the deletion to be blocked"); err != nil {
				return err
			}
			start := time.Now()
			if err := unblock(); err != nil {
				return err
			}
			seen, err := h.tr.wait(ctx, []string{"gone|" + string(k.uid)}, "the Kro to be gone")
			if err != nil {
				return err
			}
			mu.Lock()
			ds = append(ds, seen["gone|"+string(k.uid)].Sub(start))
			mu.Unlock()
			if err := h.createKro(ctx, k); err != nil {
				return err
			}
			if _, err := h.tr.wait(ctx, []string{"ready|" + string(k.uid)}, "the Kro to be Ready again"); err != nil {
				return err
			}
		}
		return nil
	})
	return Summarize(ds), err
}

// rgdDeletion: the last RGD deleted releases a blocked deletion (the RGDs are watched).
func (h *harness) rgdDeletion(ctx context.Context, ded []*kroRef) (Dist, error) {
	return h.blockedDeletion(ctx, ded, "blocked", func(ctx context.Context, c client.Client, k *kroRef, r int) (func() error, error) {
		u := rgd(fmt.Sprintf("bench-%d-%d", k.dedicated+1, r))
		if err := c.Create(ctx, u); err != nil {
			return nil, fmt.Errorf("creating RGD: %w", err)
		}
		if _, err := h.tr.wait(ctx, []string{"rgds|" + string(k.uid)}, "the Kro to count the RGD"); err != nil {
			return nil, err
		}
		return func() error { return c.Delete(ctx, u) }, nil
	})
}

// instanceDeletion: the last instance of a kind kro generated, whose RGD is gone (kro
// keeps such CRDs and instances), deleted releases a blocked deletion. Instances are not
// watched: the provider rechecks a deletion they block.
func (h *harness) instanceDeletion(ctx context.Context, ded []*kroRef) (Dist, error) {
	return h.blockedDeletion(ctx, ded, "blocked-by-instances", func(ctx context.Context, c client.Client, k *kroRef, r int) (func() error, error) {
		crd, u := testenv.KroGeneratedCRD(fmt.Sprintf("benchapps%d", k.dedicated+1), fmt.Sprintf("BenchApp%d", k.dedicated+1), fmt.Sprintf("bench-app-%d", k.dedicated+1))
		if err := c.Create(ctx, crd); client.IgnoreAlreadyExists(err) != nil {
			return nil, fmt.Errorf("creating CRD %s: %w", crd.Name, err)
		}
		u.SetName(fmt.Sprintf("bench-%d", r))
		// The new kind is served a moment after its CRD is created.
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			err := c.Create(ctx, u)
			return err == nil, client.IgnoreNotFound(ignoreNoMatch(err))
		}); err != nil {
			return nil, fmt.Errorf("creating %s %s: %w", u.GetKind(), u.GetName(), err)
		}
		return func() error { return c.Delete(ctx, u) }, nil
	})
}

// ignoreNoMatch treats a kind the API server does not serve yet (a CRD just created) as
// a reason to try again.
func ignoreNoMatch(err error) error {
	if meta.IsNoMatchError(err) {
		return nil
	}
	return err
}

package step

import (
	"context"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilwait "k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
)

// CacheCatchUp bounds how long a reconcile waits for the cache to show its own writes.
var CacheCatchUp = 5 * time.Second

// WriteTracker remembers the resourceVersions of a Kro that a reconcile's writes made
// stale: the one it read, and each one it replaced since.
type WriteTracker struct {
	stale []string
}

// Before is called right before a write to the Kro (metadata or status).
func (w *WriteTracker) Before(kro *v1alpha1.Kro) {
	if rv := kro.ResourceVersion; rv != "" && !slices.Contains(w.stale, rv) {
		w.stale = append(w.stale, rv)
	}
}

// WaitForCache waits until the cache no longer holds a version of the Kro that this
// reconcile's writes replaced (or the Kro is gone), at most cacheCatchUp.
//
// The next reconcile of a Kro starts only after this one returns, and reads the Kro from
// the cache. Without the wait it could read the Kro as it was before this reconcile's
// status write, find its own result already "there" (the status is written only when it
// differs from what was read) and skip a change that is needed, e.g. Ready=True right
// after a reconcile wrote Ready=False. Status writes do not trigger reconciles, so nothing
// would correct it before the poll interval. Informers apply events in order, so a
// version outside the stale ones is this reconcile's last write or newer.
func WaitForCache(ctx context.Context, c client.Reader, key client.ObjectKey, w *WriteTracker) {
	if len(w.stale) == 0 {
		return
	}
	err := utilwait.PollUntilContextTimeout(ctx, 2*time.Millisecond, CacheCatchUp, true, func(ctx context.Context) (bool, error) {
		kro := &v1alpha1.Kro{}
		if err := c.Get(ctx, key, kro); err != nil {
			return apierrors.IsNotFound(err), nil
		}
		return !slices.Contains(w.stale, kro.ResourceVersion), nil
	})
	if err != nil && ctx.Err() == nil {
		log.FromContext(ctx).Info("the cache did not show this reconcile's writes in time", "waited", CacheCatchUp)
	}
}

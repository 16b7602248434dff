package bench

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/clusters"
)

// The Kro writes of the sharded run, attributed to the replica whose field manager made
// them, for the double-ownership report (sharded_views.go).

// watchKroWrites attributes every change of a Kro to the replica whose field manager's
// entry changed with it.
func (s *shardHarness) watchKroWrites(ctx context.Context) error {
	c, err := cache.New(fast(s.onboarding.Config), cache.Options{Scheme: clusters.Scheme})
	if err != nil {
		return err
	}
	inf, err := c.GetInformer(ctx, &v1alpha1.Kro{})
	if err != nil {
		return err
	}
	prefix := "service-provider-" + providerName + "."
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{UpdateFunc: func(o, n any) {
		at := time.Now()
		before, after := o.(*v1alpha1.Kro), n.(*v1alpha1.Kro)
		if before.ResourceVersion == after.ResourceVersion {
			return
		}
		for _, w := range changedManagers(before.ManagedFields, after.ManagedFields) {
			if id, ok := strings.CutPrefix(w, prefix); ok {
				s.mu.Lock()
				s.writes = append(s.writes, kroWrite{at: at, replica: id, kro: after.Namespace + "/" + after.Name})
				s.mu.Unlock()
			}
		}
	}}); err != nil {
		return err
	}
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		return fmt.Errorf("the Kro write watch did not sync")
	}
	return nil
}

// changedManagers are the field managers that wrote: the API server stamps the time of
// the manager that made a change, so an entry that is new or has a new time is a write
// by its manager. An entry that only lost fields was changed by another. Only when no
// time changed (two writes by one manager within a second) does a changed entry count.
func changedManagers(before, after []metav1.ManagedFieldsEntry) []string {
	key := func(e metav1.ManagedFieldsEntry) string {
		return e.Manager + "|" + e.Subresource + "|" + string(e.Operation)
	}
	old := map[string]metav1.ManagedFieldsEntry{}
	for _, e := range before {
		old[key(e)] = e
	}
	var stamped, changed []string
	for _, e := range after {
		o, ok := old[key(e)]
		switch {
		case !ok || !o.Time.Equal(e.Time):
			if !slices.Contains(stamped, e.Manager) {
				stamped = append(stamped, e.Manager)
			}
		case rawFields(o.FieldsV1) != rawFields(e.FieldsV1) && len(rawFields(e.FieldsV1)) > len(rawFields(o.FieldsV1)):
			if !slices.Contains(changed, e.Manager) {
				changed = append(changed, e.Manager)
			}
		}
	}
	if len(stamped) > 0 {
		return stamped
	}
	return changed
}

func rawFields(f *metav1.FieldsV1) string {
	if f == nil {
		return ""
	}
	return f.GetRawString()
}

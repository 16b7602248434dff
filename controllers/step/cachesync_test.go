package step_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/step"
)

// laggingReader serves the Kro's resourceVersions one Get after the other, the last one
// from then on; an empty one means the Kro is gone.
type laggingReader struct {
	versions []string
	gets     atomic.Int32
}

func (l *laggingReader) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	i := min(int(l.gets.Add(1))-1, len(l.versions)-1)
	if l.versions[i] == "" {
		return apierrors.NewNotFound(schema.GroupResource{Resource: "kroes"}, key.Name)
	}
	obj.(*v1alpha1.Kro).ResourceVersion = l.versions[i]
	return nil
}

func (l *laggingReader) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return nil
}

func TestWaitForCache(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	key := client.ObjectKey{Namespace: "ns", Name: "k"}
	wrote := func(rvs ...string) *step.WriteTracker {
		w := &step.WriteTracker{}
		for _, rv := range rvs {
			w.Before(&v1alpha1.Kro{}) // not yet created: nothing to remember
			w.Before(&v1alpha1.Kro{ObjectMeta: metav1.ObjectMeta{ResourceVersion: rv}})
		}
		return w
	}

	// Read at 10, finalizer patch made 11, status patch made 12: waits past 10 and 11.
	r := &laggingReader{versions: []string{"10", "10", "11", "11", "12"}}
	step.WaitForCache(ctx, r, key, wrote("10", "11"))
	g.Expect(r.gets.Load()).To(BeEquivalentTo(5))

	// Someone else's newer version counts as caught up, too.
	r = &laggingReader{versions: []string{"10", "13"}}
	step.WaitForCache(ctx, r, key, wrote("10"))
	g.Expect(r.gets.Load()).To(BeEquivalentTo(2))

	// Gone (the finalizer was the last): nothing to wait for.
	r = &laggingReader{versions: []string{""}}
	step.WaitForCache(ctx, r, key, wrote("10"))
	g.Expect(r.gets.Load()).To(BeEquivalentTo(1))

	// No writes: no reads.
	r = &laggingReader{versions: []string{"10"}}
	step.WaitForCache(ctx, r, key, &step.WriteTracker{})
	g.Expect(r.gets.Load()).To(BeZero())

	// A cache that never catches up is given up on after cacheCatchUp.
	defer func(d time.Duration) { step.CacheCatchUp = d }(step.CacheCatchUp)
	step.CacheCatchUp = 50 * time.Millisecond
	r = &laggingReader{versions: []string{"10"}}
	start := time.Now()
	step.WaitForCache(ctx, r, key, wrote("10"))
	g.Expect(time.Since(start)).To(BeNumerically(">=", step.CacheCatchUp))
}

package controlplane_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"

	"github.com/openmcp-project/service-provider-kro/providers/controlplane"
)

// BenchmarkEngagedControlPlaneMemory engages n ControlPlanes (each its own cluster with
// its own cache, all served by one API server with kro's CRD) and reports the heap they
// hold, per ControlPlane. Run: go test ./providers/controlplane -run '^$' -bench Memory
func BenchmarkEngagedControlPlaneMemory(b *testing.B) {
	withProvider(b)
	for _, n := range []int{10, 50} {
		b.Run(fmt.Sprintf("controlplanes=%d", n), func(b *testing.B) {
			for range b.N {
				perCP := engageAndMeasure(b, n)
				b.ReportMetric(perCP, "MiB/controlplane")
			}
		})
	}
}

func heapInUse() uint64 {
	var ms runtime.MemStats
	for range 3 {
		runtime.GC()
	}
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

func engageAndMeasure(b *testing.B, n int) float64 {
	g := NewWithT(b)
	names := make([]multicluster.ClusterName, n)
	for i := range names {
		names[i] = controlplane.ClusterName(types.NamespacedName{Namespace: "bench", Name: fmt.Sprintf("cp-%d", i)})
	}
	before := heapInUse()
	for _, name := range names {
		_, err := provider.Ensure(name, cpA.Kubeconfig)
		g.Expect(err).NotTo(HaveOccurred())
	}
	for _, name := range names {
		g.Eventually(func() bool {
			cl, err := provider.Get(context.Background(), name)
			return err == nil && events.KindWatch(name, cl) == controlplane.KindWatching
		}).WithTimeout(time.Minute).Should(BeTrue())
	}
	after := heapInUse()
	for _, name := range names {
		provider.Remove(context.Background(), name)
	}
	return float64(after-before) / float64(n) / (1 << 20)
}

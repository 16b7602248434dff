package controllers

import (
	"context"
	"flag"
	"fmt"
	"runtime"
	"runtime/metrics"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmcp-project/service-provider-kro/clusters"
	"github.com/openmcp-project/service-provider-kro/controllers/guard"
	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

// The size of what a tenant has made for BenchmarkBoundedReads: small by default, so
// that the benchmark keeps working; the figures are 5000 instances of 100 KiB.
var (
	boundedInstances = flag.Int("bounded.instances", 200, "BenchmarkBoundedReads: instances of the generated kind")
	boundedSize      = flag.Int("bounded.size", 10<<10, "BenchmarkBoundedReads: bytes of each instance's spec")
)

// BenchmarkBoundedReads measures what the provider's two reads of a tenant's kinds cost
// on its side, against a ControlPlane of its own (a real API server): one pass of the
// deletion guard (instancesOf, every few seconds while a deletion is blocked) and one
// health read (readKroHealth, every reconcile of a Kro under a rollout). First on a
// ControlPlane with one generated kind (of a 256 KiB schema) and no instances, then with
// -bounded.instances instances of -bounded.size bytes each. Per read: the heap allocated,
// the highest heap in use above what it was before (sampled every millisecond), the
// requests and the bytes received.
//
//	KUBEBUILDER_ASSETS=... go test ./controllers -run '^$' -bench BoundedReads -benchtime 1x \
//	  -bounded.instances 5000 -bounded.size 102400 -timeout 60m
func BenchmarkBoundedReads(b *testing.B) {
	g := NewWithT(b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cs, err := testenv.StartClusters(ctx, testenv.ClusterOptions{Name: "bounded-reads"})
	g.Expect(err).NotTo(HaveOccurred())
	b.Cleanup(func() { testenv.StopClusters(cs...) })
	cfg := rest.CopyConfig(cs[0].Config)
	cfg.QPS, cfg.Burst = 1000, 1000
	c, err := client.New(cfg, client.Options{Scheme: clusters.Scheme})
	g.Expect(err).NotTo(HaveOccurred())
	instance, _ := largeKroKind(b, g, c, "Tenanted", "tenanted", boundedKindSchema)
	ns := namespaceOn(b, g, c)
	cl, log := countedCluster(b, g, cs[0].Config)

	reads := func(b *testing.B, want int) {
		b.Run("guard", func(b *testing.B) {
			measureRead(b, log, func() {
				counts, err := guard.InstancesOf(ctx, cl)
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(guard.TotalInstances(counts)).To(Equal(want))
			})
		})
		b.Run("health", func(b *testing.B) {
			measureRead(b, log, func() {
				h, err := guard.ReadKroHealth(ctx, cl, "rev", time.Now())
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(h.Instances.Total).To(BeEquivalentTo(want))
			})
		})
	}
	b.Run("instances=0", func(b *testing.B) { reads(b, 0) })
	start := time.Now()
	createInstances(b, g, c, instance, ns, *boundedInstances, *boundedSize, func(i int) bool { return i%10 != 0 })
	b.Logf("created %d instances of %d bytes in %s", *boundedInstances, *boundedSize, time.Since(start).Round(time.Second))
	b.Run(fmt.Sprintf("instances=%dx%dKiB", *boundedInstances, *boundedSize>>10), func(b *testing.B) { reads(b, *boundedInstances) })
}

// measureRead runs read b.N times and reports its cost per run.
func measureRead(b *testing.B, log *requestLog, read func()) {
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	base := heapObjects()
	log.take()
	peak := newPeakSampler(base)
	b.ResetTimer()
	for range b.N {
		read()
	}
	b.StopTimer()
	high := peak.stop()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	var received int64
	reqs := log.take()
	for _, r := range reqs {
		received += r.bytes.Load()
	}
	n := float64(b.N)
	b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/n/(1<<20), "MiB-alloc/op")
	b.ReportMetric(float64(high)/(1<<20), "MiB-peak-inuse")
	b.ReportMetric(float64(len(reqs))/n, "requests/op")
	b.ReportMetric(float64(received)/n/(1<<20), "MiB-received/op")
}

// heapObjects is the heap held by objects, read without stopping the world.
func heapObjects() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// peakSampler follows the highest heap held by objects above a base.
type peakSampler struct {
	done chan struct{}
	wg   sync.WaitGroup
	high uint64
}

func newPeakSampler(base uint64) *peakSampler {
	p := &peakSampler{done: make(chan struct{})}
	p.wg.Go(func() {
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			if h := heapObjects(); h > base && h-base > p.high {
				p.high = h - base
			}
			select {
			case <-p.done:
				return
			case <-t.C:
			}
		}
	})
	return p
}

func (p *peakSampler) stop() uint64 {
	close(p.done)
	p.wg.Wait()
	return p.high
}

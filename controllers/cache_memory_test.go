package controllers

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/clusters"
	"github.com/openmcp-project/service-provider-kro/controllers/owned"
)

// sharedCacheKros is how many Ready Kros BenchmarkSharedCacheMemory fills the caches
// with, once.
const sharedCacheKros = 100

var sharedCacheOnce sync.Once

// BenchmarkSharedCacheMemory measures the heap of what every replica caches per Kro,
// however the ControlPlanes are sharded: the Kro (onboarding cache) and its Flux objects
// and secret copies (platform cache), with the caches' options as the provider runs
// them, and without the managedFields transform for comparison. The Kros are made Ready
// by the provider with Flux played (a played status is smaller than Flux's own).
//
//	KUBEBUILDER_ASSETS=... go test ./controllers -run '^$' -bench SharedCacheMemory -benchtime 1x -count 3
func BenchmarkSharedCacheMemory(b *testing.B) {
	g := withClusters(b)
	sharedCacheOnce.Do(func() {
		ns := uniq("shared-cache")
		g.Expect(onboarding.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
		for i := range sharedCacheKros {
			readyKro(b, g, ns, fmt.Sprintf("kro-%02d", i), baseVersion)
		}
	})
	full := PlatformCacheOptions(podNamespace)
	full.DefaultTransform = nil
	for _, v := range []struct {
		name                 string
		onboarding, platform cache.Options
	}{
		{"compact", owned.OnboardingCacheOptions(), PlatformCacheOptions(podNamespace)},
		{"full", cache.Options{}, full},
	} {
		b.Run(v.name, func(b *testing.B) {
			for range b.N {
				b.ReportMetric(sharedCacheHeapPerKro(b, g, v.onboarding, v.platform), "MiB/Kro")
			}
		})
	}
}

// sharedCacheHeapPerKro starts an onboarding and a platform cache with the Kros and
// Flux objects in them and returns the heap they hold per Kro.
func sharedCacheHeapPerKro(b *testing.B, g Gomega, onboardingOpts, platformOpts cache.Options) float64 {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	before := settledHeap()
	onboardingOpts.Scheme = clusters.Scheme
	ob, err := cache.New(onboarding.Config, onboardingOpts)
	g.Expect(err).NotTo(HaveOccurred())
	go func() { _ = ob.Start(ctx) }()
	pf := startCache(b, g, ctx, platformOpts)
	// Informers start when a kind is first read, as the reconciler's watches do.
	kros := &v1alpha1.KroList{}
	g.Expect(ob.List(ctx, kros)).To(Succeed())
	for _, list := range []client.ObjectList{&corev1.SecretList{}, &sourcev1.OCIRepositoryList{}, &helmv2.HelmReleaseList{}} {
		g.Expect(pf.List(ctx, list)).To(Succeed())
	}
	after := settledHeap()
	runtime.KeepAlive(ob)
	runtime.KeepAlive(pf)
	g.Expect(len(kros.Items)).To(BeNumerically(">=", sharedCacheKros))
	return float64(after-before) / (1 << 20) / float64(len(kros.Items))
}

// settledHeap is the heap in use after two collections.
func settledHeap() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

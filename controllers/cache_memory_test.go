package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/clusters"
)

// The caches keep of managedFields only which other managers wrote an object's spec: the
// drift check (specWrittenByOthers) tells the same from a cached object as from the API
// server, with a fraction of the bytes.
func TestCompactManagedFields(t *testing.T) {
	g := withClusters(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := startCache(t, g, ctx, PlatformCacheOptions(podNamespace))

	ns := uniq("managed-fields")
	g.Expect(platform.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
	repo := &sourcev1.OCIRepository{
		TypeMeta:   metav1.TypeMeta{APIVersion: sourcev1.GroupVersion.String(), Kind: sourcev1.OCIRepositoryKind},
		ObjectMeta: metav1.ObjectMeta{Name: "kro", Namespace: ns, Labels: map[string]string{v1alpha1.LabelManagedBy: v1alpha1.ManagedByValue}},
		Spec: sourcev1.OCIRepositorySpec{URL: "oci://example.com/charts/kro", Interval: metav1.Duration{Duration: 10 * time.Minute},
			Reference: &sourcev1.OCIRepositoryRef{Tag: "0.9.4"}},
	}
	g.Expect(platform.Client.Patch(ctx, repo, client.Apply, clusters.FieldOwner, client.ForceOwnership)).To(Succeed())
	fluxReady(g, repo, metav1.ConditionTrue, "stored artifact")

	live := &sourcev1.OCIRepository{}
	cached := &sourcev1.OCIRepository{}
	g.Eventually(func(g Gomega) {
		g.Expect(platform.Client.Get(ctx, client.ObjectKeyFromObject(repo), live)).To(Succeed())
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(repo), cached)).To(Succeed())
		g.Expect(cached.Status.Conditions).NotTo(BeEmpty())
	}, timeout, interval).Should(Succeed())
	g.Expect(live.ManagedFields).To(HaveLen(2), "the provider's apply and the status writer")
	g.Expect(cached.ManagedFields).To(BeEmpty(), "neither is anyone else's spec")
	g.Expect(specWrittenByOthers(cached)).To(BeFalse())

	// Someone edits the spec by hand.
	edited := live.DeepCopy()
	edited.Spec.Interval = metav1.Duration{Duration: 5 * time.Minute}
	g.Expect(platform.Client.Patch(ctx, edited, client.MergeFrom(live), client.FieldOwner("kubectl-edit"))).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(platform.Client.Get(ctx, client.ObjectKeyFromObject(repo), live)).To(Succeed())
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(repo), cached)).To(Succeed())
		g.Expect(cached.Spec.Interval.Duration).To(Equal(5 * time.Minute))
	}, timeout, interval).Should(Succeed())
	g.Expect(specWrittenByOthers(live)).To(BeTrue())
	g.Expect(specWrittenByOthers(cached)).To(BeTrue(), "the cache still tells who else wrote the spec")
	g.Expect(cached.ManagedFields).To(HaveLen(1))
	g.Expect(cached.ManagedFields[0].Manager).To(Equal("kubectl-edit"))
	full, err := json.Marshal(live.ManagedFields)
	g.Expect(err).NotTo(HaveOccurred())
	compact, err := json.Marshal(cached.ManagedFields)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(len(compact)).To(BeNumerically("<", len(full)/4), "%s", compact)
}

// startCache starts a cache of the platform cluster with opts and waits for it.
func startCache(t testing.TB, g Gomega, ctx context.Context, opts cache.Options) cache.Cache {
	t.Helper()
	opts.Scheme = clusters.Scheme
	c, err := cache.New(platform.Config, opts)
	g.Expect(err).NotTo(HaveOccurred())
	go func() { _ = c.Start(ctx) }()
	g.Expect(c.WaitForCacheSync(ctx)).To(BeTrue())
	return c
}

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
		{"compact", OnboardingCacheOptions(), PlatformCacheOptions(podNamespace)},
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

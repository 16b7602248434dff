package controllers

import (
	"context"
	"encoding/json"
	"testing"
	"time"

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

// The platform cache holds the provider's own namespace and its own copies, not every
// secret of the platform.
func TestPlatformCacheHoldsOnlyWhatTheProviderNeeds(t *testing.T) {
	g := withClusters(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := startCache(t, g, ctx, PlatformCacheOptions(podNamespace))

	other := uniq("other")
	g.Expect(platform.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: other}})).To(Succeed())
	foreign := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "foreign", Namespace: other}}
	ours := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "ours", Namespace: other, Labels: map[string]string{v1alpha1.LabelManagedBy: v1alpha1.ManagedByValue}}}
	source := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: uniq("source"), Namespace: podNamespace}}
	for _, s := range []*corev1.Secret{foreign, ours, source} {
		g.Expect(platform.Client.Create(ctx, s)).To(Succeed())
	}
	names := func(g Gomega, ns string) []string {
		list := &corev1.SecretList{}
		g.Expect(c.List(ctx, list, client.InNamespace(ns))).To(Succeed())
		var out []string
		for _, s := range list.Items {
			out = append(out, s.Name)
		}
		return out
	}
	g.Eventually(func(g Gomega) {
		g.Expect(names(g, other)).To(ConsistOf("ours"))
		g.Expect(names(g, podNamespace)).To(ContainElement(source.Name))
	}, timeout, interval).Should(Succeed())
}

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
	//nolint:staticcheck // client.Apply with typed objects, as the provider applies Flux kinds (pullsecrets.go).
	g.Expect(platform.Client.Patch(ctx, repo, client.Apply, clusters.FieldOwner, client.ForceOwnership)).To(Succeed())
	fluxReady(g, repo, metav1.ConditionTrue, "stored artifact")

	live := &sourcev1.OCIRepository{}
	cached := &sourcev1.OCIRepository{}
	// readBoth reads the object from the API server into live and from the cache into cached.
	readBoth := func(g Gomega) {
		g.Expect(platform.Client.Get(ctx, client.ObjectKeyFromObject(repo), live)).To(Succeed())
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(repo), cached)).To(Succeed())
	}
	g.Eventually(func(g Gomega) {
		readBoth(g)
		g.Expect(cached.Status.Conditions).NotTo(BeEmpty())
	}, timeout, interval).Should(Succeed())
	g.Expect(live.ManagedFields).To(HaveLen(2), "the provider's apply and the status writer")
	g.Expect(cached.ManagedFields).To(BeEmpty(), "neither is anyone else's spec")
	g.Expect(owned.WrittenByOthers(cached)).To(BeFalse())

	// Someone edits the spec by hand.
	edited := live.DeepCopy()
	edited.Spec.Interval = metav1.Duration{Duration: 5 * time.Minute}
	g.Expect(platform.Client.Patch(ctx, edited, client.MergeFrom(live), client.FieldOwner("kubectl-edit"))).To(Succeed())
	g.Eventually(func(g Gomega) {
		readBoth(g)
		g.Expect(cached.Spec.Interval.Duration).To(Equal(5 * time.Minute))
	}, timeout, interval).Should(Succeed())
	g.Expect(owned.WrittenByOthers(live)).To(BeTrue())
	g.Expect(owned.WrittenByOthers(cached)).To(BeTrue(), "the cache still tells who else wrote the spec")
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

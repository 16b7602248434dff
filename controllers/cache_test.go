package controllers

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/clusters"
)

// The platform cache holds the provider's own namespace and its own copies, not every
// secret of the platform.
func TestPlatformCacheHoldsOnlyWhatTheProviderNeeds(t *testing.T) {
	g := withClusters(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	opts := PlatformCacheOptions(podNamespace)
	opts.Scheme = clusters.Scheme
	c, err := cache.New(platform.Config, opts)
	g.Expect(err).NotTo(HaveOccurred())
	go func() { _ = c.Start(ctx) }()
	g.Expect(c.WaitForCacheSync(ctx)).To(BeTrue())

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

package controllers

import (
	"context"
	"testing"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
)

// The provider's own writes do not wake a Kro up; what someone else changes does.
func TestWakeUps(t *testing.T) {
	g := NewWithT(t)
	hr := &helmv2.HelmRelease{ObjectMeta: metav1.ObjectMeta{Name: "kro", Namespace: "tenant", Generation: 1}}
	with := func(change func(*helmv2.HelmRelease)) *helmv2.HelmRelease {
		n := hr.DeepCopy()
		change(n)
		return n
	}
	flux := fluxChanged{}
	g.Expect(flux.Create(event.CreateEvent{Object: hr})).To(BeFalse(), "the provider created it")
	g.Expect(flux.Update(event.UpdateEvent{ObjectOld: hr, ObjectNew: with(func(n *helmv2.HelmRelease) {
		n.Finalizers = []string{"finalizers.fluxcd.io"}
		n.ResourceVersion = "2"
	})})).To(BeFalse(), "Flux's finalizer")
	for what, change := range map[string]func(*helmv2.HelmRelease){
		"spec":   func(n *helmv2.HelmRelease) { n.Generation = 2 },
		"status": func(n *helmv2.HelmRelease) { n.Status.ObservedGeneration = 1 },
		"label":  func(n *helmv2.HelmRelease) { n.Labels = map[string]string{v1alpha1.LabelFluxShard: "a"} },
		"annotation": func(n *helmv2.HelmRelease) {
			n.Annotations = map[string]string{"reconcile.fluxcd.io/requestedAt": "now"}
		},
		"deletion": func(n *helmv2.HelmRelease) { n.DeletionTimestamp = &metav1.Time{Time: time.Now()} },
	} {
		g.Expect(flux.Update(event.UpdateEvent{ObjectOld: hr, ObjectNew: with(change)})).To(BeTrue(), what)
	}
	g.Expect(flux.Delete(event.DeleteEvent{Object: hr})).To(BeTrue())

	kro := &v1alpha1.Kro{ObjectMeta: metav1.ObjectMeta{Name: "k", Namespace: "team"}}
	finalized := kro.DeepCopy()
	finalized.Finalizers = []string{v1alpha1.Finalizer}
	g.Expect(kroChanged{}.Update(event.UpdateEvent{ObjectOld: kro, ObjectNew: finalized})).To(BeFalse(), "the finalizer the reconcile adds")
	g.Expect(kroChanged{}.Update(event.UpdateEvent{ObjectOld: finalized, ObjectNew: kro})).To(BeTrue(), "the finalizer taken away")

	copies := copyChanged(podNamespace)
	g.Expect(copies.Create(event.CreateEvent{Object: &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "copy", Namespace: "tenant"}}})).To(BeFalse(), "a copy the provider made")
	g.Expect(copies.Create(event.CreateEvent{Object: &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "source", Namespace: podNamespace}}})).To(BeTrue(), "a source secret appears")
	g.Expect(copies.Delete(event.DeleteEvent{Object: &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "copy", Namespace: "tenant"}}})).To(BeTrue(), "a copy deleted")
}

// A burst of Kro changes brings the ProviderConfig back once.
func TestProviderConfigSettles(t *testing.T) {
	g := NewWithT(t)
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer q.ShutDown()
	h := (&ProviderConfigReconciler{ProviderName: providerName}).settled()
	ctx := context.Background()
	for range 50 {
		h.Update(ctx, event.UpdateEvent{ObjectOld: &v1alpha1.Kro{}, ObjectNew: &v1alpha1.Kro{}}, q)
	}
	h.Create(ctx, event.CreateEvent{Object: &v1alpha1.Kro{}}, q)
	g.Eventually(q.Len).WithTimeout(10 * time.Second).Should(Equal(1))
	req, _ := q.Get()
	g.Expect(req.Name).To(Equal(providerName))
	q.Done(req)
	g.Consistently(q.Len).WithTimeout(time.Second).Should(BeZero(), "the 51 changes are one reconcile")
}

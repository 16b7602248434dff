package bench

import (
	"context"
	"fmt"
	"strings"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/clusters"
	"github.com/openmcp-project/service-provider-kro/controllers/owned"
)

type handlers struct {
	add    func(obj any, at time.Time)
	update func(obj any, at time.Time)
	del    func(obj any, at time.Time)
}

func (h *harness) watch(ctx context.Context, c cache.Cache, cluster string, obj client.Object, hs handlers) error {
	kind := fmt.Sprintf("%s %T", cluster, obj)
	kind = kind[:strings.LastIndex(kind, " ")+1] + kind[strings.LastIndex(kind, ".")+1:]
	inf, err := c.GetInformer(ctx, obj)
	if err != nil {
		return err
	}
	_, err = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(o any) {
			at := time.Now()
			h.tr.changed(kind)
			if hs.add != nil {
				hs.add(o, at)
			}
		},
		UpdateFunc: func(_, o any) {
			at := time.Now()
			h.tr.changed(kind)
			if hs.update != nil {
				hs.update(o, at)
			}
		},
		DeleteFunc: func(o any) {
			at := time.Now()
			h.tr.changed(kind)
			if t, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
				o = t.Obj
			}
			if hs.del != nil {
				hs.del(o, at)
			}
		},
	})
	return err
}

func (h *harness) startWatches(ctx context.Context) error {
	plCache, err := h.platformWatches(ctx)
	if err != nil {
		return err
	}
	obCache, err := h.onboardingWatches(ctx)
	if err != nil {
		return err
	}
	caches := []cache.Cache{plCache, obCache}
	for i, d := range h.dedConfigs {
		c, err := cache.New(fast(d), cache.Options{Scheme: clusters.Scheme, DefaultNamespaces: map[string]cache.Config{owned.KroNamespace: {}}})
		if err != nil {
			return err
		}
		if err := h.watch(ctx, c, "controlplane", &corev1.Secret{}, h.secretHandlers(fmt.Sprintf("dedicated-%d", i+1))); err != nil {
			return err
		}
		caches = append(caches, c)
	}
	for _, c := range caches {
		go func() { _ = c.Start(ctx) }()
		if !c.WaitForCacheSync(ctx) {
			return fmt.Errorf("the harness's caches did not sync")
		}
	}
	return nil
}

// secretHandlers record each secret's data as first seen, and each creation.
func (h *harness) secretHandlers(cluster string) handlers {
	seen := func(o any, at time.Time) {
		s := o.(*corev1.Secret)
		h.tr.mark("secret|"+cluster+"|"+s.Namespace+"/"+s.Name+"|"+fingerprint(s.Data), at)
	}
	return handlers{
		add: func(o any, at time.Time) {
			seen(o, at)
			s := o.(*corev1.Secret)
			h.tr.added(cluster+"|"+s.Namespace+"/"+s.Name, at)
		},
		update: seen,
	}
}

// platformWatches record the Flux objects as applied and play Flux on them, and record
// the provider's secret copies.
func (h *harness) platformWatches(ctx context.Context) (cache.Cache, error) {
	ours := labels.SelectorFromSet(labels.Set{v1alpha1.LabelManagedBy: v1alpha1.ManagedByValue})
	plCache, err := cache.New(fast(h.platform.Config), cache.Options{Scheme: clusters.Scheme, ByObject: map[client.Object]cache.ByObject{
		&corev1.Secret{}: {Label: ours},
	}})
	if err != nil {
		return nil, err
	}
	if err := h.watch(ctx, plCache, "platform", &sourcev1.OCIRepository{}, handlers{add: h.ociEvent, update: h.ociEvent}); err != nil {
		return nil, err
	}
	if err := h.watch(ctx, plCache, "platform", &helmv2.HelmRelease{}, handlers{add: h.helmReleaseEvent, update: h.helmReleaseEvent}); err != nil {
		return nil, err
	}
	if err := h.watch(ctx, plCache, "platform", &corev1.Secret{}, h.secretHandlers("platform")); err != nil {
		return nil, err
	}
	return plCache, nil
}

// ociEvent records an OCIRepository applied as expected, and plays source-controller.
func (h *harness) ociEvent(o any, at time.Time) {
	r := o.(*sourcev1.OCIRepository)
	if r.Spec.Reference != nil && r.Spec.Reference.Tag == chartVersion && r.Spec.URL == h.chartURL &&
		r.Spec.SecretRef != nil && r.Spec.SecretRef.Name == providerName+"-"+chartSecret {
		h.tr.mark("applied-oci|"+r.Namespace, at)
		h.tr.added("applied-oci|"+r.Namespace, at)
	}
	if !h.realFlux {
		h.playFlux(r, r.Generation, r.Status.ObservedGeneration, r.Status.Conditions)
	}
}

// helmReleaseEvent records a HelmRelease applied as expected, deleted, and (real Flux)
// Ready for its generation; in provider mode it plays helm-controller.
func (h *harness) helmReleaseEvent(o any, at time.Time) {
	r := o.(*helmv2.HelmRelease)
	if r.Spec.ChartRef != nil && r.Spec.ChartRef.Kind == sourcev1.OCIRepositoryKind && r.Spec.KubeConfig != nil &&
		r.Spec.KubeConfig.SecretRef != nil && r.Spec.KubeConfig.SecretRef.Name == h.hrKubeconfig {
		h.tr.mark("applied-hr|"+r.Namespace, at)
		h.tr.added("applied-hr|"+r.Namespace, at)
	}
	if !r.DeletionTimestamp.IsZero() {
		h.tr.added("hrdeleting|"+r.Namespace, at)
	}
	if !h.realFlux {
		h.playFlux(r, r.Generation, r.Status.ObservedGeneration, r.Status.Conditions)
		return
	}
	if c := meta.FindStatusCondition(r.Status.Conditions, "Ready"); c != nil && c.Status == metav1.ConditionTrue &&
		r.Status.ObservedGeneration == r.Generation && c.ObservedGeneration == r.Generation {
		h.tr.added("fluxready-hr|"+r.Namespace, at)
	}
}

// onboardingWatches record the Kros' readiness, blocked deletions, RGD counts and deletion.
func (h *harness) onboardingWatches(ctx context.Context) (cache.Cache, error) {
	obCache, err := cache.New(fast(h.onboarding.Config), cache.Options{Scheme: clusters.Scheme})
	if err != nil {
		return nil, err
	}
	kro := func(o any, at time.Time) {
		k := o.(*v1alpha1.Kro)
		if c := meta.FindStatusCondition(k.Status.Conditions, v1alpha1.ConditionReady); c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == k.Generation {
			h.tr.mark("ready|"+string(k.UID), at)
			h.tr.added("kroready|"+string(k.UID), at)
		} else if c != nil {
			h.tr.sawNotReady(string(c.Status) + " " + c.Reason + ": " + c.Message)
			h.tr.added("kronotready|"+string(k.UID), at)
		}
		if c := meta.FindStatusCondition(k.Status.Conditions, v1alpha1.ConditionDeletionBlocked); c != nil && c.Status == metav1.ConditionTrue {
			switch c.Reason {
			case v1alpha1.ReasonUserResourcesPresent:
				h.tr.mark("blocked|"+string(k.UID), at)
			case v1alpha1.ReasonInstancesPresent:
				h.tr.mark("blocked-by-instances|"+string(k.UID), at)
			}
		}
		if s := k.Status.ResourceGraphDefinitions; s != nil && s.Total > 0 {
			h.tr.mark("rgds|"+string(k.UID), at)
		}
	}
	if err := h.watch(ctx, obCache, "onboarding", &v1alpha1.Kro{}, handlers{add: kro, update: kro, del: func(o any, at time.Time) {
		h.tr.mark("gone|"+string(o.(*v1alpha1.Kro).UID), at)
	}}); err != nil {
		return nil, err
	}
	return obCache, nil
}

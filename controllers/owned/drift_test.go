package owned_test

import (
	"context"
	"encoding/json"
	"os"
	"sync/atomic"
	"testing"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/clusters"
	"github.com/openmcp-project/service-provider-kro/controllers/owned"
	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

// Tests of how the provider's objects are kept exactly as it makes them when other field
// managers write to them, on a real API server with a second field manager, read through
// a cache with compacted managedFields as in the provider.

const (
	timeout  = 30 * time.Second
	interval = 50 * time.Millisecond
)

// platform is the API server of this package's tests.
var platform *testenv.Cluster

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx := context.Background()
	dirs, err := testenv.FluxCRDDirs(ctx)
	if err != nil {
		panic(err)
	}
	cs, err := testenv.StartClusters(ctx, testenv.ClusterOptions{Name: "owned-platform", CRDDirs: dirs})
	if err != nil {
		panic(err)
	}
	defer testenv.StopClusters(cs...)
	platform = cs[0]
	return m.Run()
}

// writer is the provider's client in a test: reads from a cache whose managedFields are
// compacted (owned.CompactManagedFields), writes to the API server, counted.
type writer struct {
	client.Client
	writes *atomic.Int32
}

func newWriter(t *testing.T, g Gomega) writer {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	c, err := cache.New(platform.Config, cache.Options{Scheme: clusters.Scheme, DefaultTransform: owned.CompactManagedFields})
	g.Expect(err).NotTo(HaveOccurred())
	go func() { _ = c.Start(ctx) }()
	g.Expect(c.WaitForCacheSync(ctx)).To(BeTrue())
	writes := &atomic.Int32{}
	count := interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			writes.Add(1)
			return c.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			writes.Add(1)
			return c.Update(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			writes.Add(1)
			return c.Patch(ctx, obj, patch, opts...)
		},
	}
	withWatch, err := client.NewWithWatch(platform.Config, client.Options{Scheme: clusters.Scheme, Cache: &client.CacheOptions{Reader: c}})
	g.Expect(err).NotTo(HaveOccurred())
	return writer{Client: interceptor.NewClient(withWatch, count), writes: writes}
}

// seen waits until the writer's cache holds obj's resourceVersion of the API server.
func (w writer) seen(g Gomega, obj client.Object) {
	live := obj.DeepCopyObject().(client.Object)
	g.Expect(platform.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), live)).To(Succeed())
	g.Eventually(func(g Gomega) {
		cached := obj.DeepCopyObject().(client.Object)
		g.Expect(w.Get(context.Background(), client.ObjectKeyFromObject(obj), cached)).To(Succeed())
		g.Expect(cached.GetResourceVersion()).To(Equal(live.GetResourceVersion()))
	}, timeout, interval).Should(Succeed())
}

// patchAs writes a merge patch as another field manager.
func patchAs(g Gomega, manager string, obj client.Object, patch string, subresource ...string) {
	p := client.RawPatch("application/merge-patch+json", []byte(patch))
	if len(subresource) > 0 {
		g.Expect(platform.Client.Status().Patch(context.Background(), obj, p, client.FieldOwner(manager))).To(Succeed())
		return
	}
	g.Expect(platform.Client.Patch(context.Background(), obj, p, client.FieldOwner(manager))).To(Succeed())
}

func newNamespace(g Gomega, name string) string {
	g.Expect(platform.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})).To(Succeed())
	return name
}

var kro = &v1alpha1.Kro{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "kro"}}

// desiredRelease is a HelmRelease as the provider builds one: labels, values, no suspend.
func desiredRelease(ns string) *helmv2.HelmRelease {
	return &helmv2.HelmRelease{
		TypeMeta:   metav1.TypeMeta{APIVersion: helmv2.GroupVersion.String(), Kind: helmv2.HelmReleaseKind},
		ObjectMeta: metav1.ObjectMeta{Name: "kro", Namespace: ns, Labels: owned.Labels(kro, "kro", ""), Annotations: owned.Annotations(kro)},
		Spec: helmv2.HelmReleaseSpec{
			ChartRef: &helmv2.CrossNamespaceSourceReference{APIVersion: sourcev1.GroupVersion.String(), Kind: sourcev1.OCIRepositoryKind, Name: "kro"},
			Interval: metav1.Duration{Duration: 10 * time.Minute},
			Values:   &apiextensionsv1.JSON{Raw: []byte(`{"config":{"logLevel":"info"}}`)},
		},
	}
}

// applyRelease applies the desired HelmRelease as a reconcile does and returns what the
// provider holds afterwards.
func applyRelease(g Gomega, w writer, ns string) *helmv2.HelmRelease {
	hr := desiredRelease(ns)
	ours, err := owned.ApplyOwned(context.Background(), w, platform.Client, hr, &helmv2.HelmRelease{}, nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ours).To(BeTrue())
	return hr
}

func liveRelease(g Gomega, ns string) *helmv2.HelmRelease {
	hr := &helmv2.HelmRelease{}
	g.Expect(platform.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "kro"}, hr)).To(Succeed())
	return hr
}

// TestForeignFieldsAreTakenOutOfAHelmRelease (issue 40): a value and a label that a
// second field manager adds to the provider's HelmRelease are gone after the next apply,
// which sends nothing once the object is as the provider made it. helm-controller's
// finalizer and status and the flux CLI's annotation stay; so does a suspend set by
// another manager, and the provider tells who set it.
func TestForeignFieldsAreTakenOutOfAHelmRelease(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(g, "hr-drift")
	w := newWriter(t, g)
	hr := applyRelease(g, w, ns)

	// helm-controller adds its finalizer and writes the status; the flux CLI asks for a reconcile.
	patchAs(g, "helm-controller", hr, `{"metadata":{"finalizers":["finalizers.fluxcd.io"]}}`)
	patchAs(g, "helm-controller", hr, `{"status":{"observedGeneration":1,"conditions":[{"type":"Ready","status":"True","reason":"InstallSucceeded","message":"ok","lastTransitionTime":"2026-01-01T00:00:00Z"}]}}`, "status")
	patchAs(g, "flux", hr, `{"metadata":{"annotations":{"reconcile.fluxcd.io/requestedAt":"now"}}}`)
	// A second field manager adds a value and a label.
	patchAs(g, "kubectl-patch", hr, `{"metadata":{"labels":{"team":"theirs"}},"spec":{"values":{"config":{"extra":"x"},"replicas":3}}}`)
	w.seen(g, hr)
	g.Expect(liveRelease(g, ns).Spec.Values.Raw).To(ContainSubstring("extra"))

	applyRelease(g, w, ns)
	live := liveRelease(g, ns)
	g.Expect(live.Spec.Values.Raw).To(MatchJSON(`{"config":{"logLevel":"info"}}`), "only the provider's values")
	g.Expect(live.Labels).NotTo(HaveKey("team"))
	g.Expect(live.Labels).To(Equal(owned.Labels(kro, "kro", "")))
	g.Expect(live.Finalizers).To(ConsistOf("finalizers.fluxcd.io"), "helm-controller's finalizer stays")
	g.Expect(live.Status.Conditions).To(HaveLen(1), "helm-controller's status stays")
	g.Expect(live.Annotations).To(HaveKeyWithValue("reconcile.fluxcd.io/requestedAt", "now"))
	for _, mf := range live.ManagedFields {
		g.Expect(mf.Manager).NotTo(Equal("kubectl-patch"), "nothing of the second manager is left: %s", mf.FieldsV1.GetRawString())
	}
	g.Expect(owned.WrittenByOthers(live)).To(BeFalse())

	// Nothing drifted: the next apply sends nothing.
	w.seen(g, hr)
	before := w.writes.Load()
	got := applyRelease(g, w, ns)
	g.Expect(w.writes.Load()).To(Equal(before), "an idle apply writes nothing")
	g.Expect(got.ResourceVersion).To(Equal(live.ResourceVersion))

	// A platform team suspends it: that stays, the provider says who did it, and an apply
	// with nothing else changed still sends nothing.
	patchAs(g, "flux", hr, `{"spec":{"suspend":true}}`)
	w.seen(g, hr)
	before = w.writes.Load()
	got = applyRelease(g, w, ns)
	g.Expect(w.writes.Load()).To(Equal(before), "a suspend is not drift to repair")
	g.Expect(got.Spec.Suspend).To(BeTrue())
	g.Expect(owned.SuspendedBy(got)).To(Equal("flux"), "read from the cache")
	g.Expect(owned.SuspendedBy(liveRelease(g, ns))).To(Equal("flux"))

	// Drift while suspended is taken out; the suspend stays.
	patchAs(g, "kubectl-edit", hr, `{"spec":{"values":{"replicas":5}}}`)
	w.seen(g, hr)
	applyRelease(g, w, ns)
	live = liveRelease(g, ns)
	g.Expect(live.Spec.Values.Raw).To(MatchJSON(`{"config":{"logLevel":"info"}}`))
	g.Expect(live.Spec.Suspend).To(BeTrue())
	g.Expect(owned.SuspendedBy(live)).To(Equal("flux"))

	// The provider's own suspend (before it deletes a release) names nobody else.
	patchAs(g, string(clusters.FieldOwner), hr, `{"spec":{"suspend":false}}`)
	patchAs(g, string(clusters.FieldOwner), hr, `{"spec":{"suspend":true}}`)
	g.Expect(owned.SuspendedBy(liveRelease(g, ns))).To(BeEmpty())
}

// TestForeignFieldsAreTakenOutOfASecretCopy (issue 40): a data key and a label that a
// second field manager adds to a secret copy go; its annotation stays; an idle copy
// sends nothing.
func TestForeignFieldsAreTakenOutOfASecretCopy(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(g, "secret-drift")
	w := newWriter(t, g)
	desired := func() *corev1.Secret {
		return &corev1.Secret{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
			ObjectMeta: metav1.ObjectMeta{Name: "kro-regcred", Namespace: ns, Labels: owned.Labels(kro, "kro", "chart-pull-secret"), Annotations: owned.Annotations(kro)},
			Type:       corev1.SecretTypeDockerConfigJson,
			Data:       map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"auths":{}}`)},
		}
	}
	copySecret := func() {
		ours, err := owned.CopySecret(ctx, w, platform.Client, desired())
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(ours).To(BeTrue())
	}
	copySecret()
	cp := desired()
	w.seen(g, cp)

	patchAs(g, "kubectl-edit", cp, `{"metadata":{"labels":{"team":"theirs"},"annotations":{"note":"kept"}},"data":{"extra":"eA=="}}`)
	w.seen(g, cp)
	copySecret()
	live := &corev1.Secret{}
	g.Expect(platform.Client.Get(ctx, client.ObjectKeyFromObject(cp), live)).To(Succeed())
	g.Expect(live.Data).To(Equal(desired().Data), "only the source's data")
	g.Expect(live.Labels).To(Equal(desired().Labels))
	g.Expect(live.Annotations).To(HaveKeyWithValue("note", "kept"), "annotations of others stay")
	g.Expect(owned.WrittenByOthers(live)).To(BeFalse())

	w.seen(g, cp)
	before := w.writes.Load()
	copySecret()
	g.Expect(w.writes.Load()).To(Equal(before), "an idle copy writes nothing")
}

// TestCompactedManagedFieldsTellTheSame: the cache's compacted managedFields tell the
// same as the full ones, for the fields the provider takes over and for spec.suspend.
func TestCompactedManagedFieldsTellTheSame(t *testing.T) {
	for name, fields := range map[string]string{
		"values":          `{"f:spec":{"f:values":{"f:extra":{}}}}`,
		"presence only":   `{"f:spec":{".":{},"f:values":{".":{}}}}`,
		"suspend":         `{"f:spec":{"f:suspend":{}}}`,
		"suspend, labels": `{"f:metadata":{"f:labels":{"f:team":{}}},"f:spec":{"f:suspend":{}}}`,
		"finalizers":      `{"f:metadata":{"f:finalizers":{".":{},"v:\"finalizers.fluxcd.io\"":{}}}}`,
		"annotations":     `{"f:metadata":{"f:annotations":{"f:reconcile.fluxcd.io/requestedAt":{}}}}`,
		"secret data":     `{"f:data":{"f:extra":{}},"f:type":{}}`,
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			full := &helmv2.HelmRelease{ObjectMeta: metav1.ObjectMeta{ManagedFields: []metav1.ManagedFieldsEntry{
				{Manager: "kubectl-patch", Operation: metav1.ManagedFieldsOperationUpdate, FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(fields)},
			}}}
			compact, err := owned.CompactManagedFields(full.DeepCopy())
			g.Expect(err).NotTo(HaveOccurred())
			c := compact.(*helmv2.HelmRelease)
			g.Expect(owned.WrittenByOthers(c)).To(Equal(owned.WrittenByOthers(full)))
			g.Expect(owned.SuspendedBy(c)).To(Equal(owned.SuspendedBy(full)))
			raw, _ := json.Marshal(c.ManagedFields)
			g.Expect(len(raw)).To(BeNumerically("<=", len(mustJSON(g, full.ManagedFields))), "%s", raw)
		})
	}
}

func mustJSON(g Gomega, v any) []byte {
	data, err := json.Marshal(v)
	g.Expect(err).NotTo(HaveOccurred())
	return data
}

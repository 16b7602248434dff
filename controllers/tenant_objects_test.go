package controllers

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	krov1alpha1 "github.com/kubernetes-sigs/kro/api/v1alpha1"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/foreign"
	"github.com/openmcp-project/service-provider-kro/controllers/owned"
	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

// What a hostile tenant makes on its ControlPlane, where it is an administrator: RGDs
// and secrets carrying the provider's label in kro-system, each as large as the API
// server takes, for the ControlPlane's cache to hold (TestControlPlaneCacheTrims,
// BenchmarkTenantObjectsMemory).

// hostileRGD creates an RGD of about size bytes on c's cluster: a template of three
// quarters of it, and a Ready condition whose message holds the rest (written to the
// status, where kro would write it). ready sets the condition's status.
func hostileRGD(ctx context.Context, c client.Client, name string, size int, ready bool) error {
	u := testenv.SchemaRGD(name, "Hostile"+strings.ReplaceAll(name, "-", ""))
	spec := u.Object["spec"].(map[string]any)
	spec["resources"] = []any{map[string]any{"id": "blob", "template": map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "blob"},
		"data": map[string]any{"payload": strings.Repeat("t", size*3/4)},
	}}}
	if err := c.Create(ctx, u); client.IgnoreAlreadyExists(err) != nil {
		return fmt.Errorf("creating RGD %s: %w", name, err)
	}
	status := "False"
	if ready {
		status = "True"
	}
	u.Object["status"] = map[string]any{"state": "Inactive", "conditions": []any{
		map[string]any{"type": "GraphAccepted", "status": "True", "reason": "Accepted", "message": "ok", "lastTransitionTime": "2026-01-01T00:00:00Z"},
		map[string]any{"type": "Ready", "status": status, "reason": "Hostile reason!", "message": strings.Repeat("m", size/4), "lastTransitionTime": "2026-01-01T00:00:00Z"},
	}}
	if err := c.Status().Update(ctx, u); err != nil {
		return fmt.Errorf("writing the status of RGD %s: %w", name, err)
	}
	return nil
}

// hostileSecret creates a secret in kro-system carrying the provider's managed-by label,
// with size bytes of data.
func hostileSecret(ctx context.Context, c client.Client, name string, size int) error {
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: owned.KroNamespace, Name: name,
			Labels:      map[string]string{v1alpha1.LabelManagedBy: v1alpha1.ManagedByValue, v1alpha1.LabelRole: v1alpha1.RoleImagePullSecret},
			Annotations: map[string]string{v1alpha1.AnnotationKro: strings.Repeat("a", 64<<10), "tenant.example.com/note": strings.Repeat("n", 64<<10)}},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{"payload": []byte(strings.Repeat("d", size))},
	}
	if err := c.Create(ctx, s); client.IgnoreAlreadyExists(err) != nil {
		return fmt.Errorf("creating secret %s: %w", name, err)
	}
	return nil
}

// createHostileObjects makes n RGDs, n secrets and n Deployments with kro's release
// labels of about size bytes each, named with prefix, eight at a time.
func createHostileObjects(tb testing.TB, g Gomega, c client.Client, prefix string, n, size int) {
	tb.Helper()
	ctx := context.Background()
	work := make(chan int)
	var wg sync.WaitGroup
	var failed atomic.Value
	for range 8 {
		wg.Go(func() {
			for i := range work {
				name := fmt.Sprintf("%s-%04d", prefix, i)
				if err := hostileRGD(ctx, c, name, size, false); err != nil {
					failed.Store(err)
				}
				if err := hostileSecret(ctx, c, name, size); err != nil {
					failed.Store(err)
				}
				if err := hostileDeployment(ctx, c, name, size); err != nil {
					failed.Store(err)
				}
			}
		})
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	if err, ok := failed.Load().(error); ok {
		g.Expect(err).NotTo(HaveOccurred())
	}
}

// TestControlPlaneCacheTrims: the ControlPlane's cache, made with the provider's options,
// keeps no RGD's spec and no secret's data, and of an RGD's status only its Ready
// condition, bounded; the provider still reports the RGDs' readiness from it and still
// repairs a copy whose data a tenant changed, even with the digest the cache keeps in
// place of the data written into it.
func TestControlPlaneCacheTrims(t *testing.T) {
	g := withClusters(t)
	ctx := context.Background()
	cp := startControlPlane(t, g, "trimmed", true)
	ns := newNamespace(t, g)
	version, image := uniq("v1"), uniq("image")
	sourceSecret(g, image, corev1.SecretTypeDockerConfigJson, "original")
	offerVersion(g, v1alpha1.KroVersion{Version: version, ChartVersion: "0.9.3", HelmValues: helmValues(image)})
	k := readyKroOn(t, g, cp, ns, "trimmed", version)
	const size = 512 << 10
	g.Expect(hostileRGD(ctx, cp.Client, "hostile", size, false)).To(Succeed())
	g.Expect(hostileSecret(ctx, cp.Client, "hostile", size)).To(Succeed())

	// What the cache returns.
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cl, err := cluster.New(cp.Config, controlPlaneClusterOptions())
	g.Expect(err).NotTo(HaveOccurred())
	go func() { _ = cl.Start(cctx) }()
	g.Expect(cl.GetCache().WaitForCacheSync(cctx)).To(BeTrue())
	for _, obj := range []client.Object{&krov1alpha1.ResourceGraphDefinition{}, &corev1.Secret{}} {
		_, err := cl.GetCache().GetInformer(cctx, obj)
		g.Expect(err).NotTo(HaveOccurred())
	}
	rgd := &krov1alpha1.ResourceGraphDefinition{}
	g.Expect(cl.GetClient().Get(ctx, client.ObjectKey{Name: "hostile"}, rgd)).To(Succeed())
	g.Expect(reflect.ValueOf(rgd.Spec).IsZero()).To(BeTrue(), "the cache keeps no spec; it holds %d resources", len(rgd.Spec.Resources))
	g.Expect(rgd.Status.Conditions).To(HaveLen(1), "of the conditions only Ready")
	g.Expect(*rgd.Status.Conditions[0].Message).To(HaveLen(foreign.StatusMessageMax))
	g.Expect(*rgd.Status.Conditions[0].Reason).To(Equal("HostileReason"))
	secret := &corev1.Secret{}
	g.Expect(cl.GetClient().Get(ctx, client.ObjectKey{Namespace: owned.KroNamespace, Name: "hostile"}, secret)).To(Succeed())
	g.Expect(secret.Data).To(BeEmpty(), "the cache keeps no data")
	g.Expect(secret.Annotations).NotTo(HaveKey("tenant.example.com/note"))
	g.Expect(len(secret.Annotations[v1alpha1.AnnotationKro])).To(BeNumerically("<=", 1024))
	g.Expect(secret.ManagedFields).To(BeEmpty())

	// The provider's view from its own cache: the readiness, bounded.
	g.Eventually(func(g Gomega) {
		sum := rgdSummary(g, k)
		g.Expect(sum.NotReady).To(HaveLen(1))
		g.Expect(sum.NotReady[0].Name).To(Equal("hostile"))
		g.Expect(sum.NotReady[0].Reason).To(Equal("HostileReason"))
		g.Expect(sum.NotReady[0].Message).To(HaveLen(foreign.StatusMessageMax))
	}, timeout, interval).Should(Succeed())

	// A copy changed, with the digest of its data written where the cache keeps its own, is
	// repaired. (A copy cannot be emptied: its type requires the key; TestTrimSecretCopyKeepsADigest
	// forges a digest on a secret without data.)
	key := client.ObjectKey{Namespace: owned.KroNamespace, Name: image}
	cp0 := &corev1.Secret{}
	g.Expect(cp.Client.Get(ctx, key, cp0)).To(Succeed())
	want := cp0.Data[corev1.DockerConfigJsonKey]
	g.Expect(want).NotTo(BeEmpty())
	cached := &corev1.Secret{}
	g.Eventually(func() error { return cl.GetClient().Get(ctx, key, cached) }, timeout, interval).Should(Succeed())
	forged := cp0.DeepCopy()
	forged.Data = map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"auths":{}}`)}
	forged.Annotations[annotationDataDigestForTest] = cached.Annotations[annotationDataDigestForTest]
	g.Expect(forged.Annotations[annotationDataDigestForTest]).NotTo(BeEmpty())
	g.Expect(cp.Client.Update(ctx, forged)).To(Succeed())
	g.Eventually(func(g Gomega) {
		got := &corev1.Secret{}
		g.Expect(cp.Client.Get(ctx, key, got)).To(Succeed())
		g.Expect(got.Data[corev1.DockerConfigJsonKey]).To(Equal(want))
	}, timeout, interval).Should(Succeed())
}

// annotationDataDigestForTest is where TrimSecretCopy keeps a copy's digest.
const annotationDataDigestForTest = v1alpha1.LabelPrefix + "cached-data-digest"

package controllers

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"

	"github.com/openmcp-project/service-provider-kro/clusters"
	"github.com/openmcp-project/service-provider-kro/controllers/guard"
	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

// The deletion guard (instancesOf) and the rollout's health read (readKroHealth) against
// a real API server, with every request they make recorded: a tenant decides how many
// kinds kro generates, how large their schemas are, and how many instances of what size
// exist, and neither read may hold all of that at once.

// recordedRequest is one request to the API server and the bytes of its response body.
type recordedRequest struct {
	method, path, accept string
	query                url.Values
	bytes                atomic.Int64
}

func (r *recordedRequest) String() string {
	return fmt.Sprintf("%s %s?%s (%s): %d bytes", r.method, r.path, r.query.Encode(), r.accept, r.bytes.Load())
}

// requestLog records the requests of a cluster's clients (countedCluster).
type requestLog struct {
	mu   sync.Mutex
	reqs []*recordedRequest
}

func (l *requestLog) RoundTrip(rt http.RoundTripper, req *http.Request) (*http.Response, error) {
	rec := &recordedRequest{method: req.Method, path: req.URL.Path, query: req.URL.Query(), accept: req.Header.Get("Accept")}
	l.mu.Lock()
	l.reqs = append(l.reqs, rec)
	l.mu.Unlock()
	resp, err := rt.RoundTrip(req)
	if err == nil {
		resp.Body = &countingBody{ReadCloser: resp.Body, n: &rec.bytes}
	}
	return resp, err
}

// take returns the requests recorded since the last take.
func (l *requestLog) take() []*recordedRequest {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.reqs
	l.reqs = nil
	return out
}

type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// countedCluster is a cluster of the API server at cfg whose every request is recorded,
// as the provider's engaged ControlPlane would be (not started: the reads go to the API
// server).
func countedCluster(tb testing.TB, g Gomega, cfg *rest.Config) (cluster.Cluster, *requestLog) {
	tb.Helper()
	log := &requestLog{}
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = 1000, 1000
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) { return log.RoundTrip(rt, req) })
	})
	cl, err := cluster.New(cfg, func(o *cluster.Options) { o.Scheme = clusters.Scheme })
	g.Expect(err).NotTo(HaveOccurred())
	return cl, log
}

// largeKroKind creates a kind as kro generates one (testenv.KroGeneratedCRD) whose
// schema weighs schemaBytes, and returns an instance of it, not yet created, and the
// kind's resource (plural).
func largeKroKind(tb testing.TB, g Gomega, c client.Client, kind, rgd string, schemaBytes int) (*unstructured.Unstructured, string) {
	tb.Helper()
	ctx := context.Background()
	crd, instance := testenv.KroGeneratedCRD(uniq("things"), kind, rgd)
	crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Description = strings.Repeat("d", schemaBytes)
	g.Expect(c.Create(ctx, crd)).To(Succeed())
	tb.Cleanup(func() { _ = c.Delete(context.Background(), crd) })
	g.Eventually(func(g Gomega) {
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(crd), crd)).To(Succeed())
		established := false
		for _, cond := range crd.Status.Conditions {
			established = established || cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue
		}
		g.Expect(established).To(BeTrue())
		_, err := c.RESTMapper().RESTMapping(instance.GroupVersionKind().GroupKind(), instance.GroupVersionKind().Version)
		g.Expect(err).NotTo(HaveOccurred())
	}, timeout, interval).Should(Succeed())
	return instance, crd.Spec.Names.Plural
}

// namespaceOn creates a namespace for one test on c's cluster.
func namespaceOn(tb testing.TB, g Gomega, c client.Client) string {
	tb.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "t-"}}
	g.Expect(c.Create(context.Background(), ns)).To(Succeed())
	tb.Cleanup(func() { _ = c.Delete(context.Background(), ns) })
	return ns.Name
}

// instancesPath is the API path of the instances of a generated kind (kro.run/v1alpha1).
func instancesPath(plural string) string { return "/apis/kro.run/v1alpha1/" + plural }

// createInstances creates n instances of the kind of proto in namespace, named
// i-0000…, each with a spec of size bytes; those whose index ready says are Ready.
func createInstances(tb testing.TB, g Gomega, c client.Client, proto *unstructured.Unstructured, namespace string, n, size int, ready func(int) bool) {
	tb.Helper()
	ctx := context.Background()
	payload := strings.Repeat("p", size)
	work := make(chan int)
	var wg sync.WaitGroup
	var failed atomic.Value
	for range 8 {
		wg.Go(func() {
			for i := range work {
				u := proto.DeepCopy()
				u.SetNamespace(namespace)
				u.SetName(fmt.Sprintf("i-%04d", i))
				status, reason := "False", "Busy"
				if ready(i) {
					status, reason = "True", "AllResourcesReady"
				}
				u.Object["spec"] = map[string]any{"payload": payload}
				u.Object["status"] = map[string]any{"conditions": []any{
					map[string]any{"type": "InstanceManaged", "status": "True"},
					map[string]any{"type": "Ready", "status": status, "reason": reason, "message": strings.Repeat("m", 64)},
				}}
				if err := c.Create(ctx, u); client.IgnoreAlreadyExists(err) != nil {
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

// boundedKindSchema is the size of the schema of the kind the tests create: a
// tenant's RGD can make one as large.
const boundedKindSchema = 256 << 10

// TestDeletionGuardReadsNoSchemaAndNoInstances: counting a kind's instances for a
// blocked deletion reads the CRDs kro generated by their metadata only, a page at a time
// (never a schema), and one instance's metadata per kind, however many instances there
// are and however large.
func TestDeletionGuardReadsNoSchemaAndNoInstances(t *testing.T) {
	g := withClusters(t)
	ctx := context.Background()
	rgd := uniq("guarded")
	kind := "Guarded" + rgd[len(rgd)-6:]
	instance, plural := largeKroKind(t, g, controlPlane.Client, kind, rgd, boundedKindSchema)
	ns := namespaceOn(t, g, controlPlane.Client)
	createInstances(t, g, controlPlane.Client, instance, ns, 150, 16<<10, func(int) bool { return true })

	cl, log := countedCluster(t, g, controlPlane.Config)
	counts, err := guard.InstancesOf(ctx, cl)
	g.Expect(err).NotTo(HaveOccurred())
	var mine []guard.InstanceCount
	for _, c := range counts {
		if c.Kind == kind {
			mine = append(mine, c)
		}
	}
	g.Expect(mine).To(HaveLen(1))
	g.Expect(mine[0].Count).To(Equal(150))
	g.Expect(mine[0].RGD).To(Equal(rgd))

	reqs := log.take()
	var received int64
	for _, r := range reqs {
		received += r.bytes.Load()
		if strings.HasSuffix(r.path, "/customresourcedefinitions") {
			g.Expect(r.accept).To(ContainSubstring("as=PartialObjectMetadataList"), "the CRDs are listed by their metadata: %s", r)
			g.Expect(r.query.Get("limit")).NotTo(BeEmpty(), "and a page at a time: %s", r)
		}
		g.Expect(r.path).NotTo(HaveSuffix("/customresourcedefinitions/"+plural+".kro.run"), "the kind's CRD is not read whole: %s", r)
		if strings.HasPrefix(r.path, "/apis/kro.run/v1alpha1/") && r.path != "/apis/kro.run/v1alpha1/resourcegraphdefinitions" {
			g.Expect(r.query.Get("limit")).To(Equal("1"), "one instance's metadata per kind: %s", r)
			g.Expect(r.accept).To(ContainSubstring("as=PartialObjectMetadataList"), r.String())
		}
	}
	g.Expect(received).To(BeNumerically("<", boundedKindSchema/2),
		"one guard pass receives less than the kind's schema; requests: %v", reqs)
	t.Logf("guard pass: %d requests, %d bytes received", len(reqs), received)
}

// TestHealthReadPagesInstances: the rollout's health read lists instances a page of
// listPageSize at a time, never the CRDs' schemas, and still counts and names them as
// before: Ready or not, the first not Ready in namespace and name order.
func TestHealthReadPagesInstances(t *testing.T) {
	g := withClusters(t)
	ctx := context.Background()
	rgd := uniq("paged")
	kind := "Paged" + rgd[len(rgd)-6:]
	instance, plural := largeKroKind(t, g, controlPlane.Client, kind, rgd, boundedKindSchema)
	ns := namespaceOn(t, g, controlPlane.Client)
	const n = 250
	createInstances(t, g, controlPlane.Client, instance, ns, n, 1<<10, func(i int) bool { return i%50 != 7 })

	cl, log := countedCluster(t, g, controlPlane.Config)
	h, err := guard.ReadKroHealth(ctx, cl, "rev", time.Now())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(h.Instances.Total).To(BeNumerically(">=", n))
	var mine []string
	for _, s := range h.NotReady {
		if s.Kind == kind {
			mine = append(mine, s.Namespace+"/"+s.Name+" "+s.Reason)
		}
	}
	g.Expect(mine).To(Equal([]string{ns + "/i-0007 Busy", ns + "/i-0057 Busy", ns + "/i-0107 Busy", ns + "/i-0157 Busy", ns + "/i-0207 Busy"}))

	pages := 0
	for _, r := range log.take() {
		if strings.HasSuffix(r.path, "/customresourcedefinitions") {
			g.Expect(r.accept).To(ContainSubstring("as=PartialObjectMetadataList"), "the CRDs are listed by their metadata: %s", r)
		}
		g.Expect(r.bytes.Load()).To(BeNumerically("<", boundedKindSchema), "no response carries a schema, nor all instances: %s", r)
		if r.path == instancesPath(plural) {
			pages++
			g.Expect(r.query.Get("limit")).To(Equal("100"), "instances are read a page at a time: %s", r)
		}
	}
	g.Expect(pages).To(Equal(3), "%d instances in pages of 100", n)
}

// TestReadsSkipAKindNeverServed: a CRD labelled as kro's that the API server never
// serves (its kind is taken in its group, so it is never established; a tenant can make
// one) neither fails the deletion guard nor the health read: it has no instances.
func TestReadsSkipAKindNeverServed(t *testing.T) {
	g := withClusters(t)
	ctx := context.Background()
	rgd := uniq("served")
	kind := "Served" + rgd[len(rgd)-6:]
	instance, plural := largeKroKind(t, g, controlPlane.Client, kind, rgd, 1)
	ns := namespaceOn(t, g, controlPlane.Client)
	createInstances(t, g, controlPlane.Client, instance, ns, 2, 16, func(int) bool { return true })
	conflicting, _ := testenv.KroGeneratedCRD(uniq("conflicting"), kind, rgd)
	g.Expect(controlPlane.Client.Create(ctx, conflicting)).To(Succeed())
	t.Cleanup(func() { _ = controlPlane.Client.Delete(context.Background(), conflicting) })
	g.Eventually(func(g Gomega) {
		g.Expect(controlPlane.Client.Get(ctx, client.ObjectKeyFromObject(conflicting), conflicting)).To(Succeed())
		accepted := ""
		for _, c := range conflicting.Status.Conditions {
			if c.Type == apiextensionsv1.NamesAccepted {
				accepted = string(c.Status)
			}
		}
		g.Expect(accepted).To(Equal(string(apiextensionsv1.ConditionFalse)))
	}, timeout, interval).Should(Succeed())

	cl, _ := countedCluster(t, g, controlPlane.Config)
	counts, err := guard.InstancesOf(ctx, cl)
	g.Expect(err).NotTo(HaveOccurred())
	var mine []string
	for _, c := range counts {
		if c.RGD == rgd {
			mine = append(mine, c.String())
		}
	}
	g.Expect(mine).To(Equal([]string{fmt.Sprintf("2 %s (%s.kro.run, RGD %s)", kind, plural, rgd)}), "the kind served is counted, the other skipped")
	_, err = guard.ReadKroHealth(ctx, cl, "rev", time.Now())
	g.Expect(err).NotTo(HaveOccurred())
}

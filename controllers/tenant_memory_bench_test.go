package controllers

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	krov1alpha1 "github.com/kubernetes-sigs/kro/api/v1alpha1"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/clusters"
	"github.com/openmcp-project/service-provider-kro/controllers/guard"
	"github.com/openmcp-project/service-provider-kro/controllers/owned"
	"github.com/openmcp-project/service-provider-kro/providers/controlplane"
	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

// What one tenant makes for BenchmarkTenantObjectsMemory: the figures by default.
var (
	tenantObjects = flag.Int("tenant.objects", 300, "BenchmarkTenantObjectsMemory: RGDs, and as many labelled secrets and Deployments with kro's release labels in kro-system")
	tenantSize    = flag.Int("tenant.size", 1000<<10, "BenchmarkTenantObjectsMemory: bytes of each object")
)

// BenchmarkTenantObjectsMemory measures what the provider holds for a ControlPlane whose
// tenant has made -tenant.objects RGDs and as many secrets carrying the provider's label
// and Deployments carrying kro's release labels in kro-system, of -tenant.size bytes
// each (the kinds its cache holds or the provider reads). The ControlPlane's cluster is
// made with the provider's options (controlPlaneClusterOptions and the trimmed
// Deployment watch, "trimmed") and, for comparison, as the code before them did
// ("whole": the same without transforms and no Deployment watch; the rollout's gate read
// the Deployments in one full list instead), alternately against the same API server
// and objects. Each engagement starts the informers the provider starts and the
// reconcile's reads follow. First with no objects, then with them. Per
// engagement: the process's peak RSS (VmHWM, reset before) and its growth over the RSS
// before, the highest heap held by objects above what it was before (sampled every
// millisecond), and the heap the cache keeps after.
//
//	KUBEBUILDER_ASSETS=... go test ./controllers -run '^$' -bench TenantObjectsMemory -benchtime 1x -timeout 60m
func BenchmarkTenantObjectsMemory(b *testing.B) {
	g := NewWithT(b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	kroCRDs, err := testenv.KroCRDDir(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	cs, err := testenv.StartClusters(ctx, testenv.ClusterOptions{Name: "tenant-memory", CRDDirs: []string{kroCRDs}})
	g.Expect(err).NotTo(HaveOccurred())
	b.Cleanup(func() { testenv.StopClusters(cs...) })
	cfg := rest.CopyConfig(cs[0].Config)
	cfg.QPS, cfg.Burst = 1000, 1000
	c, err := client.New(cfg, client.Options{Scheme: clusters.Scheme})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: owned.KroNamespace}})).To(Succeed())
	whole := controlplane.ClusterOptions(clusters.Scheme, clusters.KroNamespace,
		labels.SelectorFromSet(labels.Set{v1alpha1.LabelManagedBy: v1alpha1.ManagedByValue}),
		controlplane.Kinds{krov1alpha1.GroupVersion.WithKind("ResourceGraphDefinition"): meta.RESTScopeRoot}, nil)
	trimmed := []cluster.Option{controlPlaneClusterOptions(), controlplane.WatchDeployments(clusters.KroNamespace, owned.ReleaseName)}
	both := func(b *testing.B, want int) {
		for _, v := range []struct {
			name string
			opts []cluster.Option
		}{{"trimmed", trimmed}, {"whole", []cluster.Option{whole}}, {"trimmed-again", trimmed}} {
			b.Run(v.name, func(b *testing.B) { measureEngagement(b, g, cfg, v.opts, want) })
		}
	}
	g.Expect(testenv.PlayKroDeployment(ctx, c)).To(Succeed()) // kro's own, as Helm made it
	b.Run("objects=0", func(b *testing.B) { both(b, 0) })
	start := time.Now()
	createHostileObjects(b, g, c, "hostile", *tenantObjects, *tenantSize)
	b.Logf("created %d RGDs, secrets and Deployments each of %d bytes in %s", *tenantObjects, *tenantSize, time.Since(start).Round(time.Second))
	b.Run(fmt.Sprintf("objects=%dx3x%dKiB", *tenantObjects, *tenantSize>>10), func(b *testing.B) { both(b, *tenantObjects) })
}

// measureEngagement engages the ControlPlane at cfg with opts b.N times, each until its
// cache holds want RGDs and want secrets, and reports the memory it took.
func measureEngagement(b *testing.B, g Gomega, cfg *rest.Config, opts []cluster.Option, want int) {
	var peakRSS, growth, peakHeap, retained float64
	for range b.N {
		runtime.GC()
		debug.FreeOSMemory()
		rssBefore := resetPeakRSS(b)
		before := heapObjects()
		peak := newPeakSampler(before)
		start := time.Now()
		stop := engage(g, cfg, opts, want)
		took := time.Since(start)
		high := peak.stop()
		runtime.GC()
		runtime.GC()
		after := heapObjects()
		hwm := procStatus(b, "VmHWM")
		stop()
		b.Logf("engaged and synced in %s", took.Round(time.Millisecond))
		peakRSS += float64(hwm) / (1 << 20)
		growth += float64(hwm-rssBefore) / (1 << 20)
		peakHeap += float64(high) / (1 << 20)
		if after > before {
			retained += float64(after-before) / (1 << 20)
		}
	}
	n := float64(b.N)
	b.ReportMetric(peakRSS/n, "MiB-peak-rss")
	b.ReportMetric(growth/n, "MiB-rss-growth")
	b.ReportMetric(peakHeap/n, "MiB-peak-heap")
	b.ReportMetric(retained/n, "MiB-retained")
}

// engage makes and starts the ControlPlane's cluster with opts, starts the informers the
// provider's controlplane.Events starts on it (without Events' bound on the wait, which a
// ControlPlane this full may exceed on a busy machine) and reads what a reconcile reads:
// the RGDs' summary and the secret copies. It returns once the cache holds want of
// each; stop ends the engagement.
func engage(g Gomega, cfg *rest.Config, opts []cluster.Option, want int) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	cl, err := cluster.New(cfg, opts...)
	g.Expect(err).NotTo(HaveOccurred())
	done := make(chan struct{})
	go func() { defer close(done); _ = cl.Start(ctx) }()
	stop = func() { cancel(); <-done }
	g.Expect(cl.GetCache().WaitForCacheSync(ctx)).To(BeTrue())
	for _, obj := range []client.Object{&corev1.Secret{}, &krov1alpha1.ResourceGraphDefinition{}} {
		_, err := cl.GetCache().GetInformer(ctx, obj)
		g.Expect(err).NotTo(HaveOccurred())
	}
	kroDeployments := client.MatchingLabels{controlplane.LabelInstance: owned.ReleaseName, controlplane.LabelHelmManagedBy: controlplane.HelmManagedBy}
	deployments := &appsv1.DeploymentList{}
	if len(opts) > 1 { // the Deployment watch
		_, err := cl.GetCache().GetInformer(ctx, &appsv1.Deployment{})
		g.Expect(err).NotTo(HaveOccurred())
	} else { // the code before: the gate's one full list, straight from the API server
		g.Expect(cl.GetAPIReader().List(ctx, deployments, client.InNamespace(owned.KroNamespace), kroDeployments)).To(Succeed())
		g.Expect(deployments.Items).To(HaveLen(want + 1))
	}
	g.Eventually(func(g Gomega) {
		rgds := &krov1alpha1.ResourceGraphDefinitionList{}
		g.Expect(cl.GetClient().List(ctx, rgds)).To(Succeed())
		g.Expect(guard.SummarizeRGDs(rgds.Items).Total).To(BeEquivalentTo(want))
		secrets := &corev1.SecretList{}
		g.Expect(cl.GetClient().List(ctx, secrets, client.InNamespace(owned.KroNamespace))).To(Succeed())
		g.Expect(secrets.Items).To(HaveLen(want))
		if len(opts) > 1 {
			g.Expect(cl.GetClient().List(ctx, deployments, client.InNamespace(owned.KroNamespace), kroDeployments)).To(Succeed())
			g.Expect(deployments.Items).To(HaveLen(want + 1))
		}
	}).WithTimeout(10 * time.Minute).WithPolling(100 * time.Millisecond).Should(Succeed())
	return stop
}

// resetPeakRSS resets the process's peak RSS (VmHWM) to its RSS now, which it returns.
func resetPeakRSS(b *testing.B) uint64 {
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		b.Fatalf("resetting the peak RSS: %v", err)
	}
	return procStatus(b, "VmRSS")
}

// procStatus reads a size in bytes from /proc/self/status ("VmHWM", "VmRSS").
func procStatus(b *testing.B, field string) uint64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		b.Fatalf("reading /proc/self/status: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				b.Fatalf("reading %s: %v", field, err)
			}
			return kb << 10
		}
	}
	b.Fatalf("no %s in /proc/self/status", field)
	return 0
}

// hostileDeployment creates a Deployment in kro-system that carries kro's release labels
// and Helm's annotations, of about size bytes (an environment variable in its pod
// template), as a tenant administering its ControlPlane can.
func hostileDeployment(ctx context.Context, c client.Client, name string, size int) error {
	d := testenv.AvailableKroDeployment()
	d.Name = name
	d.Spec.Template.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "PADDING", Value: strings.Repeat("x", size)}}
	if err := c.Create(ctx, d); err != nil {
		return fmt.Errorf("creating Deployment %s: %w", name, err)
	}
	return nil
}

package controlplane_test

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	krov1alpha1 "github.com/kubernetes-sigs/kro/api/v1alpha1"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"

	"github.com/openmcp-project/service-provider-kro/clusters"
	"github.com/openmcp-project/service-provider-kro/providers/controlplane"
	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

const ownLabel = "test.kro.services.open-control-plane.io/own"

// rgdKind is the kind the tests have Events watch once its CRD exists: kro's RGDs.
var rgdKind = controlplane.Kinds{krov1alpha1.GroupVersion.WithKind("ResourceGraphDefinition"): meta.RESTScopeRoot}

var (
	host, cpA, cpB *testenv.Cluster
	provider       *controlplane.Provider
	events         *controlplane.Events
	seen           = &requests{m: map[types.NamespacedName]int{}}
	keyA           = types.NamespacedName{Namespace: "project-a", Name: "cp-a"}
	keyB           = types.NamespacedName{Namespace: "project-b", Name: "cp-b"}
	nameA          = controlplane.ClusterName(keyA)
	nameB          = controlplane.ClusterName(keyB)
)

// requests counts the reconcile requests a controller fed by Events received.
type requests struct {
	mu sync.Mutex
	m  map[types.NamespacedName]int
}

func (r *requests) Reconcile(_ context.Context, req reconcile.Request) (reconcile.Result, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.m[req.NamespacedName]++
	return reconcile.Result{}, nil
}

func (r *requests) count(k types.NamespacedName) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.m[k]
}

// The clusters and the provider start with the first test that needs them (withProvider),
// so that the pure tests of the package (backoff, mapper, names) run without an API server.
var suite struct {
	once   sync.Once
	err    error
	cancel context.CancelFunc
	done   chan error
	cs     []*testenv.Cluster
}

func TestMain(m *testing.M) {
	code := m.Run()
	if suite.cancel != nil {
		suite.cancel()
		if err := <-suite.done; err != nil {
			fmt.Fprintln(os.Stderr, "manager:", err)
			code = 1
		}
		testenv.StopClusters(suite.cs...)
	}
	os.Exit(code)
}

// withProvider starts the clusters and the provider on first use.
func withProvider(tb testing.TB) {
	tb.Helper()
	suite.once.Do(func() { suite.err = startProvider() })
	if suite.err != nil {
		tb.Fatalf("starting the clusters and the provider: %v", suite.err)
	}
}

func startProvider() error {
	ctx, cancel := context.WithCancel(context.Background())
	suite.cancel = cancel
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.UseDevMode(true)))
	kroCRDs, err := testenv.KroCRDDir(ctx)
	if err != nil {
		return err
	}
	cs, err := testenv.StartClusters(ctx,
		testenv.ClusterOptions{Name: "host"},
		testenv.ClusterOptions{Name: "cp-a", CRDDirs: []string{kroCRDs}},
		testenv.ClusterOptions{Name: "cp-b"}, // kro not installed yet
	)
	if err != nil {
		return err
	}
	suite.cs = cs
	host, cpA, cpB = cs[0], cs[1], cs[2]
	for _, c := range []*testenv.Cluster{cpA, cpB} {
		if err := c.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: clusters.KroNamespace}}); err != nil {
			return err
		}
	}

	events = controlplane.NewEvents(controlplane.EventsOptions{
		Log: ctrl.Log.WithName("events"),
		For: func(key types.NamespacedName) client.Object {
			return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
		},
		Kind:        &krov1alpha1.ResourceGraphDefinition{},
		KindCRD:     "resourcegraphdefinitions.kro.run",
		Deployments: true,
	})
	provider = controlplane.New(controlplane.Options{
		ClusterOptions: []cluster.Option{controlplane.ClusterOptions(clusters.Scheme, clusters.KroNamespace, labels.SelectorFromSet(labels.Set{ownLabel: "true"}), rgdKind, nil),
			controlplane.WatchDeployments(clusters.KroNamespace, "kro")},
		ProbeInterval: 300 * time.Millisecond,
		ProbeTimeout:  time.Second,
		MinBackoff:    200 * time.Millisecond,
		MaxBackoff:    time.Second,
		OnChange:      events.Notify,
		Log:           ctrl.Log.WithName("provider"),
	})
	mgr, err := mcmanager.New(host.Config, provider, manager.Options{
		Scheme:  clusters.Scheme,
		Metrics: metricsserver.Options{BindAddress: "0"},
	})
	if err == nil {
		err = mgr.Add(events)
	}
	if err == nil {
		err = ctrl.NewControllerManagedBy(mgr.GetLocalManager()).Named("test").WatchesRawSource(events.Source()).Complete(seen)
	}
	if err != nil {
		return err
	}
	suite.done = make(chan error, 1)
	go func() { suite.done <- mgr.Start(ctx) }()
	return nil
}

func engaged(g Gomega, name multicluster.ClusterName) cluster.Cluster {
	g.Eventually(func() controlplane.Phase { return provider.State(name).Phase }).WithTimeout(20 * time.Second).Should(Equal(controlplane.Engaged))
	cl, err := provider.Get(context.Background(), name)
	g.Expect(err).NotTo(HaveOccurred())
	return cl
}

func ownSecret(name string, own bool) *corev1.Secret {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: clusters.KroNamespace}, StringData: map[string]string{"k": "v"}}
	if own {
		s.Labels = map[string]string{ownLabel: "true"}
	}
	return s
}

func rgd(name string) *krov1alpha1.ResourceGraphDefinition {
	return &krov1alpha1.ResourceGraphDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: krov1alpha1.ResourceGraphDefinitionSpec{
			Schema: &krov1alpha1.Schema{Kind: "App", APIVersion: "v1alpha1"},
		},
	}
}

// eventually waits until f holds, with the timeouts these tests use for watch reactions.
func eventually(g Gomega, f any) AsyncAssertion {
	return g.Eventually(f).WithTimeout(10 * time.Second).WithPolling(50 * time.Millisecond)
}

func TestEngagementAndWatches(t *testing.T) {
	withProvider(t)
	g := NewWithT(t)
	ctx := context.Background()

	_, err := provider.Ensure(nameA, cpA.Kubeconfig)
	g.Expect(err).NotTo(HaveOccurred())
	_, err = provider.Ensure(nameB, cpB.Kubeconfig)
	g.Expect(err).NotTo(HaveOccurred())
	clA, clB := engaged(g, nameA), engaged(g, nameB)

	t.Run("kro's CRD decides whether RGDs are watched", func(t *testing.T) {
		g := NewWithT(t)
		eventually(g, func() controlplane.KindWatch { return events.KindWatch(nameA, clA) }).Should(Equal(controlplane.KindWatching))
		eventually(g, func() controlplane.KindWatch { return events.KindWatch(nameB, clB) }).Should(Equal(controlplane.KindNoCRD))
		// The cheap check that spares reading the CRD: served where it is established.
		served, err := events.Served(ctx, clA)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(served).To(BeTrue(), "RGDs are served on %s", nameA)
		served, err = events.Served(ctx, clB)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(served).To(BeFalse(), "no RGDs without kro's CRD on %s", nameB)
	})

	t.Run("the provider's secrets in kro-system are watched; nothing else is cached", func(t *testing.T) {
		g := NewWithT(t)
		before := seen.count(keyA)
		g.Expect(cpA.Client.Create(ctx, ownSecret("pull", true))).To(Succeed())
		eventually(g, func() int { return seen.count(keyA) }).Should(BeNumerically(">", before))

		g.Expect(cpA.Client.Create(ctx, ownSecret("foreign", false))).To(Succeed())
		var list corev1.SecretList
		eventually(g, func(g Gomega) {
			g.Expect(clA.GetClient().List(ctx, &list, client.InNamespace(clusters.KroNamespace))).To(Succeed())
			g.Expect(list.Items).To(ConsistOf(HaveField("Name", "pull")))
		}).Should(Succeed())

		err := clA.GetClient().Get(ctx, client.ObjectKey{Namespace: "default", Name: "x"}, &corev1.ConfigMap{})
		g.Expect(err).To(MatchError(ContainSubstring("not cached")), "reading an unwatched kind must not start an informer")

		before = seen.count(keyA)
		g.Expect(cpA.Client.Delete(ctx, ownSecret("pull", true))).To(Succeed())
		eventually(g, func() int { return seen.count(keyA) }).Should(BeNumerically(">", before))
	})

	t.Run("RGD changes reach the ControlPlane's Kro", func(t *testing.T) {
		g := NewWithT(t)
		before := seen.count(keyA)
		g.Expect(cpA.Client.Create(ctx, rgd("apps"))).To(Succeed())
		eventually(g, func() int { return seen.count(keyA) }).Should(BeNumerically(">", before))
		eventually(g, func(g Gomega) {
			var list krov1alpha1.ResourceGraphDefinitionList
			g.Expect(clA.GetClient().List(ctx, &list)).To(Succeed())
			g.Expect(list.Items).To(HaveLen(1))
		}).Should(Succeed())
		before = seen.count(keyA)
		g.Expect(cpA.Client.Delete(ctx, rgd("apps"))).To(Succeed())
		eventually(g, func() int { return seen.count(keyA) }).Should(BeNumerically(">", before))
	})

	t.Run("kro's CRD installed after engagement starts the RGD watch", func(t *testing.T) {
		g := NewWithT(t)
		dir, err := testenv.KroCRDDir(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(testenv.InstallCRDDir(ctx, cpB, dir)).To(Succeed())
		eventually(g, func() controlplane.KindWatch { return events.KindWatch(nameB, clB) }).Should(Equal(controlplane.KindWatching))
		before := seen.count(keyB)
		g.Expect(cpB.Client.Create(ctx, rgd("late"))).To(Succeed())
		eventually(g, func() int { return seen.count(keyB) }).Should(BeNumerically(">", before))
	})

	t.Run("an unreachable ControlPlane is reported and does not slow the others", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(cpB.StopAPIServer()).To(Succeed())
		eventually(g, func() controlplane.State { return provider.State(nameB) }).Should(And(
			HaveField("Phase", controlplane.Unreachable),
			HaveField("Message", ContainSubstring("connection refused")),
		))
		g.Expect(phaseMetric(g, "Unreachable")).To(BeNumerically(">=", 1))
		// cp-a keeps reacting while cp-b is down.
		before := seen.count(keyA)
		g.Expect(cpA.Client.Create(ctx, ownSecret("during-outage", true))).To(Succeed())
		eventually(g, func() int { return seen.count(keyA) }).Should(BeNumerically(">", before))
		g.Expect(provider.State(nameA).Phase).To(Equal(controlplane.Engaged))

		g.Expect(cpB.StartAPIServer()).To(Succeed())
		eventually(g, func() controlplane.Phase { return provider.State(nameB).Phase }).WithTimeout(30 * time.Second).Should(Equal(controlplane.Engaged))
		g.Expect(phaseMetric(g, "Engaged")).To(BeNumerically(">=", 2))
	})
}

func TestKubeconfigRotationWithRevokedToken(t *testing.T) {
	withProvider(t)
	g := NewWithT(t)
	ctx := context.Background()
	key := types.NamespacedName{Namespace: "project-r", Name: "rotating"}
	name := controlplane.ClusterName(key)
	t.Cleanup(func() { provider.Remove(context.Background(), name) })

	first, err := cpA.TokenKubeconfig(ctx, "provider-1")
	g.Expect(err).NotTo(HaveOccurred())
	_, err = provider.Ensure(name, first)
	g.Expect(err).NotTo(HaveOccurred())
	old := engaged(g, name)

	// The same kubeconfig again changes nothing.
	_, err = provider.Ensure(name, first)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(provider.Get(ctx, name)).To(BeIdenticalTo(old))

	for i := 2; i <= 4; i++ {
		next, err := cpA.TokenKubeconfig(ctx, fmt.Sprintf("provider-%d", i))
		g.Expect(err).NotTo(HaveOccurred())
		_, err = provider.Ensure(name, next)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(cpA.RevokeToken(ctx, fmt.Sprintf("provider-%d", i-1))).To(Succeed())
		eventually(g, func() bool {
			cl, err := provider.Get(ctx, name)
			return err == nil && cl != old
		}).Should(BeTrue())
		old, _ = provider.Get(ctx, name)
	}
	// Engaged with the newest credentials (the new cluster is handed out while its cache
	// starts, so Connecting may come first on a loaded machine), and still engaged after
	// several probes.
	eventually(g, func() controlplane.Phase { return provider.State(name).Phase }).Should(Equal(controlplane.Engaged))
	g.Consistently(func() controlplane.Phase { return provider.State(name).Phase }).WithTimeout(time.Second).Should(Equal(controlplane.Engaged))
	before := seen.count(key)
	g.Expect(cpA.Client.Create(ctx, ownSecret("after-rotation", true))).To(Succeed())
	eventually(g, func() int { return seen.count(key) }).Should(BeNumerically(">", before))
	// The replaced clusters' caches and goroutines are gone.
	// The replaced clusters' caches are gone: the only informers running are the three
	// (secrets, kro's Deployments, RGDs) of each engaged ControlPlane.
	cl, _ := provider.Get(ctx, name)
	eventually(g, func() controlplane.KindWatch { return events.KindWatch(name, cl) }).Should(Equal(controlplane.KindWatching))
	eventually(g, runningInformers).Should(Equal(3 * len(provider.Names())))
}

func TestBadAndUnreachableKubeconfigs(t *testing.T) {
	withProvider(t)
	g := NewWithT(t)
	ctx := context.Background()

	_, err := provider.Ensure(controlplane.ClusterName(types.NamespacedName{Namespace: "x", Name: "garbage"}), []byte("not: [a kubeconfig"))
	g.Expect(err).To(MatchError(ContainSubstring("the kubeconfig cannot be parsed")))

	name := controlplane.ClusterName(types.NamespacedName{Namespace: "x", Name: "nowhere"})
	nowhere := regexp.MustCompile(`server: \S+`).ReplaceAll(cpA.Kubeconfig, []byte("server: https://127.0.0.1:1"))
	state, err := provider.Ensure(name, nowhere)
	g.Expect(err).NotTo(HaveOccurred(), "Ensure never waits for the ControlPlane")
	g.Expect(state.Phase).To(Equal(controlplane.Connecting))
	eventually(g, func() controlplane.State { return provider.State(name) }).Should(And(
		HaveField("Phase", controlplane.Unreachable),
		HaveField("Message", ContainSubstring("connect: connection refused")),
	))
	_, err = provider.Get(ctx, name)
	g.Expect(err).To(MatchError(multicluster.ErrClusterNotFound))

	provider.Remove(context.Background(), name)
	g.Expect(provider.State(name).Phase).To(Equal(controlplane.Absent))
	g.Expect(provider.Names()).NotTo(ContainElement(name))
}

// phaseMetric reads service_provider_kro_controlplanes{phase} from the provider's collector.
func phaseMetric(g Gomega, phase string) float64 {
	return collected(g, provider, "service_provider_kro_controlplanes", phase)
}

// collected reads the gauge or counter name{label} from p's collector (its only label),
// or -1 when p does not report it.
func collected(g Gomega, p *controlplane.Provider, name, label string) float64 {
	reg := prometheus.NewRegistry()
	g.Expect(reg.Register(p.Collector())).To(Succeed())
	families, err := reg.Gather()
	g.Expect(err).NotTo(HaveOccurred())
	for _, f := range families {
		for _, m := range f.GetMetric() {
			if f.GetName() == name && m.GetLabel()[0].GetValue() == label {
				return m.GetGauge().GetValue() + m.GetCounter().GetValue()
			}
		}
	}
	return -1
}

// runningInformers counts the informers running in this process, from a goroutine dump.
func runningInformers() int {
	buf := make([]byte, 8<<20)
	return strings.Count(string(buf[:runtime.Stack(buf, true)]), "(*sharedIndexInformer).RunWithContext(")
}

// TestEngagedMeansTheCacheReads: the moment a ControlPlane is reported Engaged, reads
// through its cluster work; before, a reconcile right after a restart could meet "the
// cache is not started". Several engagements, each read at once.
func TestEngagedMeansTheCacheReads(t *testing.T) {
	withProvider(t)
	g := NewWithT(t)
	ctx := context.Background()
	for i := range 8 {
		name := multicluster.ClusterName(fmt.Sprintf("ns/read-at-once-%d", i))
		_, err := provider.Ensure(name, cpA.Kubeconfig)
		g.Expect(err).NotTo(HaveOccurred())
		g.Eventually(func() controlplane.Phase { return provider.State(name).Phase }).
			WithTimeout(20 * time.Second).WithPolling(time.Millisecond).Should(Equal(controlplane.Engaged))
		cl, err := provider.Get(ctx, name)
		g.Expect(err).NotTo(HaveOccurred())
		var list corev1.SecretList
		g.Expect(cl.GetClient().List(ctx, &list, client.InNamespace(clusters.KroNamespace))).To(Succeed(), "engagement %d", i)
		provider.Remove(context.Background(), name)
	}
}

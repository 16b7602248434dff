package controlplane_test

import (
	"context"
	"fmt"
	"regexp"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"

	"github.com/openmcp-project/service-provider-kro/clusters"
	"github.com/openmcp-project/service-provider-kro/providers/controlplane"
	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

// nopAware engages nothing: probing needs only the provider's own clusters.
type nopAware struct{}

func (nopAware) Engage(context.Context, multicluster.ClusterName, cluster.Cluster) error { return nil }

// ownProvider starts a provider of the test's own, so that its probe counts are the
// test's ControlPlane's alone, and returns it with its only ControlPlane engaged from
// kubeconfig and watching the provider's secrets in kro-system (the cache's informer
// is what carries the ControlPlane's events).
func ownProvider(t *testing.T, quiet time.Duration, kubeconfig []byte) (*controlplane.Provider, multicluster.ClusterName) {
	t.Helper()
	g := NewWithT(t)
	p := controlplane.New(controlplane.Options{
		ClusterOptions: []cluster.Option{controlplane.ClusterOptions(clusters.Scheme, clusters.KroNamespace, labels.SelectorFromSet(labels.Set{ownLabel: "true"}), nil, nil)},
		QuietPeriod:    quiet,
		ProbeInterval:  300 * time.Millisecond,
		ProbeTimeout:   time.Second,
		MinBackoff:     200 * time.Millisecond,
		MaxBackoff:     time.Second,
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Start(ctx, nopAware{}) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})

	name := multicluster.ClusterName("probes/" + t.Name())
	_, err := p.Ensure(name, kubeconfig)
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func() controlplane.Phase { return p.State(name).Phase }).WithTimeout(20 * time.Second).Should(Equal(controlplane.Engaged))
	cl, err := p.Get(ctx, name)
	g.Expect(err).NotTo(HaveOccurred())
	_, err = cl.GetCache().GetInformer(ctx, &corev1.Secret{})
	g.Expect(err).NotTo(HaveOccurred())
	return p, name
}

// probes reads service_provider_kro_controlplane_probes_total{cause} from p's collector.
func probes(g Gomega, p *controlplane.Provider, cause string) float64 {
	return collected(g, p, "service_provider_kro_controlplane_probes_total", cause)
}

// ownProviderThroughProxy is ownProvider on cp-a through a proxy of the test's own.
func ownProviderThroughProxy(t *testing.T, quiet time.Duration) (*controlplane.Provider, multicluster.ClusterName, *testenv.Proxy) {
	t.Helper()
	proxy, err := testenv.StartProxy(cpA.Config)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	kubeconfig := regexp.MustCompile(`server: \S+`).ReplaceAll(cpA.Kubeconfig, []byte("server: "+proxy.Config(cpA.Config).Host))
	p, name := ownProvider(t, quiet, kubeconfig)
	return p, name, proxy
}

// TestOnlyQuietControlPlanesAreProbed: a ControlPlane whose watch delivers events more
// often than the quiet period is not probed; once quiet, it is, and stays Engaged.
func TestOnlyQuietControlPlanesAreProbed(t *testing.T) {
	withProvider(t)
	g := NewWithT(t)
	ctx := context.Background()
	const quiet = 2 * time.Second
	p, name := ownProvider(t, quiet, cpA.Kubeconfig)

	busy := ownSecret("busy", true)
	g.Expect(cpA.Client.Create(ctx, busy)).To(Succeed())
	t.Cleanup(func() { _ = cpA.Client.Delete(context.Background(), busy) })
	before := probes(g, p, "quiet")
	for i := range 60 { // 6 s, three quiet periods
		busy.StringData = map[string]string{"k": fmt.Sprint(i)}
		g.Expect(cpA.Client.Update(ctx, busy)).To(Succeed())
		time.Sleep(100 * time.Millisecond)
	}
	g.Expect(probes(g, p, "quiet")).To(Equal(before), "a ControlPlane whose watch delivered every 100 ms was probed")
	g.Expect(probes(g, p, "failure")).To(BeZero())

	g.Eventually(func(g Gomega) float64 { return probes(g, p, "quiet") }).
		WithTimeout(4*quiet).Should(BeNumerically(">=", before+2), "a quiet ControlPlane is probed once in each quiet period")
	g.Expect(p.State(name).Phase).To(Equal(controlplane.Engaged))
}

// TestBrokenConnectionIsProbedAtOnce: when the connection to a ControlPlane breaks, its
// watch's failure calls for a probe at once, long before the quiet period ends.
func TestBrokenConnectionIsProbedAtOnce(t *testing.T) {
	withProvider(t)
	g := NewWithT(t)
	const quiet = time.Minute
	p, name, proxy := ownProviderThroughProxy(t, quiet)

	var list corev1.SecretList
	cl, err := p.Get(context.Background(), name)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cl.GetClient().List(context.Background(), &list, client.InNamespace(clusters.KroNamespace))).To(Succeed())

	proxy.Cut()
	cut := time.Now()
	g.Eventually(func() controlplane.Phase { return p.State(name).Phase }).WithTimeout(quiet / 2).Should(Equal(controlplane.Unreachable))
	t.Logf("reported Unreachable %s after the cut (quiet period %s)", time.Since(cut).Round(time.Millisecond), quiet)
	g.Expect(probes(g, p, "failure")).To(BeNumerically(">=", 1))
	g.Expect(probes(g, p, "quiet")).To(BeZero())

	// While unreachable it is probed every ProbeInterval, and engaged again once healed.
	proxy.Heal()
	g.Eventually(func() controlplane.Phase { return p.State(name).Phase }).WithTimeout(20 * time.Second).Should(Equal(controlplane.Engaged))
	g.Expect(probes(g, p, "unreachable")).To(BeNumerically(">=", 1))
}

// TestSilentControlPlaneIsProbed: a connection that stops answering without failing (a
// network that drops every packet) sends no failure; the quiet period ends in a probe,
// which reports the ControlPlane unreachable.
func TestSilentControlPlaneIsProbed(t *testing.T) {
	withProvider(t)
	g := NewWithT(t)
	const quiet = 2 * time.Second
	p, name, proxy := ownProviderThroughProxy(t, quiet)

	proxy.Stall()
	stalled := time.Now()
	g.Eventually(func() controlplane.Phase { return p.State(name).Phase }).WithTimeout(5 * quiet).Should(Equal(controlplane.Unreachable))
	t.Logf("reported Unreachable %s after the stall (quiet period %s)", time.Since(stalled).Round(time.Millisecond), quiet)
	g.Expect(probes(g, p, "quiet")).To(BeNumerically(">=", 1))
	g.Expect(p.State(name).Message).To(Or(ContainSubstring("deadline exceeded"), ContainSubstring("Timeout exceeded")))
}

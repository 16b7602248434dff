//go:build e2e

package e2e

import (
	"bufio"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/providers/controlplane"
	"github.com/openmcp-project/service-provider-kro/providers/sharding"
	"github.com/openmcp-project/service-provider-kro/test/e2e/env"
)

// shardLease is the replicas' --shard-lease-duration: short, so that the kill below is
// taken over soon.
const shardLease = 6 * time.Second

// Two provider processes with --sharding share two ControlPlanes, one each, with real
// Flux and kro's real chart. One is killed while its Kro is being upgraded: the other
// takes the ControlPlane over and the upgrade completes. It comes back and takes its
// share back; stopped with SIGTERM it hands over without waiting for its Lease.
var _ = Describe("sharded replicas", Ordered, Label("sharding"), func() {
	var (
		se   *env.Env
		r0   string       // the environment's provider, --shard-id=replica-0
		r1   *env.Replica // a second process, --shard-id=replica-1
		a, b *env.ControlPlane
	)
	members := []string{"replica-0", "replica-1"}
	metric := func(url, name string) func() (float64, error) {
		return func() (float64, error) { return scrapeMetric(url, name) }
	}
	getKroIn := func(g Gomega, cp *env.ControlPlane) *v1alpha1.Kro {
		kro := kroOf(cp)
		g.Expect(se.Onboarding.Client.Get(suiteCtx, client.ObjectKeyFromObject(kro), kro)).To(Succeed())
		return kro
	}
	expectReadyIn := func(g Gomega, cp *env.ControlPlane, chartVersion string) {
		kro := getKroIn(g, cp)
		g.Expect(kro.Status.ObservedGeneration).To(Equal(kro.Generation), describeKro(kro))
		g.Expect(kro.Status.Phase).To(Equal(v1alpha1.PhaseReady), describeKro(kro))
		g.Expect(kro.Status.ChartVersion).To(Equal(chartVersion), describeKro(kro))
	}

	BeforeAll(func() {
		backend, err := env.BackendFromEnvironment()
		Expect(err).NotTo(HaveOccurred())
		if backend != env.BackendProcess {
			Skip("the sharded replicas run as local processes, which only the process backend has")
		}
		// One ControlPlane on each replica's share.
		refs := shardedControlPlanes(members)
		start := time.Now()
		se, err = env.Start(suiteCtx, env.Options{
			Dir: filepath.Join(logDir, "sharding"), Log: GinkgoWriter, Backend: backend, ControlPlanes: refs,
			ProviderArgs: []string{"--sharding", "--shard-lease-duration=" + shardLease.String(), "--shard-id=replica-0"},
		})
		DeferCleanup(func() {
			if err := se.Stop(); err != nil {
				fmt.Fprintf(GinkgoWriter, "stopping the sharding environment: %v\n", err)
			}
		})
		Expect(err).NotTo(HaveOccurred())
		r0 = se.MetricsURL()
		r1, err = se.StartReplica(suiteCtx, "replica-1")
		Expect(err).NotTo(HaveOccurred())
		recordTiming("sharding: bring-up", time.Since(start))
		a, b = se.ControlPlane(refs[0].Name), se.ControlPlane(refs[1].Name)
		for _, cp := range []*env.ControlPlane{a, b} {
			Expect(se.Onboarding.Client.Create(suiteCtx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: cp.Namespace}})).To(Succeed())
		}
	})

	It("each replica installs kro on the ControlPlane it owns, and only there", func() {
		for _, cp := range []*env.ControlPlane{a, b} {
			kro := kroOf(cp)
			kro.Spec.Version = "v0.9.3"
			Expect(se.Onboarding.Client.Create(suiteCtx, kro)).To(Succeed())
		}
		measure("sharding: both Kros Ready", func() {
			eventually(4*time.Minute, func(g Gomega) {
				expectReadyIn(g, a, "0.9.3")
				expectReadyIn(g, b, "0.9.3")
			})
		})
		for _, url := range []string{r0, r1.MetricsURL} {
			Eventually(metric(url, "service_provider_kro_shard_members")).Should(BeEquivalentTo(2), url)
			Eventually(metric(url, "service_provider_kro_shard_owned_controlplanes")).Should(BeEquivalentTo(1), url)
			Eventually(metric(url, `service_provider_kro_controlplanes{phase="Engaged"}`)).Should(BeEquivalentTo(1),
				"%s engages only the ControlPlane it owns", url)
		}
	})

	It("takes over a killed replica's ControlPlane, and the upgrade it was given completes", func() {
		Expect(r1.Process.Kill()).To(Succeed())
		killed := time.Now()
		Expect(se.Onboarding.Client.Patch(suiteCtx, kroOf(b), client.RawPatch(types.MergePatchType, []byte(`{"spec":{"version":"v0.9.4"}}`)))).To(Succeed())
		Eventually(metric(r0, `service_provider_kro_controlplanes{phase="Engaged"}`)).WithTimeout(time.Minute).WithPolling(100*time.Millisecond).
			Should(BeEquivalentTo(2), "replica-0 engages both ControlPlanes")
		engaged := time.Since(killed)
		eventually(4*time.Minute, func(g Gomega) { expectReadyIn(g, b, "0.9.4") })
		upgraded := time.Since(killed)
		fmt.Fprintf(GinkgoWriter, "sharding: after SIGKILL (Lease %s), engaged by the other after %s, upgraded after %s\n", shardLease, engaged, upgraded)
		recordTiming("sharding: SIGKILL, taken over", engaged)
		recordTiming("sharding: SIGKILL, upgrade done", upgraded)
		Expect(metric(r0, "service_provider_kro_shard_owned_controlplanes")()).To(BeEquivalentTo(2))
	})

	It("gives the share back to the replica that returns", func() {
		Expect(r1.Restart(suiteCtx)).To(Succeed())
		for _, url := range []string{r0, r1.MetricsURL} {
			Eventually(metric(url, `service_provider_kro_controlplanes{phase="Engaged"}`)).WithTimeout(time.Minute).
				Should(BeEquivalentTo(1), "%s engages one ControlPlane again", url)
		}
		eventually(time.Minute, func(g Gomega) { expectReadyIn(g, b, "0.9.4") })
	})

	It("hands over at once when a replica stops on SIGTERM", func() {
		Expect(r1.Process.Stop()).To(Succeed())
		stopped := time.Now()
		err := se.Platform.Client.Get(suiteCtx, client.ObjectKey{Namespace: se.PodNamespace, Name: "service-provider-" + se.ProviderName + "-replica-1"}, &coordinationv1.Lease{})
		Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the stopped replica gave up its Lease: %v", err)
		Eventually(metric(r0, `service_provider_kro_controlplanes{phase="Engaged"}`)).WithTimeout(time.Minute).WithPolling(100 * time.Millisecond).
			Should(BeEquivalentTo(2))
		fmt.Fprintf(GinkgoWriter, "sharding: after SIGTERM, engaged by the other after %s\n", time.Since(stopped))
		recordTiming("sharding: SIGTERM, taken over", time.Since(stopped))
	})

	It("deletes both Kros, one of them moved, leaving nothing behind", func() {
		for _, cp := range []*env.ControlPlane{a, b} {
			Expect(se.Onboarding.Client.Delete(suiteCtx, kroOf(cp))).To(Succeed())
		}
		eventually(5*time.Minute, func(g Gomega) {
			for _, cp := range []*env.ControlPlane{a, b} {
				err := se.Onboarding.Client.Get(suiteCtx, client.ObjectKeyFromObject(kroOf(cp)), &v1alpha1.Kro{})
				g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "Kro %s still there", cp.Name)
			}
		})
		left, err := se.CheckLeftovers(suiteCtx, true, a, b)
		Expect(err).NotTo(HaveOccurred())
		Expect(left.Orphaned).To(BeEmpty(), "orphaned: %s", left.Names())
	})
})

// shardedControlPlanes picks two ControlPlanes, the first owned by members[0] and the
// second by members[1].
func shardedControlPlanes(members []string) []env.ControlPlaneRef {
	refs := make([]env.ControlPlaneRef, len(members))
	found := 0
	for i := 0; found < len(members); i++ {
		ref := env.ControlPlaneRef{Name: fmt.Sprintf("shard-%d", i), Namespace: fmt.Sprintf("sharded-%d", i)}
		owner := sharding.Owner(string(controlplane.ClusterName(types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name})), members)
		for j, m := range members {
			if owner == m && refs[j].Name == "" {
				refs[j] = ref
				found++
			}
		}
	}
	return refs
}

// scrapeMetric reads one sample, by its name and labels as exposed (e.g.
// `x{phase="Engaged"}`), from a metrics endpoint.
func scrapeMetric(url, sample string) (float64, error) {
	resp, err := http.Get(url) //nolint:gosec,noctx // a local test endpoint
	if err != nil {
		return 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), sample+" "); ok {
			return strconv.ParseFloat(v, 64)
		}
	}
	return 0, fmt.Errorf("%s has no sample %s", url, sample)
}

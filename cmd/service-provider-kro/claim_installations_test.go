package main

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/clusters"
)

// TestOneInstallationPerOnboardingCluster: two installations with the same environment
// name (both standalone, both provider "kro"), on two platform clusters, point at one
// onboarding cluster. The first claims it; the second is refused by init and by run
// with a message that names both, and changes nothing; two replicas of the first (the
// same platform cluster) both start and keep running beside each other.
func TestOneInstallationPerOnboardingCluster(t *testing.T) {
	obOpts, pfOpts := providerClusterOptions(t)
	pf1, pf2 := pfOpts, pfOpts
	pf1.Name, pf2.Name = "platform-1", "platform-2"
	cs := startClusters(t, obOpts, pf1, pf2)
	onboarding := cs[0].Client
	obPath, pf1Path := writeKubeconfigs(t, cs[0], cs[1])
	_, pf2Path := writeKubeconfigs(t, cs[0], cs[2])
	ctx := context.Background()
	// platformUID is what tells the two installations apart.
	platformUID := func(g Gomega, c client.Client) string {
		ns := &corev1.Namespace{}
		g.Expect(c.Get(ctx, client.ObjectKey{Name: metav1.NamespaceSystem}, ns)).To(Succeed())
		g.Expect(ns.UID).NotTo(BeEmpty())
		return string(ns.UID)
	}
	g := NewWithT(t)
	uid1, uid2 := platformUID(g, cs[1].Client), platformUID(g, cs[2].Client)
	g.Expect(uid1).NotTo(Equal(uid2))
	named := func(uid, ns string) string {
		if ns != "" {
			ns = fmt.Sprintf(" in namespace %q", ns)
		}
		return fmt.Sprintf(`environment "standalone" of provider "kro"%s on the platform cluster whose kube-system namespace has UID %s`, ns, uid)
	}
	// the refusal of the installation on platform-2 names itself, then the holder
	// (init without --pod-namespace claims without the namespace).
	refused := func(ns string) string {
		return "installation " + named(uid2, ns) + " cannot serve this onboarding cluster: installation " + named(uid1, "") + " serves it"
	}
	holder := func(g Gomega) string { return kroCRDOf(g, onboarding).Annotations[v1alpha1.AnnotationEnvironment] }
	initOn := func(pfPath string) (string, error) {
		var out bytes.Buffer
		err := dispatch(ctx, []string{"init", "--onboarding-kubeconfig", obPath, "--platform-kubeconfig", pfPath}, &out, &bytes.Buffer{})
		return out.String(), err
	}
	runArgs := func(pfPath string) []string {
		return []string{"run", "--onboarding-kubeconfig", obPath, "--platform-kubeconfig", pfPath, "--pod-namespace", "kro-provider",
			"--leader-elect", "--leader-election-namespace", "kro-provider",
			"--metrics-bind-address", "0", "--health-probe-bind-address", "0"}
	}
	for _, c := range cs[1:] {
		g.Expect(c.Client.Create(ctx, namespace("kro-provider"))).To(Succeed())
	}

	t.Run("init of the first installation claims the onboarding cluster", func(t *testing.T) {
		g := NewWithT(t)
		out, err := initOn(pf1Path)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(out).To(ContainSubstring("onboarding cluster: served by installation " + named(uid1, "")))
		g.Expect(holder(g)).To(Equal("environment=standalone,provider=kro,platform=" + uid1))
	})

	t.Run("init of a second installation of the same environment name is refused", func(t *testing.T) {
		g := NewWithT(t)
		before := kroCRDOf(g, onboarding).ResourceVersion
		out, err := initOn(pf2Path)
		g.Expect(err).To(MatchError(ContainSubstring("init on the onboarding cluster: " + refused(""))))
		g.Expect(err).To(MatchError(ContainSubstring(releaseHint)))
		g.Expect(out).To(BeEmpty(), "nothing was installed")
		g.Expect(kroCRDOf(g, onboarding).ResourceVersion).To(Equal(before), "the second installation left the CRD alone")
	})

	t.Run("run of a second installation of the same environment name refuses to start", func(t *testing.T) {
		g := NewWithT(t)
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		var logs bytes.Buffer
		// In this process: the refusal comes before any controller is set up.
		err := dispatch(ctx, runArgs(pf2Path), &bytes.Buffer{}, &logs)
		g.Expect(err).To(MatchError(ContainSubstring("refusing to start: " + refused("kro-provider"))))
		g.Expect(logs.String()).NotTo(ContainSubstring("starting service-provider-kro"), "no controller was started")
		g.Expect(holder(g)).To(Equal("environment=standalone,provider=kro,platform=" + uid1))
	})

	t.Run("two replicas of the first installation both run", func(t *testing.T) {
		g := NewWithT(t)
		type replica struct {
			logs *syncBuffer
			stop func()
			done <-chan error
		}
		replicas := make([]replica, 2)
		for i := range replicas {
			r := &replicas[i]
			r.logs = &syncBuffer{}
			r.stop, r.done = startProviderProcess(t, runArgs(pf1Path), r.logs)
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("replica %d logs:\n%s", i, r.logs.String())
				}
			})
		}
		for _, r := range replicas {
			g.Eventually(r.logs.String, rbacTimeout, rbacInterval).Should(ContainSubstring("starting service-provider-kro"))
		}
		for i, r := range replicas {
			g.Consistently(r.done, 3*time.Second).ShouldNot(Receive(), "replica %d keeps running beside the other", i)
			g.Expect(r.logs.String()).NotTo(ContainSubstring("cannot serve this onboarding cluster"))
		}
		g.Expect(holder(g)).To(Equal("environment=standalone,provider=kro,platform="+uid1+",namespace=kro-provider"), "run names its namespace in the claim")
		for i, r := range replicas {
			r.stop()
			var err error
			g.Eventually(r.done, rbacTimeout).Should(Receive(&err))
			g.Expect(err).NotTo(HaveOccurred(), "replica %d", i)
		}
	})

	t.Run("replicas of one installation claiming at once both succeed", func(t *testing.T) {
		g := NewWithT(t)
		self := clusters.Claimant{Installation: installationOn(g, cs[1].Client, standaloneEnvironment, "kro-provider")}
		for round := range 10 {
			setClaim(g, onboarding, "")
			results := make([]clusters.Claimed, 2)
			errs := make([]error, 2)
			var wg sync.WaitGroup
			for i := range results {
				wg.Go(func() { results[i], errs[i] = clusters.Claim(ctx, onboarding, self) })
			}
			wg.Wait()
			g.Expect(errs).To(HaveEach(Not(HaveOccurred())), "round %d", round)
			g.Expect(results).To(ConsistOf(clusters.ClaimWritten, clusters.ClaimHeld), "round %d: one wrote the claim, the other found it its own", round)
			g.Expect(holder(g)).To(Equal(self.Claim()), "round %d", round)
		}
	})
}

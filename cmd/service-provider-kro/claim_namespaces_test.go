package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/clusters"
)

// TestInstallationsInTwoNamespaces: two installations of one environment and provider
// name on one platform cluster, in the namespaces kro-a and kro-b, point at one
// onboarding cluster. The one in kro-a, upgraded from the previous release, rewrites
// its claim of the previous format (which named no namespace) with its namespace; the
// one in kro-b is then refused by run and by init, naming both; of the two claiming
// at once, exactly one wins.
func TestInstallationsInTwoNamespaces(t *testing.T) {
	obOpts, pfOpts := providerClusterOptions(t)
	cs := startClusters(t, obOpts, pfOpts)
	onboarding, platform := cs[0].Client, cs[1].Client
	obPath, pfPath := writeKubeconfigs(t, cs[0], cs[1])
	ctx := context.Background()
	for _, ns := range []string{"kro-a", "kro-b"} {
		NewWithT(t).Expect(platform.Create(ctx, namespace(ns))).To(Succeed())
	}
	// init without a namespace writes the claim without it, as the previous release did.
	_, err := initWith(ctx, obPath, pfPath)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	in := func(ns string) clusters.Installation {
		return installationOn(NewWithT(t), platform, standaloneEnvironment, ns)
	}
	holder := func(g Gomega) string { return kroCRDOf(g, onboarding).Annotations[v1alpha1.AnnotationEnvironment] }
	runArgs := func(ns string) []string {
		return []string{"run", "--onboarding-kubeconfig", obPath, "--platform-kubeconfig", pfPath, "--pod-namespace", ns,
			"--leader-elect", "--leader-election-namespace", ns, "--metrics-bind-address", "0", "--health-probe-bind-address", "0"}
	}
	NewWithT(t).Expect(holder(NewWithT(t))).To(Equal(in("").Claim()), "the claim of the previous format")

	t.Run("the installation upgraded from the previous release rewrites its claim with its namespace", func(t *testing.T) {
		g := NewWithT(t)
		logs := &syncBuffer{}
		stop, done := startProviderProcess(t, runArgs("kro-a"), logs)
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("provider logs:\n%s", logs.String())
			}
		})
		g.Eventually(logs.String, rbacTimeout, rbacInterval).Should(ContainSubstring("starting service-provider-kro"))
		g.Expect(logs.String()).To(ContainSubstring("rewrote this installation's claim of the previous format with its namespace"))
		g.Expect(holder(g)).To(Equal(in("kro-a").Claim()))
		g.Expect(holder(g)).To(HaveSuffix(",namespace=kro-a"))
		stop()
		g.Eventually(done, rbacTimeout).Should(Receive(BeNil()))
	})

	refused := "installation " + in("kro-b").String() + " cannot serve this onboarding cluster: installation " + in("kro-a").String() + " serves it"

	t.Run("run of the installation in the other namespace refuses to start", func(t *testing.T) {
		g := NewWithT(t)
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		var logs bytes.Buffer
		err := dispatch(ctx, runArgs("kro-b"), &bytes.Buffer{}, &logs)
		g.Expect(err).To(MatchError(ContainSubstring("refusing to start: " + refused)))
		g.Expect(err).To(MatchError(ContainSubstring(releaseHint)))
		g.Expect(ctx.Err()).NotTo(HaveOccurred(), "refused at once, not run until the deadline")
		g.Expect(logs.String()).NotTo(ContainSubstring("starting service-provider-kro"))
		g.Expect(holder(g)).To(Equal(in("kro-a").Claim()))
	})

	t.Run("init of the installation in the other namespace is refused before changing anything", func(t *testing.T) {
		g := NewWithT(t)
		before := kroCRDOf(g, onboarding).ResourceVersion
		out, err := initWith(ctx, obPath, pfPath, "--pod-namespace", "kro-b")
		g.Expect(err).To(MatchError(ContainSubstring("init on the onboarding cluster: " + refused)))
		g.Expect(out).To(BeEmpty())
		g.Expect(kroCRDOf(g, onboarding).ResourceVersion).To(Equal(before))
	})

	t.Run("init without a namespace leaves its installation's claim as it is", func(t *testing.T) {
		g := NewWithT(t)
		out, err := initWith(ctx, obPath, pfPath)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(out).To(ContainSubstring("served by installation " + in("kro-a").String()))
		g.Expect(holder(g)).To(Equal(in("kro-a").Claim()))
	})

	t.Run("of the two installations claiming at once, one wins", func(t *testing.T) {
		g := NewWithT(t)
		for round := range 10 {
			setClaim(g, onboarding, "")
			namespaces := []string{"kro-a", "kro-b"}
			winner := namespaces[claimAtOnce(ctx, g, onboarding, round, in(namespaces[0]), in(namespaces[1]))]
			g.Expect(holder(g)).To(Equal(in(winner).Claim()), "round %d", round)
		}
	})
}

// TestEarlierClaimFromAnotherPlatform: an earlier version's claim names the environment
// only ("standalone"). It was written from platform-1, where that version's leader
// election left its Lease in the provider's namespace. An installation of the same
// environment on platform-2, where nothing shows that it ran, does not take it over
// (which would stop the provider still running on platform-1); the one on platform-1
// does.
func TestEarlierClaimFromAnotherPlatform(t *testing.T) {
	obOpts, pfOpts := providerClusterOptions(t)
	pf1, pf2 := pfOpts, pfOpts
	pf1.Name, pf2.Name = "platform-1", "platform-2"
	cs := startClusters(t, obOpts, pf1, pf2)
	onboarding := cs[0].Client
	obPath, pf1Path := writeKubeconfigs(t, cs[0], cs[1])
	_, pf2Path := writeKubeconfigs(t, cs[0], cs[2])
	ctx := context.Background()
	g := NewWithT(t)
	for _, c := range cs[1:] {
		g.Expect(c.Client.Create(ctx, namespace("kro-provider"))).To(Succeed())
	}
	g.Expect(cs[1].Client.Create(ctx, lease("kro-provider", "service-provider-kro"))).To(Succeed())
	_, err := initWith(ctx, obPath, pf1Path)
	g.Expect(err).NotTo(HaveOccurred())
	setClaim(g, onboarding, standaloneEnvironment) // as the earlier version on platform-1 wrote it
	holder := func(g Gomega) string { return kroCRDOf(g, onboarding).Annotations[v1alpha1.AnnotationEnvironment] }
	on2 := installationOn(g, cs[2].Client, standaloneEnvironment, "kro-provider")
	refused := "installation " + on2.String() + " cannot serve this onboarding cluster: installation " + earlierClaim(standaloneEnvironment).String() + " serves it"
	notHere := "nothing shows that this installation wrote it (no Lease service-provider-kro or service-provider-kro-<shard> of this provider is in namespace kro-provider on this platform cluster): it may be an installation on another platform cluster"

	t.Run("run on the other platform cluster refuses and leaves the claim alone", func(t *testing.T) {
		g := NewWithT(t)
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		var logs bytes.Buffer
		err := dispatch(ctx, []string{"run", "--onboarding-kubeconfig", obPath, "--platform-kubeconfig", pf2Path, "--pod-namespace", "kro-provider",
			"--metrics-bind-address", "0", "--health-probe-bind-address", "0"}, &bytes.Buffer{}, &logs)
		g.Expect(err).To(MatchError(ContainSubstring("refusing to start: " + refused)))
		g.Expect(err).To(MatchError(ContainSubstring(notHere)))
		g.Expect(logs.String()).NotTo(ContainSubstring("starting service-provider-kro"))
		g.Expect(holder(g)).To(Equal(standaloneEnvironment))
	})

	t.Run("init on the other platform cluster is refused", func(t *testing.T) {
		g := NewWithT(t)
		_, err := initWith(ctx, obPath, pf2Path, "--pod-namespace", "kro-provider")
		g.Expect(err).To(MatchError(ContainSubstring(refused)))
		g.Expect(err).To(MatchError(ContainSubstring(notHere)))
		g.Expect(holder(g)).To(Equal(standaloneEnvironment))
	})

	t.Run("init without the namespace cannot tell, and is refused", func(t *testing.T) {
		g := NewWithT(t)
		_, err := initWith(ctx, obPath, pf1Path)
		g.Expect(err).To(MatchError(ContainSubstring("give the provider's namespace (--pod-namespace), where its Leases are, so that it can look")))
		g.Expect(holder(g)).To(Equal(standaloneEnvironment))
	})

	t.Run("init on the platform cluster it came from takes it over", func(t *testing.T) {
		g := NewWithT(t)
		out, err := initWith(ctx, obPath, pf1Path, "--pod-namespace", "kro-provider")
		g.Expect(err).NotTo(HaveOccurred())
		on1 := installationOn(g, cs[1].Client, standaloneEnvironment, "kro-provider")
		g.Expect(out).To(ContainSubstring("served by installation " + on1.String()))
		g.Expect(out).To(ContainSubstring("taken over from an earlier version's claim of the environment"))
		g.Expect(holder(g)).To(Equal(on1.Claim()))
	})
}

// initWith runs init of the standalone installation "kro" against the two kubeconfigs,
// with extra flags, and returns what it printed.
func initWith(ctx context.Context, obPath, pfPath string, extra ...string) (string, error) {
	var out bytes.Buffer
	args := append([]string{"init", "--onboarding-kubeconfig", obPath, "--platform-kubeconfig", pfPath}, extra...)
	err := dispatch(ctx, args, &out, &bytes.Buffer{})
	return out.String(), err
}

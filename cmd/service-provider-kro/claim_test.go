package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/clusters"
	"github.com/openmcp-project/service-provider-kro/config/crd"
	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

// releaseHint is the part of a refusal that says how to release a claim.
const releaseHint = "release the claim with `kubectl annotate crd " + kroCRD + " " + v1alpha1.AnnotationEnvironment + "-`"

// refusal is what the provider of installation self says when holder serves the cluster.
func refusal(self, holder clusters.Installation) string {
	return fmt.Sprintf("installation %s cannot serve this onboarding cluster: installation %s serves it", self, holder)
}

// earlierClaim is the claim of environment env as an earlier version wrote it.
func earlierClaim(env string) clusters.Installation { return clusters.Installation{Environment: env} }

// installationOn is the installation of environment env of the provider "kro" in
// namespace ns (empty: not known) of the platform cluster platform.
func installationOn(g Gomega, platform client.Client, env, ns string) clusters.Installation {
	uid, err := clusters.PlatformIdentity(context.Background(), platform)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(uid).NotTo(BeEmpty())
	return clusters.Installation{Environment: env, Provider: "kro", Platform: uid, Namespace: ns}
}

// lease is a Lease as a provider's leader election leaves it.
func lease(ns, name string) *coordinationv1.Lease {
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
}

// kroCRDOf reads the Kro CRD of the onboarding cluster.
func kroCRDOf(g Gomega, c client.Client) *apiextensionsv1.CustomResourceDefinition {
	got := &apiextensionsv1.CustomResourceDefinition{}
	g.Expect(c.Get(context.Background(), client.ObjectKey{Name: kroCRD}, got)).To(Succeed())
	return got
}

// setClaim writes the claim annotation of the Kro CRD as someone with kubectl would;
// an empty holder removes it.
func setClaim(g Gomega, c client.Client, holder string) {
	obj := kroCRDOf(g, c)
	patch := client.MergeFrom(obj.DeepCopy())
	if holder == "" {
		delete(obj.Annotations, v1alpha1.AnnotationEnvironment)
	} else {
		if obj.Annotations == nil {
			obj.Annotations = map[string]string{}
		}
		obj.Annotations[v1alpha1.AnnotationEnvironment] = holder
	}
	g.Expect(c.Patch(context.Background(), obj, patch)).To(Succeed())
}

// TestInitClaimsTheOnboardingCluster: init claims the onboarding cluster for its
// environment on the Kro CRD, is idempotent for the same environment, refuses another
// one before changing anything, keeps the claim through a CRD upgrade, and hands the
// cluster to the next environment once the claim is released.
func TestInitClaimsTheOnboardingCluster(t *testing.T) {
	ctx := context.Background()
	cs := startClusters(t, testenv.ClusterOptions{Name: "onboarding"}, testenv.ClusterOptions{Name: "platform"})
	onboarding := cs[0].Client
	obPath, pfPath := writeKubeconfigs(t, cs[0], cs[1])
	initAs := func(env string) (string, error) {
		var out, errOut bytes.Buffer
		err := dispatch(ctx, []string{"init", "--environment", env, "--onboarding-kubeconfig", obPath, "--platform-kubeconfig", pfPath}, &out, &errOut)
		return out.String(), err
	}
	// init without --pod-namespace: the claim names no namespace.
	self := func(env string) clusters.Installation { return installationOn(NewWithT(t), cs[1].Client, env, "") }
	served := func(env, state string) string {
		return "onboarding cluster: served by installation " + self(env).String() + " (" + v1alpha1.AnnotationEnvironment + "=" + self(env).Claim() + " on CRD " + kroCRD + ", " + state + ")"
	}

	t.Run("the first init claims the onboarding cluster", func(t *testing.T) {
		g := NewWithT(t)
		out, err := initAs("env-a")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(out).To(ContainSubstring(served("env-a", "claimed now")))
		g.Expect(kroCRDOf(g, onboarding).Annotations).To(HaveKeyWithValue(v1alpha1.AnnotationEnvironment, self("env-a").Claim()))
	})

	t.Run("init of the same environment again changes nothing", func(t *testing.T) {
		g := NewWithT(t)
		before := kroCRDOf(g, onboarding).ResourceVersion
		out, err := initAs("env-a")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(out).To(ContainSubstring(served("env-a", "already claimed")))
		g.Expect(out).NotTo(ContainSubstring("applied"))
		g.Expect(kroCRDOf(g, onboarding).ResourceVersion).To(Equal(before))
	})

	// An older Kro CRD, as env-a might run it: env-b's init must not upgrade it.
	embedded, err := crd.ForCluster(clusters.Onboarding)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	old := embedded[0].DeepCopy()
	old.Spec.Versions[0].AdditionalPrinterColumns = old.Spec.Versions[0].AdditionalPrinterColumns[:1]

	t.Run("init of another environment fails before changing anything", func(t *testing.T) {
		g := NewWithT(t)
		_, err := clusters.InstallCRDs(ctx, onboarding, []*apiextensionsv1.CustomResourceDefinition{old})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(kroCRDOf(g, onboarding).Annotations).To(HaveKeyWithValue(v1alpha1.AnnotationEnvironment, self("env-a").Claim()), "the CRD's server-side apply keeps the claim")
		before := kroCRDOf(g, onboarding).ResourceVersion

		out, err := initAs("env-b")
		g.Expect(err).To(MatchError(ContainSubstring("init on the onboarding cluster: " + refusal(self("env-b"), self("env-a")))))
		g.Expect(err).To(MatchError(ContainSubstring(releaseHint)))
		g.Expect(out).To(BeEmpty(), "nothing was installed")
		got := kroCRDOf(g, onboarding)
		g.Expect(got.ResourceVersion).To(Equal(before), "env-b's init left env-a's CRD alone")
		g.Expect(got.Spec.Versions[0].AdditionalPrinterColumns).To(HaveLen(1))
		g.Expect(got.Annotations).To(HaveKeyWithValue(v1alpha1.AnnotationEnvironment, self("env-a").Claim()))
	})

	t.Run("an upgrade by the holding environment keeps the claim", func(t *testing.T) {
		g := NewWithT(t)
		out, err := initAs("env-a")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(out).To(ContainSubstring("(applied " + kroCRD + ")"))
		g.Expect(out).To(ContainSubstring(served("env-a", "already claimed")))
		got := kroCRDOf(g, onboarding)
		g.Expect(got.Spec.Versions[0].AdditionalPrinterColumns).To(Equal(embedded[0].Spec.Versions[0].AdditionalPrinterColumns))
		g.Expect(got.Annotations).To(HaveKeyWithValue(v1alpha1.AnnotationEnvironment, self("env-a").Claim()))
	})

	t.Run("a released claim goes to the next environment", func(t *testing.T) {
		g := NewWithT(t)
		setClaim(g, onboarding, "")
		out, err := initAs("env-b")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(out).To(ContainSubstring(served("env-b", "claimed now")))
		g.Expect(kroCRDOf(g, onboarding).Annotations).To(HaveKeyWithValue(v1alpha1.AnnotationEnvironment, self("env-b").Claim()))
		_, err = initAs("env-a")
		g.Expect(err).To(MatchError(ContainSubstring(refusal(self("env-a"), self("env-b")))))
	})

	t.Run("of two environments claiming at once, one wins", func(t *testing.T) {
		g := NewWithT(t)
		for round := range 20 {
			setClaim(g, onboarding, "")
			envs := []string{"env-x", "env-y"}
			winner := envs[claimAtOnce(ctx, g, onboarding, round, self(envs[0]), self(envs[1]))]
			g.Expect(kroCRDOf(g, onboarding).Annotations).To(HaveKeyWithValue(v1alpha1.AnnotationEnvironment, self(winner).Claim()), "round %d", round)
		}
	})
}

// TestRunAndTheClaim: run claims an unclaimed onboarding cluster (CRDs installed
// without init's claim, here as config/onboarding does), claims it again when the claim
// is removed while it runs, stops with an error naming both installations when another
// environment takes it, refuses to start beside another environment, and takes over the
// claim an earlier version wrote for its own environment. The runs that
// get as far as the controllers are child processes, as in the other tests: a process
// can register a controller's name once only.
func TestRunAndTheClaim(t *testing.T) {
	obOpts, pfOpts := providerClusterOptions(t)
	cs := startClusters(t, obOpts, pfOpts)
	onboarding := cs[0].Client
	obPath, pfPath := writeKubeconfigs(t, cs[0], cs[1])
	NewWithT(t).Expect(cs[1].Client.Create(context.Background(), namespace("kro-provider"))).To(Succeed())
	args := func(env ...string) []string {
		args := []string{"run", "--onboarding-kubeconfig", obPath, "--platform-kubeconfig", pfPath, "--pod-namespace", "kro-provider",
			"--metrics-bind-address", "0", "--health-probe-bind-address", "0"}
		for _, e := range env {
			args = append(args, "--environment", e)
		}
		return args
	}
	start := func(t *testing.T, env ...string) (logs *syncBuffer, stop func(), done <-chan error) {
		logs = &syncBuffer{}
		stop, done = startProviderProcess(t, args(env...), logs)
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("provider logs:\n%s", logs.String())
			}
		})
		return logs, stop, done
	}
	holder := func(g Gomega) string { return kroCRDOf(g, onboarding).Annotations[v1alpha1.AnnotationEnvironment] }
	self := func(env string) clusters.Installation {
		return installationOn(NewWithT(t), cs[1].Client, env, "kro-provider")
	}

	t.Run("run claims the cluster, keeps the claim and stops when another environment takes it", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(holder(g)).To(BeEmpty(), "the CRD starts unclaimed")
		logs, _, done := start(t) // no --environment: the claim is "standalone"
		g.Eventually(logs.String, rbacTimeout, rbacInterval).Should(ContainSubstring("starting service-provider-kro"))
		g.Expect(holder(g)).To(Equal(self(standaloneEnvironment).Claim()), "claimed before the controllers start")

		setClaim(g, onboarding, "")
		g.Eventually(holder, rbacTimeout, rbacInterval).Should(Equal(self(standaloneEnvironment).Claim()), "a removed claim is written again while the provider serves the cluster")
		g.Consistently(done, 2*time.Second).ShouldNot(Receive(), "the provider keeps running")

		setClaim(g, onboarding, "env-b") // as an earlier version of env-b writes it
		var err error
		g.Eventually(done, rbacTimeout).Should(Receive(&err), "the provider stops when another environment takes the claim")
		g.Expect(err).To(MatchError(ContainSubstring("exit status 1")))
		g.Expect(logs.String()).To(ContainSubstring("error: stopped: " + refusal(self(standaloneEnvironment), earlierClaim("env-b"))))
		g.Expect(logs.String()).To(ContainSubstring(releaseHint))
		g.Expect(holder(g)).To(Equal("env-b"), "the stopping provider leaves the other environment's claim alone")
	})

	t.Run("run of another environment refuses to start", func(t *testing.T) {
		g := NewWithT(t)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var logs bytes.Buffer
		// In this process: the refusal comes before any controller is set up.
		err := dispatch(ctx, args("env-c"), &bytes.Buffer{}, &logs)
		g.Expect(err).To(MatchError(ContainSubstring("refusing to start: " + refusal(self("env-c"), earlierClaim("env-b")))))
		g.Expect(err).To(MatchError(ContainSubstring(releaseHint)))
		g.Expect(ctx.Err()).NotTo(HaveOccurred(), "refused at once, not run until the deadline")
		g.Expect(logs.String()).NotTo(ContainSubstring("starting service-provider-kro"), "no controller was started")
		g.Expect(holder(g)).To(Equal("env-b"))
	})

	t.Run("run of the environment an earlier version claimed refuses without a trace of itself on the platform cluster", func(t *testing.T) {
		g := NewWithT(t)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		err := dispatch(ctx, args("env-b"), &bytes.Buffer{}, &bytes.Buffer{})
		g.Expect(err).To(MatchError(ContainSubstring("refusing to start: " + refusal(self("env-b"), earlierClaim("env-b")))))
		g.Expect(err).To(MatchError(ContainSubstring("no Lease service-provider-kro or service-provider-kro-<shard> of this provider is in namespace kro-provider on this platform cluster")))
		g.Expect(holder(g)).To(Equal("env-b"), "the bare claim may be another platform cluster's: left alone")
	})

	t.Run("run of the environment an earlier version claimed takes the claim over and starts", func(t *testing.T) {
		g := NewWithT(t)
		// The Lease the earlier version's leader election left in the namespace.
		g.Expect(cs[1].Client.Create(context.Background(), lease("kro-provider", "service-provider-kro"))).To(Succeed())
		logs, stop, done := start(t, "env-b")
		g.Eventually(logs.String, rbacTimeout, rbacInterval).Should(ContainSubstring("starting service-provider-kro"))
		g.Expect(logs.String()).To(ContainSubstring("took over an earlier version's claim of the onboarding cluster for this environment"))
		g.Expect(holder(g)).To(Equal(self("env-b").Claim()), "the claim names the installation now")
		g.Consistently(done, 2*time.Second).ShouldNot(Receive())
		stop()
		var err error
		g.Eventually(done, rbacTimeout).Should(Receive(&err))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(holder(g)).To(Equal(self("env-b").Claim()))
	})
}

// claimAtOnce has every installation claim the onboarding cluster at the same time and
// returns the index of the one that believes it holds the claim: exactly one, every
// other having lost with a ClaimError.
func claimAtOnce(ctx context.Context, g Gomega, onboarding client.Client, round int, installations ...clusters.Installation) int {
	results := make([]error, len(installations))
	var wg sync.WaitGroup
	for i, in := range installations {
		wg.Go(func() { _, results[i] = clusters.Claim(ctx, onboarding, clusters.Claimant{Installation: in}) })
	}
	wg.Wait()
	var winners []int
	for i, err := range results {
		var lost *clusters.ClaimError
		switch {
		case err == nil:
			winners = append(winners, i)
		case !errors.As(err, &lost):
			g.Expect(err).NotTo(HaveOccurred(), "round %d", round)
		}
	}
	g.Expect(winners).To(HaveLen(1), "round %d: exactly one installation believes it holds the claim", round)
	return winners[0]
}

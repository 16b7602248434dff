//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/openmcp-project/service-provider-kro/test/e2e/env"
)

// The fault suite: the provider in the end-to-end environment, one fault at a time while
// Kros are installed, upgraded or deleted. Each spec records a row of docs/measurements/reliability.md
// (see faults_report_test.go): whether the Kros converged, how long that took, and what
// was left once they were gone (env.CheckLeftovers). It has an environment of its own,
// with the standalone grace period shortened to accessGracePeriod.

const (
	// accessGracePeriod is the provider's --access-grace-period in the faults environment.
	accessGracePeriod = 20 * time.Second
	// platformOutage is how long the platform's API server stays down.
	platformOutage = 5 * time.Second
	// kubeconfigGap is how long a kubeconfig secret replaced by delete-and-recreate is
	// missing at least (the provider must have seen it missing first).
	kubeconfigGap = 2 * time.Second
	// poll is how often the fault specs look, fine enough for the times they report.
	poll = 200 * time.Millisecond
)

// loadKros is the number of Kros installed at once while the platform's API server
// restarts (FAULTS_KROS overrides it): the two ControlPlanes of the faults environment
// plus ControlPlanes added for that spec and removed after it.
var loadKros = max(envInt("FAULTS_KROS", 20), 2)

var fe *env.Env // the environment of the fault container that runs

// ContinueOnFailure: every fault gets its row, also when an earlier one failed; each spec
// starts from no Kro on its ControlPlane, and ends there unless it failed. Each fault
// breaks a part of this container's own environment, so the container runs beside the
// others (SpecPriority: it is one of the longest, so it starts first); only the fault
// under load runs alone (below).
var _ = Describe("faults", Ordered, ContinueOnFailure, Label("faults"), SpecPriority(1), func() {
	var a, b *env.ControlPlane // a serves most faults; b is given up for good at the end
	cpA := func() *env.ControlPlane { return a }
	cpB := func() *env.ControlPlane { return b }

	BeforeAll(func() { a, b = startFaultsEnv(singleFaultsPart, "the faults") })

	// The faults in the order they run, each group in a file faults_<topic>_test.go (the
	// hand-overs in handover_test.go).
	providerKilledSpecs(cpA)
	fluxDownSpecs(cpA)
	controlPlaneDownSpecs(cpA)
	handOverSpecs(cpA)
	deletionBlockedSpecs(cpA)
	gracePeriodSpecs(cpA, cpB)
})

// Serial: with parallel processes it runs alone, after every other container; its 20
// installs at once bring up 18 more kwok ControlPlanes, and beside another container's
// environment that pushed two cores to a load of 55 and stalled both (2026-12-07).
var _ = Describe("faults under load", Ordered, ContinueOnFailure, Label("faults"), Serial, func() {
	var a, b *env.ControlPlane
	BeforeAll(func() {
		releaseSharedEnv() // every container that used it has run (Serial)
		a, b = startFaultsEnv(loadFaultPart, "the fault under load", loadNamespace)
	})
	platformRestartSpecs(func() *env.ControlPlane { return a }, func() *env.ControlPlane { return b })
})

// startFaultsEnv starts the running fault container's environment, with the ControlPlanes
// fault-a and fault-b, the provider's grace period shortened, and the onboarding
// namespaces given, and gives the container its part of the report (named part, called
// title in the report); the environment stops and the part is kept when the container ends.
func startFaultsEnv(part, title string, namespaces ...string) (a, b *env.ControlPlane) {
	GinkgoHelper()
	backend, err := env.BackendFromEnvironment()
	Expect(err).NotTo(HaveOccurred())
	if backend != env.BackendProcess {
		Skip("the fault suite stops and starts API servers, which only the process backend can")
	}
	report = &reportPart{name: part, title: title, started: time.Now()}
	report.load.start()
	fe, err = env.Start(suiteCtx, env.Options{
		Dir: filepath.Join(logDir, part), Log: GinkgoWriter, Backend: backend,
		ControlPlanes: []env.ControlPlaneRef{{Name: "fault-a", Namespace: "faults-a"}, {Name: "fault-b", Namespace: "faults-b"}},
		ProviderArgs:  []string{"--access-grace-period=" + accessGracePeriod.String()},
	})
	own := report
	DeferCleanup(func() {
		start := time.Now()
		if err := fe.Stop(); err != nil {
			fmt.Fprintf(GinkgoWriter, "stopping the %s environment: %v\n", part, err)
		}
		own.teardown = time.Since(start)
		own.finished = time.Now()
		own.load.end()
		keepReport(own)
	})
	Expect(err).NotTo(HaveOccurred())
	report.bringUp = time.Since(report.started)
	recordTiming(part+": bring-up", report.bringUp)
	a, b = fe.ControlPlane("fault-a"), fe.ControlPlane("fault-b")
	for _, ns := range append([]string{a.Namespace, b.Namespace}, namespaces...) {
		Expect(fe.Onboarding.Client.Create(suiteCtx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
	}
	return a, b
}

const loadNamespace = "faults-load"

func envInt(name string, def int) int {
	var n int
	if _, err := fmt.Sscan(os.Getenv(name), &n); err != nil || n < 1 {
		return def
	}
	return n
}

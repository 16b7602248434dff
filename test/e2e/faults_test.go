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

var fe *env.Env // the faults environment

// ContinueOnFailure: every fault gets its row, also when an earlier one failed; each spec
// starts from no Kro on its ControlPlane, and ends there unless it failed. Serial: with
// parallel processes it runs alone, after every other container; its 20 installs at once
// bring up 18 more kwok ControlPlanes, and beside another container's environment that
// pushed two cores to a load of 55 and stalled both (2026-12-07).
var _ = Describe("faults", Ordered, ContinueOnFailure, Label("faults"), Serial, func() {
	var a, b *env.ControlPlane // a serves most faults; b is given up for good at the end
	cpA := func() *env.ControlPlane { return a }
	cpB := func() *env.ControlPlane { return b }

	BeforeAll(func() {
		backend, err := env.BackendFromEnvironment()
		Expect(err).NotTo(HaveOccurred())
		if backend != env.BackendProcess {
			Skip("the fault suite stops and starts API servers, which only the process backend can")
		}
		releaseSharedEnv() // every container that used it has run (Serial)
		report.started = time.Now()
		report.load.start()
		fe, err = env.Start(suiteCtx, env.Options{
			Dir: filepath.Join(logDir, "faults"), Log: GinkgoWriter, Backend: backend,
			ControlPlanes: []env.ControlPlaneRef{{Name: "fault-a", Namespace: "faults-a"}, {Name: "fault-b", Namespace: "faults-b"}},
			ProviderArgs:  []string{"--access-grace-period=" + accessGracePeriod.String()},
		})
		DeferCleanup(func() {
			start := time.Now()
			if err := fe.Stop(); err != nil {
				fmt.Fprintf(GinkgoWriter, "stopping the faults environment: %v\n", err)
			}
			report.teardown = time.Since(start)
			report.finished = time.Now()
			report.load.end()
			keepReport()
		})
		Expect(err).NotTo(HaveOccurred())
		report.bringUp = time.Since(report.started)
		recordTiming("faults: bring-up", report.bringUp)
		a, b = fe.ControlPlane("fault-a"), fe.ControlPlane("fault-b")
		for _, ns := range []string{a.Namespace, b.Namespace, loadNamespace} {
			Expect(fe.Onboarding.Client.Create(suiteCtx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
		}
	})

	// The faults in the order they run, each group in a file faults_<topic>_test.go (the
	// hand-overs in handover_test.go).
	providerKilledSpecs(cpA)
	fluxDownSpecs(cpA)
	controlPlaneDownSpecs(cpA)
	handOverSpecs(cpA)
	deletionBlockedSpecs(cpA)
	platformRestartSpecs(cpA, cpB)
	gracePeriodSpecs(cpA, cpB)
})

const loadNamespace = "faults-load"

func envInt(name string, def int) int {
	var n int
	if _, err := fmt.Sscan(os.Getenv(name), &n); err != nil || n < 1 {
		return def
	}
	return n
}

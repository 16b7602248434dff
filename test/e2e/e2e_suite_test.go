//go:build e2e

// Package e2e runs the provider's whole lifecycle against real clusters, a real Flux
// and a registry holding kro's real chart (see test/e2e/env). Run it with
// `go tool task test-e2e`; E2E_CLUSTERS=kind uses kind clusters instead of processes.
package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	"github.com/onsi/ginkgo/v2/types"
	. "github.com/onsi/gomega"

	"github.com/openmcp-project/service-provider-kro/test/e2e/env"
)

func TestE2E(t *testing.T) {
	RegisterFailHandler(Fail)
	backend, err := env.BackendFromEnvironment()
	if err != nil {
		t.Fatal(err)
	}
	suiteConfig, reporterConfig := GinkgoConfiguration()
	suiteConfig.LabelFilter = backendLabelFilter(backend, suiteConfig.LabelFilter)
	RunSpecs(t, "service-provider-kro e2e", suiteConfig, reporterConfig)
}

// backendLabelFilter narrows the label filter to the backend's specs: with kind clusters
// only the specs labelled kind run (the others start processes and kwok clusters of their
// own); with processes every spec but those.
func backendLabelFilter(backend env.Backend, filter string) string {
	own := "!kind"
	if backend == env.BackendKind {
		own = "kind"
	}
	if filter == "" {
		return own
	}
	return "(" + filter + ") && " + own
}

var (
	e        *env.Env
	logDir   string
	timings  []timing
	suiteCtx context.Context
	cancel   context.CancelFunc
)

type timing struct {
	stage string
	d     time.Duration
}

// measure records how long a stage of the lifecycle took, for the timing summary.
func measure(stage string, f func()) {
	GinkgoHelper()
	start := time.Now()
	f()
	timings = append(timings, timing{stage, time.Since(start)})
	fmt.Fprintf(GinkgoWriter, "timing: %s took %s\n", stage, time.Since(start).Round(100*time.Millisecond))
}

var _ = BeforeSuite(func() {
	suiteCtx, cancel = context.WithTimeout(context.Background(), 50*time.Minute)
	backend, err := env.BackendFromEnvironment()
	Expect(err).NotTo(HaveOccurred())
	if base := os.Getenv("TESTENV_LOG_DIR"); base != "" {
		Expect(os.MkdirAll(base, 0o755)).To(Succeed())
		logDir, err = os.MkdirTemp(base, "e2e-")
	} else {
		logDir, err = os.MkdirTemp("", "kro-e2e-")
	}
	Expect(err).NotTo(HaveOccurred())
	fmt.Fprintf(GinkgoWriter, "backend %s; processes log into %s\n", backend, logDir)
	if backend == env.BackendKind || !Label().MatchesLabelFilter(GinkgoLabelFilter()) {
		// Only the lifecycle specs, which carry no label, use the shared environment; the
		// labelled containers (openmcp, faults, kind) start environments of their own.
		fmt.Fprintf(GinkgoWriter, "the label filter %q leaves out the lifecycle specs: the shared environment is not started\n", GinkgoLabelFilter())
		DeferCleanup(cancel)
		return
	}

	start := time.Now()
	e, err = env.Start(suiteCtx, env.Options{Dir: logDir, Log: GinkgoWriter, Backend: backend})
	DeferCleanup(func() {
		if err := e.Stop(); err != nil {
			fmt.Fprintf(GinkgoWriter, "stopping the environment: %v\n", err)
		}
		cancel()
	})
	Expect(err).NotTo(HaveOccurred())
	for _, t := range e.Timings {
		timings = append(timings, timing{"bring-up: " + t.Step, t.Duration})
	}
	timings = append(timings, timing{"bring-up (total)", time.Since(start)})
})

var _ = ReportAfterSuite("timings", func(r Report) {
	// Printed to stdout, so that it shows in every run's output.
	fmt.Println("e2e timings:")
	for _, t := range timings {
		fmt.Printf("  %-44s %s\n", t.stage, t.d.Round(100*time.Millisecond))
	}
	if !r.SuiteSucceeded {
		fmt.Printf("the logs of every process are kept in %s\n", logDir)
		writeFailureDigest(r)
	} else if logDir != "" && os.Getenv("TESTENV_LOG_DIR") == "" {
		_ = os.RemoveAll(filepath.Clean(logDir))
	}
})

// FailureDigestEnv names a file that a failed run writes a short digest of its failures
// into: each failed spec, where it failed, and the start and the end of its message. CI
// prints it last, where the end of a long log is all that is shown.
const FailureDigestEnv = "E2E_FAILURE_DIGEST"

func writeFailureDigest(r Report) {
	path := os.Getenv(FailureDigestEnv)
	if path == "" {
		return
	}
	var b strings.Builder
	for _, s := range r.SpecReports {
		if !s.State.Is(types.SpecStateFailureStates) {
			continue
		}
		// The start says what was expected, the end mostly what went wrong.
		msg := strings.Split(strings.TrimSpace(s.Failure.Message), "\n")
		if len(msg) > 16 {
			msg = slices.Concat(msg[:4], []string{fmt.Sprintf("… (%d lines)", len(msg)-16)}, msg[len(msg)-12:])
		}
		fmt.Fprintf(&b, "%s %q in %s at %s after %s:\n  %s\n", s.State, s.FullText(), s.Failure.FailureNodeType,
			s.Failure.Location, s.RunTime.Round(time.Second), strings.Join(msg, "\n  "))
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		fmt.Printf("writing the failure digest: %v\n", err)
	}
}

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
	// e is the environment the unlabelled specs share; useSharedEnv starts it, once per
	// test process, when the first of them runs. The labelled containers start their own.
	e        *env.Env
	eErr     error
	backend  env.Backend
	runDir   string // the run's log folder, shared by every parallel process
	logDir   string // this process's log folder: runDir, or a folder of its own under it
	suiteCtx context.Context
	cancel   context.CancelFunc
)

// timingEntry prefixes the report entries that hold a stage's time.
const timingEntry = "timing: "

// recordTiming keeps how long a stage took for the timing summary at the suite's end. It
// is a report entry of the running spec, so that the summary holds the stages of every
// parallel process (ginkgo -p).
func recordTiming(stage string, d time.Duration) {
	AddReportEntry(timingEntry+stage, d.Round(100*time.Millisecond).String(), ReportEntryVisibilityNever)
	fmt.Fprintf(GinkgoWriter, "timing: %s took %s\n", stage, d.Round(100*time.Millisecond))
}

// measure records how long a stage of the lifecycle took, for the timing summary.
func measure(stage string, f func()) {
	GinkgoHelper()
	start := time.Now()
	f()
	recordTiming(stage, time.Since(start))
}

// The first process makes the run's log folder; with parallel processes (ginkgo -p) each
// logs into a folder of its own under it, so that the kept logs of a failed run are all
// in one place.
var _ = SynchronizedBeforeSuite(func() []byte {
	var dir string
	var err error
	if base := os.Getenv("TESTENV_LOG_DIR"); base != "" {
		Expect(os.MkdirAll(base, 0o755)).To(Succeed())
		dir, err = os.MkdirTemp(base, "e2e-")
	} else {
		dir, err = os.MkdirTemp("", "kro-e2e-")
	}
	Expect(err).NotTo(HaveOccurred())
	return []byte(dir)
}, func(dir []byte) {
	suiteCtx, cancel = context.WithTimeout(context.Background(), 50*time.Minute)
	DeferCleanup(func() { cancel() })
	var err error
	backend, err = env.BackendFromEnvironment()
	Expect(err).NotTo(HaveOccurred())
	runDir, logDir = string(dir), string(dir)
	if suiteConfig, _ := GinkgoConfiguration(); suiteConfig.ParallelTotal > 1 {
		logDir = filepath.Join(runDir, fmt.Sprintf("process-%d", GinkgoParallelProcess()))
		Expect(os.MkdirAll(logDir, 0o755)).To(Succeed())
	}
	fmt.Fprintf(GinkgoWriter, "backend %s; processes log into %s\n", backend, logDir)
})

// useSharedEnv starts the shared environment unless this process has it already; the
// containers of the unlabelled specs call it first thing. A start that failed is not
// tried again: every container that needs it fails with the same error.
func useSharedEnv() {
	GinkgoHelper()
	if e == nil && eErr == nil {
		start := time.Now()
		e, eErr = env.Start(suiteCtx, env.Options{Dir: logDir, Log: GinkgoWriter, Backend: backend})
		if eErr == nil {
			for _, t := range e.Timings {
				recordTiming("bring-up: "+t.Step, t.Duration)
			}
			recordTiming("bring-up (total)", time.Since(start))
		}
	}
	Expect(eErr).NotTo(HaveOccurred(), "starting the shared environment")
}

// releaseSharedEnv stops the shared environment, if this process started it; a container
// that needs it afterwards starts it again.
func releaseSharedEnv() {
	if err := e.Stop(); err != nil {
		fmt.Fprintf(GinkgoWriter, "stopping the environment: %v\n", err)
	}
	e, eErr = nil, nil
}

var _ = AfterSuite(releaseSharedEnv)

var _ = ReportAfterSuite("timings and reports", func(r Report) {
	// Printed to stdout, so that it shows in every run's output. With parallel processes
	// this runs on the first, after every process has finished, with all their specs.
	fmt.Println("e2e timings:")
	for _, s := range r.SpecReports {
		for _, entry := range s.ReportEntries {
			if stage, ok := strings.CutPrefix(entry.Name, timingEntry); ok {
				fmt.Printf("  %-44s %s\n", stage, entry.StringRepresentation())
			}
		}
	}
	reliabilityReport(r) // from the parts in runDir, so before it is removed
	if !r.SuiteSucceeded {
		fmt.Printf("the logs of every process are kept in %s\n", runDir)
		writeFailureDigest(r)
	} else if runDir != "" && os.Getenv("TESTENV_LOG_DIR") == "" {
		_ = os.RemoveAll(filepath.Clean(runDir))
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
		// What the environment logged last (the cluster provider's grants and revocations,
		// the processes' starts and stops) is often the evidence of why.
		if out := strings.Split(strings.TrimSpace(s.CapturedGinkgoWriterOutput), "\n"); len(out) > 0 && out[0] != "" {
			fmt.Fprintf(&b, "  its last lines of output:\n    %s\n", strings.Join(out[max(0, len(out)-15):], "\n    "))
		}
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		fmt.Printf("writing the failure digest: %v\n", err)
	}
}

package env

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

// What Env (standalone) and OpenMCPEnv (under openmcp-operator) both do while they come
// up and go down: timed steps, the process backend's clusters, building the provider, and
// kro's controllers per ControlPlane.

// runStep runs one step of a bring-up, records how long it took and says so on log; an
// error names the step.
func runStep(log io.Writer, timings *[]testenv.Timing, name string, f func() error) error {
	start := time.Now()
	if err := f(); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	*timings = append(*timings, testenv.Timing{Step: name, Duration: time.Since(start)})
	fmt.Fprintf(log, "env: %s took %s\n", name, time.Since(start).Round(100*time.Millisecond))
	return nil
}

// processClusters is what testenv.StartE2E starts for the process backend (a platform
// and an onboarding API server, kwok ControlPlanes, the registry with kro's charts and
// Flux), as this package's Clusters.
type processClusters struct {
	platform, onboarding *Cluster
	// controlPlanes are in the order of the names asked for.
	controlPlanes []*Cluster
	registry      *testenv.OCIRegistry
	chartURL      string
	// timings are testenv's steps, then the whole.
	timings []testenv.Timing
	stop    func() error
	// te is testenv's environment, for faults (API servers and controllers stopped and
	// started again) and ControlPlanes added later.
	te *testenv.E2E
}

func startProcessClusters(ctx context.Context, log io.Writer, dir string, controlPlanes []string, fluxSelector string) (*processClusters, error) {
	start := time.Now()
	te, err := testenv.StartE2E(ctx, log, testenv.E2EOptions{
		Dir:                    dir,
		OtherClusters:          []testenv.ClusterOptions{{Name: "onboarding"}},
		ControlPlanes:          controlPlanes,
		FluxWatchLabelSelector: fluxSelector,
	})
	if err != nil {
		return nil, err
	}
	pc := &processClusters{registry: te.Registry, chartURL: te.ChartURL, stop: te.Stop, te: te}
	for _, t := range te.Timings {
		pc.timings = append(pc.timings, testenv.Timing{Step: "env: " + t.Step, Duration: t.Duration})
	}
	pc.timings = append(pc.timings, testenv.Timing{Step: "clusters, registry, flux", Duration: time.Since(start)})
	pc.platform = &Cluster{Name: "platform", Config: te.Platform.Config, Client: te.Platform.Client, Kubeconfig: te.Platform.Kubeconfig}
	ob := te.Others[0]
	pc.onboarding = &Cluster{Name: "onboarding", Config: ob.Config, Client: ob.Client, Kubeconfig: ob.Kubeconfig}
	for _, kc := range te.ControlPlanes {
		pc.controlPlanes = append(pc.controlPlanes, &Cluster{Name: kc.Name, Config: kc.Config, Client: kc.Client, Kubeconfig: kc.Kubeconfig})
	}
	return pc, nil
}

// buildProvider builds the provider from this repository into out (a path below the
// repository's root), with extraEnv (such as GOOS and GOARCH) added to this process's
// environment, and returns the binary's path. Go's build cache makes a rebuild cheap.
func buildProvider(ctx context.Context, log io.Writer, out string, extraEnv ...string) (string, error) {
	root, err := testenv.RepoRoot()
	if err != nil {
		return "", err
	}
	out = filepath.Join(root, out)
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return "", err
	}
	// The parallel processes of the suite build the same binary: one at a time, so that
	// none runs it while another writes it.
	unlock, err := testenv.LockFile(out + ".lock")
	if err != nil {
		return "", err
	}
	defer unlock()
	start := time.Now()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./cmd/service-provider-kro")
	cmd.Dir = root
	if len(extraEnv) > 0 {
		cmd.Env = append(os.Environ(), extraEnv...)
	}
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/service-provider-kro: %w\n%s", err, b)
	}
	fmt.Fprintf(log, "env: built %s in %s\n", out, time.Since(start).Round(100*time.Millisecond))
	return out, nil
}

// kroControllers runs kro's controller per ControlPlane: a kwok ControlPlane runs no pods,
// so on the process backend kro's chart installs only kro's CRDs and its controller runs
// here as a process. The zero value is ready; after stopAll it starts nothing more.
type kroControllers struct {
	mu      sync.Mutex
	running map[string]*testenv.Process
	stopped bool
}

// start runs kro's controller against cp once its chart has installed kro's CRDs (it
// waits for them), with its files below dir/kro/<name>. It does nothing if one runs for
// cp already.
func (k *kroControllers) start(ctx context.Context, log io.Writer, dir string, cp *Cluster) error {
	k.mu.Lock()
	_, running := k.running[cp.Name]
	k.mu.Unlock()
	if running {
		return nil
	}
	if err := testenv.WaitForCRD(ctx, cp.Client, RGDCRD, time.Second); err != nil {
		return fmt.Errorf("%s: %w", cp.Name, err)
	}
	p, err := testenv.StartKroController(ctx, log, testenv.KroControllerOptions{
		Name:       "kro-controller-" + cp.Name,
		Kubeconfig: cp.Kubeconfig,
		Dir:        filepath.Join(dir, "kro", cp.Name),
	})
	if err != nil {
		return err
	}
	return k.add(cp.Name, p)
}

// add records a controller started under name; stopAll stops it, and so does stop(name).
func (k *kroControllers) add(name string, p *testenv.Process) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.stopped { // stopped meanwhile
		return p.Stop()
	}
	if k.running == nil {
		k.running = map[string]*testenv.Process{}
	}
	k.running[name] = p
	return nil
}

// stop stops the controller of the ControlPlane of that name, if one runs.
func (k *kroControllers) stop(name string) error {
	k.mu.Lock()
	p := k.running[name]
	delete(k.running, name)
	k.mu.Unlock()
	return p.Stop()
}

// stopAll stops every controller and any that start meanwhile.
func (k *kroControllers) stopAll() error {
	k.mu.Lock()
	running := k.running
	k.running, k.stopped = nil, true
	k.mu.Unlock()
	var errs []error
	for _, p := range running {
		errs = append(errs, p.Stop())
	}
	return errors.Join(errs...)
}

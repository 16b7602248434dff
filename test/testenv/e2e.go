package testenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"sync"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// KroChartVersions are the versions of kro's chart the end-to-end environment
// publishes by default: an older one to upgrade from, and KroModule's.
var KroChartVersions = []string{"0.9.3", "0.9.4"}

// E2EOptions configures StartE2E.
type E2EOptions struct {
	// Dir holds the files and logs of every process.
	Dir string
	// PlatformCRDDirs and PlatformCRDs are installed on the platform cluster besides
	// Flux's CRDs.
	PlatformCRDDirs []string
	PlatformCRDs    []*apiextensionsv1.CustomResourceDefinition
	// OtherClusters are more API servers (e.g. the onboarding cluster) started with the
	// platform cluster.
	OtherClusters []ClusterOptions
	// ControlPlanes names the kwok clusters to create.
	ControlPlanes []string
	// ChartRepository is the registry path the kro chart is pushed under; default
	// "charts", so the chart is at Registry.URL("charts/kro").
	ChartRepository string
	// KroChartVersions to publish; default KroChartVersions.
	KroChartVersions []string
	// FluxWatchLabelSelector is Flux's --watch-label-selector (FluxOptions).
	FluxWatchLabelSelector string
}

// E2E is the whole end-to-end environment: a platform cluster running Flux, a TLS
// registry with basic auth holding kro's chart, and kwok ControlPlanes.
type E2E struct {
	// Platform is the platform cluster; Flux's CRDs are installed there.
	Platform *Cluster
	// Others are the clusters of E2EOptions.OtherClusters, in order.
	Others []*Cluster
	// Registry holds the kro chart; Flux trusts its CA.
	Registry *OCIRegistry
	// Flux runs against Platform.
	Flux *Flux
	// ControlPlanes are the kwok clusters, in the order of E2EOptions.ControlPlanes.
	ControlPlanes []*KwokCluster
	// ChartURL is the kro chart's oci:// URL (without tag).
	ChartURL string
	// Timings says how long each step of StartE2E took.
	Timings []Timing

	dir      string
	mu       sync.Mutex // guards ControlPlanes after StartE2E
	stopOnce sync.Once
	stopErr  error
}

// Timing is the duration of one step.
type Timing struct {
	Step     string
	Duration time.Duration
}

// StartE2E builds (once) the binaries it starts (SandboxTools) and starts the
// environment. On error, whatever was started is stopped again; otherwise call Stop
// (e.g. in t.Cleanup).
func StartE2E(ctx context.Context, log io.Writer, opts E2EOptions) (_ *E2E, err error) {
	if opts.ChartRepository == "" {
		opts.ChartRepository = "charts"
	}
	if opts.KroChartVersions == nil {
		opts.KroChartVersions = KroChartVersions
	}
	e := &E2E{dir: opts.Dir}
	defer func() {
		if err != nil {
			_ = e.Stop()
		}
	}()
	step := func(name string, f func() error) error {
		start := time.Now()
		if err := f(); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		e.Timings = append(e.Timings, Timing{name, time.Since(start)})
		fmt.Fprintf(log, "testenv: %s took %s\n", name, time.Since(start).Round(100*time.Millisecond))
		return nil
	}
	if err := step("build", func() error {
		_, err := ToolPaths(ctx, log, SandboxTools()...)
		return err
	}); err != nil {
		return nil, err
	}
	if err := step("clusters", func() error {
		fluxCRDs, err := FluxCRDDirs(ctx)
		if err != nil {
			return err
		}
		cs, err := StartClusters(ctx, append([]ClusterOptions{{
			Name:    "platform",
			CRDDirs: append(fluxCRDs, opts.PlatformCRDDirs...),
			CRDs:    opts.PlatformCRDs,
		}}, opts.OtherClusters...)...)
		if err != nil {
			return err
		}
		e.Platform, e.Others = cs[0], cs[1:]
		return nil
	}); err != nil {
		return nil, err
	}
	if err := step("registry", func() error {
		e.Registry, err = StartRegistry(ctx, log, filepath.Join(opts.Dir, "registry"))
		return err
	}); err != nil {
		return nil, err
	}
	if err := step("publish charts", func() error {
		e.ChartURL = e.Registry.URL(opts.ChartRepository + "/kro")
		return PublishKroCharts(ctx, log, e.Registry, filepath.Join(opts.Dir, "publish"), opts.ChartRepository, opts.KroChartVersions...)
	}); err != nil {
		return nil, err
	}
	if err := step("flux", func() error {
		e.Flux, err = StartFlux(ctx, log, FluxOptions{
			Kubeconfig:         e.Platform.Kubeconfig,
			Dir:                filepath.Join(opts.Dir, "flux"),
			CAs:                [][]byte{e.Registry.CA.CertPEM},
			WatchLabelSelector: opts.FluxWatchLabelSelector,
		})
		return err
	}); err != nil {
		return nil, err
	}
	for _, name := range opts.ControlPlanes {
		if err := step("control plane "+name, func() error {
			cp, err := StartKwokCluster(ctx, log, KwokClusterOptions{Name: name, Dir: filepath.Join(opts.Dir, name)})
			if err != nil {
				return err
			}
			e.ControlPlanes = append(e.ControlPlanes, cp)
			return nil
		}); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// AddControlPlane creates one more kwok ControlPlane, below the environment's folder, and
// appends it to ControlPlanes; Stop stops it with the others.
func (e *E2E) AddControlPlane(ctx context.Context, log io.Writer, name string) (*KwokCluster, error) {
	if e.ControlPlane(name) != nil {
		return nil, fmt.Errorf("a ControlPlane %q exists already", name)
	}
	cp, err := StartKwokCluster(ctx, log, KwokClusterOptions{Name: name, Dir: filepath.Join(e.dir, name)})
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.ControlPlanes = append(e.ControlPlanes, cp)
	return cp, nil
}

// RemoveControlPlane stops the kwok ControlPlane of that name (its logs are kept) and
// removes it from ControlPlanes. An unknown name is no error.
func (e *E2E) RemoveControlPlane(name string) error {
	e.mu.Lock()
	var cp *KwokCluster
	for i, c := range e.ControlPlanes {
		if c.Name == name {
			cp = c
			e.ControlPlanes = append(e.ControlPlanes[:i:i], e.ControlPlanes[i+1:]...)
			break
		}
	}
	e.mu.Unlock()
	return cp.Stop()
}

// ControlPlane returns the kwok cluster of that name, or nil.
func (e *E2E) ControlPlane(name string) *KwokCluster {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, cp := range e.ControlPlanes {
		if cp.Name == name {
			return cp
		}
	}
	return nil
}

// Stop stops everything, in reverse order of start; it is safe on a partly started
// environment and more than once.
func (e *E2E) Stop() error {
	if e == nil {
		return nil
	}
	e.stopOnce.Do(func() { e.stopErr = e.stop() })
	return e.stopErr
}

func (e *E2E) stop() error {
	var errs []error
	e.mu.Lock()
	defer e.mu.Unlock()
	for i := len(e.ControlPlanes) - 1; i >= 0; i-- {
		errs = append(errs, e.ControlPlanes[i].Stop())
	}
	errs = append(errs, e.Flux.Stop(), e.Registry.Stop())
	if e.Platform != nil {
		StopClusters(append([]*Cluster{e.Platform}, e.Others...)...)
	}
	return errors.Join(errs...)
}

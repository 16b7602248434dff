package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
)

// SystemCABundle is the system's trusted CA bundle (Debian's location).
const SystemCABundle = "/etc/ssl/certs/ca-certificates.crt"

// FluxOptions configures StartFlux.
type FluxOptions struct {
	// Kubeconfig is a self-contained kubeconfig of the cluster Flux runs against (the
	// platform cluster), e.g. Cluster.Kubeconfig. Flux's CRDs (FluxCRDDirs) must be
	// installed there.
	Kubeconfig []byte
	// Namespace is the controllers' RUNTIME_NAMESPACE; default "flux-system".
	Namespace string
	// Dir holds the artifact storage, the CA bundle, the kubeconfig and the logs.
	Dir string
	// CAs are PEM certificates the controllers trust besides the system bundle, e.g.
	// an OCIRegistry's CA.CertPEM.
	CAs [][]byte
	// WatchLabelSelector, when set, is both controllers' --watch-label-selector: Flux's
	// sharding (a shard: "sharding.fluxcd.io/key=<key>"; the unsharded controllers beside
	// shards: "!sharding.fluxcd.io/key").
	WatchLabelSelector string
}

// Flux is a Flux source-controller and helm-controller running as processes.
type Flux struct {
	// Namespace is the controllers' runtime namespace.
	Namespace string
	// SourceController and HelmController are the running controllers. StartController
	// replaces them with the restarted processes.
	SourceController, HelmController *Process

	// readyz and metrics are each controller's readiness and metrics URLs, by Tool name.
	readyz, metrics map[string]string
}

// MetricsURL is the Prometheus endpoint of the controller of that name
// (SourceController.Name or HelmController.Name); "" for another name.
func (f *Flux) MetricsURL(name string) string { return f.metrics[name] }

// StartFlux builds (once) and starts source-controller and helm-controller against the
// cluster of opts.Kubeconfig, with leader election off and every port on loopback, and
// waits until both report ready. Stop them with Stop, also when the test fails.
func StartFlux(ctx context.Context, log io.Writer, opts FluxOptions) (*Flux, error) {
	paths, err := ToolPaths(ctx, log, SourceController, HelmController)
	if err != nil {
		return nil, err
	}
	if opts.Namespace == "" {
		opts.Namespace = "flux-system"
	}
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, err
	}
	kubeconfig := filepath.Join(opts.Dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, opts.Kubeconfig, 0o600); err != nil {
		return nil, err
	}
	bundle, err := writeCABundle(filepath.Join(opts.Dir, "ca-bundle.crt"), opts.CAs)
	if err != nil {
		return nil, err
	}
	addrs, err := FreeLoopbackAddrs(5)
	if err != nil {
		return nil, err
	}
	env := []string{
		"KUBECONFIG=" + kubeconfig,
		"RUNTIME_NAMESPACE=" + opts.Namespace,
		"SSL_CERT_FILE=" + bundle,
		"HOME=" + opts.Dir,
	}
	storage := filepath.Join(opts.Dir, "storage")
	if err := os.MkdirAll(storage, 0o755); err != nil {
		return nil, err
	}
	f := &Flux{Namespace: opts.Namespace, readyz: map[string]string{
		SourceController.Name: "http://" + addrs[1] + "/readyz",
		HelmController.Name:   "http://" + addrs[4] + "/readyz",
	}, metrics: map[string]string{
		SourceController.Name: "http://" + addrs[0] + "/metrics",
		HelmController.Name:   "http://" + addrs[3] + "/metrics",
	}}
	var selector []string
	if opts.WatchLabelSelector != "" {
		selector = []string{"--watch-label-selector=" + opts.WatchLabelSelector}
	}
	f.SourceController, err = StartProcess("source-controller", opts.Dir, env, paths[SourceController.Name], append([]string{
		"--enable-leader-election=false",
		"--metrics-addr=" + addrs[0],
		"--health-addr=" + addrs[1],
		"--storage-path=" + storage,
		"--storage-addr=" + addrs[2],
		"--storage-adv-addr=" + addrs[2],
		"--log-level=debug",
	}, selector...)...)
	if err != nil {
		return nil, err
	}
	f.HelmController, err = StartProcess("helm-controller", opts.Dir, env, paths[HelmController.Name], append([]string{
		"--enable-leader-election=false",
		"--metrics-addr=" + addrs[3],
		"--health-addr=" + addrs[4],
		"--log-level=debug",
	}, selector...)...)
	if err != nil {
		_ = f.Stop()
		return nil, err
	}
	for _, c := range []struct {
		p    *Process
		addr string
	}{{f.SourceController, addrs[1]}, {f.HelmController, addrs[4]}} {
		if err := waitHealthy(ctx, c.p, "http://"+c.addr+"/readyz", time.Minute); err != nil {
			_ = f.Stop()
			return nil, err
		}
	}
	return f, nil
}

// controller returns the process slot of the controller of that name
// (SourceController.Name or HelmController.Name).
func (f *Flux) controller(name string) (**Process, error) {
	switch name {
	case SourceController.Name:
		return &f.SourceController, nil
	case HelmController.Name:
		return &f.HelmController, nil
	}
	return nil, fmt.Errorf("no Flux controller %q: want %q or %q", name, SourceController.Name, HelmController.Name)
}

// StopController stops one controller (SourceController.Name or HelmController.Name),
// as an outage of that controller would; the other keeps running. StartController
// brings it back.
func (f *Flux) StopController(name string) error {
	p, err := f.controller(name)
	if err != nil {
		return err
	}
	return (*p).Stop()
}

// StartController starts a controller stopped with StopController again, with the same
// flags, addresses and storage, and waits until it reports ready. A running controller
// is left alone.
func (f *Flux) StartController(ctx context.Context, name string) error {
	p, err := f.controller(name)
	if err != nil {
		return err
	}
	if (*p).ExitError() == nil {
		return nil
	}
	np, err := (*p).Restart()
	if err != nil {
		return err
	}
	*p = np
	return waitHealthy(ctx, np, f.readyz[name], time.Minute)
}

// Stop stops both controllers.
func (f *Flux) Stop() error {
	if f == nil {
		return nil
	}
	return StopProcesses(f.HelmController, f.SourceController)
}

// writeCABundle writes the system bundle plus cas into path.
func writeCABundle(path string, cas [][]byte) (string, error) {
	var buf bytes.Buffer
	sys, err := os.ReadFile(SystemCABundle)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	buf.Write(sys)
	for _, ca := range cas {
		buf.WriteString("\n")
		buf.Write(ca)
	}
	return path, os.WriteFile(path, buf.Bytes(), 0o644)
}

// waitHealthy polls url until it answers 200, failing early when the process exits.
func waitHealthy(ctx context.Context, p *Process, url string, timeout time.Duration) error {
	hc := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(timeout)
	var lastErr error
	for time.Now().Before(deadline) {
		if err := p.ExitError(); err != nil {
			return fmt.Errorf("%w\n%s", err, p.LogTail(30))
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := hc.Do(req)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		lastErr = err
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s not ready after %s: %w\n%s", p.Name, timeout, lastErr, p.LogTail(30))
}

// StartFluxShard starts a source-controller and helm-controller pair on the platform
// cluster that reconciles only the Flux objects labelled sharding.fluxcd.io/key=key, as
// Flux's sharding runs them, trusting the environment's registry; its files go to
// flux-<key> in the environment's folder. The caller stops it. Start the environment
// with FluxWatchLabelSelector "!sharding.fluxcd.io/key" so that its own Flux leaves the
// sharded objects alone.
func (e *E2E) StartFluxShard(ctx context.Context, log io.Writer, key string) (*Flux, error) {
	return StartFlux(ctx, log, FluxOptions{
		Kubeconfig:         e.Platform.Kubeconfig,
		Dir:                filepath.Join(e.dir, "flux-"+key),
		CAs:                [][]byte{e.Registry.CA.CertPEM},
		WatchLabelSelector: v1alpha1.LabelFluxShard + "=" + key,
	})
}

// Command bench measures the provider's speed and scale against real kube-apiservers and
// writes the results as JSON, markdown and SVG plots. Run it from the repository root:
//
//	go run ./test/bench/cmd/bench                 # the defaults (go tool task bench)
//	go run ./test/bench/cmd/bench -steps 3 ...    # a tiny run (go tool task bench-smoke)
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/openmcp-project/service-provider-kro/test/bench"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run() error {
	ctrllog.SetLogger(logr.Discard())
	var (
		cfg     bench.Config
		steps   string
		outJSON string
		outMD   string
		timeout time.Duration
		render  bool
	)
	flag.StringVar(&steps, "steps", "10,50,100", "numbers N of ControlPlanes (on shared API servers) after each burst, ascending")
	flag.IntVar(&cfg.SharedAPIServers, "shared-apiservers", 2, "API servers that serve the N ControlPlanes, each ControlPlane with its own credentials")
	flag.IntVar(&cfg.Dedicated, "dedicated", 2, "ControlPlanes with an API server of their own, for the RGD and image pull secret measurements")
	flag.IntVar(&cfg.BurstSize, "burst", 0, "at most this many Kros per burst (0: a step's Kros in one burst)")
	flag.IntVar(&cfg.Concurrency, "concurrency", 20, "creates the harness has in flight")
	flag.IntVar(&cfg.Repeats, "repeats", 5, "repeats of the secret and RGD measurements")
	flag.DurationVar(&cfg.IdleWindow, "idle", time.Minute, "how long the steady state is watched")
	flag.StringVar(&cfg.Mode, "mode", "provider", "provider: the harness plays Flux by setting the Flux objects' status (flux: real Flux, not built yet)")
	flag.StringVar(&cfg.WorkDir, "work-dir", ".cache/bench", "folder for the provider binary, kubeconfigs and logs")
	flag.StringVar(&outJSON, "out-json", "docs/benchmarks.json", "where the results go as JSON")
	flag.StringVar(&outMD, "out-md", "docs/benchmarks.md", "where the results go as markdown; the SVG plots go next to it")
	flag.DurationVar(&timeout, "timeout", 40*time.Minute, "give up after this long")
	flag.BoolVar(&render, "render-only", false, "measure nothing: read -out-json and write the markdown and plots again")
	flag.Parse()
	if render {
		b, err := os.ReadFile(outJSON)
		if err != nil {
			return err
		}
		res := &bench.Results{}
		if err := json.Unmarshal(b, res); err != nil {
			return fmt.Errorf("reading %s: %w", outJSON, err)
		}
		res.Targets = bench.Evaluate(res)
		return write(res, outJSON, outMD)
	}
	for f := range strings.SplitSeq(steps, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return fmt.Errorf("-steps: %q is not a positive number", f)
		}
		cfg.Steps = append(cfg.Steps, n)
	}
	var err error
	if cfg.WorkDir, err = filepath.Abs(cfg.WorkDir); err != nil {
		return err
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	ctx, cancelTimeout := context.WithTimeout(ctx, timeout)
	defer cancelTimeout()

	res, err := bench.Run(ctx, cfg)
	if err != nil {
		if res != nil {
			b, _ := json.MarshalIndent(res, "", "  ")
			fmt.Fprintf(os.Stderr, "partial results:\n%s\n", b)
		}
		return fmt.Errorf("%w (provider log: %s)", err, filepath.Join(cfg.WorkDir, "provider-*.log"))
	}
	return write(res, outJSON, outMD)
}

func write(res *bench.Results, outJSON, outMD string) error {
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	for _, f := range []string{outJSON, outMD} {
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			return err
		}
	}
	if err := os.WriteFile(outJSON, append(b, '\n'), 0o644); err != nil {
		return err
	}
	base := strings.TrimSuffix(filepath.Base(outMD), filepath.Ext(outMD))
	latency, memory := base+"-latency.svg", base+"-memory.svg"
	dir := filepath.Dir(outMD)
	if err := os.WriteFile(filepath.Join(dir, latency), []byte(bench.LatencyChart(res)), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, memory), []byte(bench.MemoryChart(res)), 0o644); err != nil {
		return err
	}
	md := bench.Markdown(res, latency, memory)
	if err := os.WriteFile(outMD, []byte(md), 0o644); err != nil {
		return err
	}
	fmt.Printf("wrote %s, %s and the plots\n\n", outJSON, outMD)
	for _, t := range res.Targets {
		met := "met"
		if !t.Met {
			met = "MISSED"
		}
		fmt.Printf("%-7s %s (target %s): %s\n", met, t.Name, t.Target, t.Measured)
	}
	return nil
}

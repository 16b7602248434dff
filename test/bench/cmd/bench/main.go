// Command bench measures the provider's speed and scale against real kube-apiservers and
// writes the results as JSON, markdown and SVG plots. Run it from the repository root:
//
//	go run ./test/bench/cmd/bench                 # both modes, the defaults (go tool task bench)
//	go run ./test/bench/cmd/bench -modes flux     # real Flux only; keeps the provider-mode results
//	go run ./test/bench/cmd/bench -modes sharded  # sharded replicas only; keeps the other results
//	go run ./test/bench/cmd/bench -modes rollout  # a ProviderConfig change rolled out; keeps the other results
//	go run ./test/bench/cmd/bench -modes handover # the earlier provider's installations taken over; keeps the other results
//	go run ./test/bench/cmd/bench -modes placement # the same Kros on their ControlPlanes and on a shared workload cluster; keeps the other results
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
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/intstr"
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
		cfg        bench.Config
		steps      string
		outJSON    string
		outMD      string
		timeout    time.Duration
		render     bool
		modes      string
		pflags     string
		fluxShards int
		sc         bench.ShardedConfig
		rc         bench.RolloutConfig
		rollMU     string
		unShare    string
		hc         bench.HandoverConfig
		hoKros     string
		pc         bench.PlacementConfig
	)
	flag.StringVar(&steps, "steps", "10,50,100", "numbers N of ControlPlanes (on shared API servers) after each burst, ascending")
	flag.IntVar(&cfg.SharedAPIServers, "shared-apiservers", 2, "API servers that serve the N ControlPlanes, each ControlPlane with its own credentials")
	flag.IntVar(&cfg.Dedicated, "dedicated", 2, "ControlPlanes with an API server of their own, for the RGD and image pull secret measurements")
	flag.IntVar(&cfg.BurstSize, "burst", 0, "at most this many Kros per burst (0: a step's Kros in one burst)")
	flag.IntVar(&cfg.Concurrency, "concurrency", 20, "creates the harness has in flight")
	flag.IntVar(&cfg.Repeats, "repeats", 5, "repeats of the secret and RGD measurements")
	flag.DurationVar(&cfg.IdleWindow, "idle", time.Minute, "how long the steady state is watched")
	flag.StringVar(&modes, "modes", "provider,flux,sharded,rollout,handover", "provider: the harness plays Flux by setting the Flux objects' status, at large N; flux: real source- and helm-controller install kro's real chart on kwok ControlPlanes, at small N; sharded: several replicas with --sharding in provider mode (killed, stopped, cut off); rollout: a version's helmValues changed without and with spec.rollout in provider mode; handover: the provider started on Kros the earlier provider (v1.3.0) installed, in provider mode; fluxshards: flux mode with Flux's controllers sharded by spec.fluxShards, and a key added (not in the default set: -modes fluxshards); placement: the same Kros placed on their ControlPlanes and on one shared workload cluster, in provider mode with kro's chart served as source-controller's artifact (not in the default set: -modes placement). A mode left out keeps its results from -out-json")
	flag.IntVar(&sc.Replicas, "sharded-replicas", 3, "sharded mode: replicas with --sharding (0 skips the sharded mode)")
	flag.IntVar(&sc.Kros, "sharded-kros", 300, "sharded mode: Kros, each on a ControlPlane of its own on the shared API servers")
	flag.DurationVar(&sc.LeaseDuration, "sharded-lease", 15*time.Second, "sharded mode: --shard-lease-duration")
	flag.DurationVar(&sc.Partition, "sharded-partition", 25*time.Second, "sharded mode: how long one replica is cut off from the platform API server (0 skips the partition)")
	flag.IntVar(&sc.Moved, "sharded-moved", 10, "sharded mode: in each hand-over, Kros of the leaving replica whose chart pull secret copy is deleted and timed until it is back")
	flag.IntVar(&rc.Kros, "rollout-kros", 100, "rollout mode: Kros on the version whose helmValues change (0 skips the rollout mode)")
	flag.StringVar(&rollMU, "rollout-max-unavailable", "10%", "rollout mode: spec.rollout.maxUnavailable of the second change, a number or a percentage")
	flag.IntVar(&rc.OneKros, "rollout-one-kros", 20, "rollout mode: Kros on a version of their own whose helmValues change under maxUnavailable 1 (0 skips)")
	flag.IntVar(&rc.UnavailableKros, "rollout-unavailable-kros", 1000, "rollout mode: Kros, in an environment of their own, on a version whose helmValues change under -rollout-max-unavailable while -rollout-unavailable-share of them are unavailable (their releases failing) (0 skips)")
	flag.StringVar(&unShare, "rollout-unavailable-share", "5%", "rollout mode: the share of the -rollout-unavailable-kros that are unavailable before the change and stay so, a percentage or a fraction")
	flag.DurationVar(&rc.HelmUpgrade, "rollout-helm-upgrade", 2*time.Second, "rollout mode: how long the harness, playing helm-controller, takes to upgrade a HelmRelease whose values changed")
	flag.StringVar(&hoKros, "handover-kros", "1,100", "handover mode: numbers N of Kros with the earlier provider's installation, one run each in an environment of its own (0 skips the handover mode)")
	flag.IntVar(&pc.Kros, "placement-kros", 100, "placement mode: Kros in each placement (ControlPlane, WorkloadCluster), each in an environment of its own (0 skips the placement mode)")
	flag.DurationVar(&hc.Look, "handover-look", 200*time.Millisecond, "handover mode: how often the harness lists the Kros and the earlier objects")
	flag.DurationVar(&cfg.CPUProfile, "cpu-profile-seconds", 0, "provider mode: take a CPU profile of the provider over this long from the start of the last step's burst, and record its top entries (0: none)")
	flag.StringVar(&pflags, "provider-flags", "", "space-separated flags added to the provider's run, e.g. \"--max-concurrent-reconciles=20\"")
	flag.IntVar(&cfg.FluxControlPlanes, "flux-controlplanes", 2, "N in flux mode and fluxshards mode: kwok ControlPlanes, each with its Kro")
	flag.IntVar(&fluxShards, "flux-shards", 2, "fluxshards mode: Flux shard keys in spec.fluxShards, each with a source- and helm-controller pair of its own (one more pair waits for the key the move adds)")
	flag.StringVar(&cfg.WorkDir, "work-dir", ".cache/bench", "folder for the provider binary, kubeconfigs and logs")
	flag.StringVar(&outJSON, "out-json", "docs/measurements/benchmarks.json", "where the results go as JSON")
	flag.StringVar(&outMD, "out-md", "docs/measurements/benchmarks.md", "where the results go as markdown; the SVG plots go next to it")
	flag.DurationVar(&timeout, "timeout", 40*time.Minute, "give up after this long")
	flag.BoolVar(&render, "render-only", false, "measure nothing: read -out-json and write the markdown and plots again")
	flag.Parse()
	if render {
		return renderOnly(outJSON, outMD)
	}
	cfg.ProviderFlags = strings.Fields(pflags)
	var err error
	if cfg.Steps, err = parseSteps(steps); err != nil {
		return err
	}
	if cfg.WorkDir, err = filepath.Abs(cfg.WorkDir); err != nil {
		return err
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	ctx, cancelTimeout := context.WithTimeout(ctx, timeout)
	defer cancelTimeout()

	ms, err := selectModes(modes, sc, &rc, rollMU, unShare, &hc, hoKros)
	if err != nil {
		return err
	}
	ms.placement = ms.placement && pc.Kros > 0
	previous, err := readPrevious(outJSON)
	if err != nil {
		return err
	}
	res := previous
	if ms.provider {
		r, err := bench.Run(ctx, cfg)
		if err != nil {
			return failed(r, err, cfg.WorkDir)
		}
		r.Flux, r.FluxSharded, r.Sharded, r.Rollout, r.Handover, r.Placement = previous.Flux, previous.FluxSharded, previous.Sharded, previous.Rollout, previous.Handover, previous.Placement
		res = r
	} else if res.Mode == "" && !ms.sharded && !ms.rollout && !ms.handover && !ms.placement && !ms.fluxShards {
		return fmt.Errorf("%s holds no provider-mode results to keep; run with -modes provider,flux", outJSON)
	}
	if err := runFluxModes(ctx, ms, cfg, fluxShards, res); err != nil {
		return err
	}
	if err := runOthers(ctx, ms, cfg, sc, rc, hc, pc, res); err != nil {
		return err
	}
	if res.Mode != "" {
		// Without provider-mode results (another mode alone, into a new file) there is
		// nothing to compare with its targets.
		res.Targets = bench.Evaluate(res)
	}
	return write(res, outJSON, outMD)
}

// parseSteps reads -steps.
func parseSteps(steps string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(steps, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("-steps: %q is not a positive number", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// renderOnly writes the markdown and plots of the results in outJSON again.
func renderOnly(outJSON, outMD string) error {
	b, err := os.ReadFile(outJSON)
	if err != nil {
		return err
	}
	res := &bench.Results{}
	if err := json.Unmarshal(b, res); err != nil {
		return fmt.Errorf("reading %s: %w", outJSON, err)
	}
	res.Targets = bench.Evaluate(res)
	if res.Sharded != nil {
		res.Sharded.Targets = bench.EvaluateSharded(res.Sharded)
	}
	if res.Rollout != nil {
		res.Rollout.Targets = bench.EvaluateRollout(res.Rollout)
	}
	if res.Handover != nil {
		res.Handover.Targets = bench.EvaluateHandover(res.Handover)
	}
	return write(res, outJSON, outMD)
}

// modeSet are the modes a run measures.
type modeSet struct{ provider, flux, fluxShards, sharded, rollout, handover, placement bool }

// parseModes reads -modes.
func parseModes(modes string) (modeSet, error) {
	var ms modeSet
	for m := range strings.SplitSeq(modes, ",") {
		switch strings.TrimSpace(m) {
		case "provider":
			ms.provider = true
		case "flux":
			ms.flux = true
		case "fluxshards":
			ms.fluxShards = true
		case "sharded":
			ms.sharded = true
		case "rollout":
			ms.rollout = true
		case "handover":
			ms.handover = true
		case "placement":
			ms.placement = true
		default:
			return ms, fmt.Errorf("-modes: unknown mode %q (provider, flux, fluxshards, sharded, rollout, handover, placement)", m)
		}
	}
	return ms, nil
}

// runFluxModes measures the modes with real Flux, unsharded and sharded over fluxShards
// keys, each in a work folder of its own, and puts their results into res.
func runFluxModes(ctx context.Context, ms modeSet, cfg bench.Config, fluxShards int, res *bench.Results) error {
	for _, m := range []struct {
		on     bool
		dir    string
		shards int
		into   **bench.FluxResults
	}{{ms.flux, "flux", 0, &res.Flux}, {ms.fluxShards, "fluxshards", fluxShards, &res.FluxSharded}} {
		if !m.on {
			continue
		}
		fcfg := cfg
		fcfg.WorkDir, fcfg.FluxShards = filepath.Join(cfg.WorkDir, m.dir), m.shards
		r, err := bench.RunFlux(ctx, fcfg)
		if err != nil {
			return failed(r, err, fcfg.WorkDir)
		}
		*m.into = r
	}
	return nil
}

// runOthers measures the modes that run in environments of their own (sharded, rollout,
// handover, placement) and puts their results into res.
func runOthers(ctx context.Context, ms modeSet, cfg bench.Config, sc bench.ShardedConfig, rc bench.RolloutConfig, hc bench.HandoverConfig, pc bench.PlacementConfig, res *bench.Results) error {
	var err error
	if ms.sharded {
		if res.Sharded, err = runSharded(ctx, cfg, sc); err != nil {
			return err
		}
	}
	if ms.rollout {
		if res.Rollout, err = runRollouts(ctx, cfg, rc); err != nil {
			return err
		}
	}
	if ms.handover {
		if res.Handover, err = runHandover(ctx, cfg, hc); err != nil {
			return err
		}
	}
	if ms.placement {
		if res.Placement, err = runPlacement(ctx, cfg, pc); err != nil {
			return err
		}
	}
	return nil
}

// runSharded measures sharded replicas in a work folder of their own.
func runSharded(ctx context.Context, cfg bench.Config, sc bench.ShardedConfig) (*bench.ShardedResults, error) {
	cfg.WorkDir = filepath.Join(cfg.WorkDir, "sharded")
	r, err := bench.RunSharded(ctx, cfg, sc)
	if err != nil {
		return nil, failed(r, err, cfg.WorkDir)
	}
	return r, nil
}

// selectModes reads -modes and leaves out the modes their flags switch off (no sharded
// replicas, no rollout Kros, no hand-over Kros); it reads -rollout-max-unavailable and
// -rollout-unavailable-share into rc and -handover-kros into hc.
func selectModes(modes string, sc bench.ShardedConfig, rc *bench.RolloutConfig, maxUnavailable, unavailableShare string, hc *bench.HandoverConfig, handoverKros string) (modeSet, error) {
	ms, err := parseModes(modes)
	if err != nil {
		return modeSet{}, err
	}
	ms.sharded = ms.sharded && sc.Replicas > 0
	ms.rollout = ms.rollout && rc.Kros > 0
	if ms.rollout {
		if rc.MaxUnavailable, err = parseMaxUnavailable(maxUnavailable); err != nil {
			return modeSet{}, err
		}
		if rc.UnavailableShare, err = bench.ParseShare(unavailableShare); err != nil {
			return modeSet{}, fmt.Errorf("-rollout-unavailable-share: %w", err)
		}
	}
	if hc.Kros, err = bench.ParseCounts(handoverKros); err != nil {
		return modeSet{}, fmt.Errorf("-handover-kros: %w", err)
	}
	ms.handover = ms.handover && len(hc.Kros) > 0
	return ms, nil
}

// readPrevious reads the results a run merges into; none when the file is not there.
func readPrevious(outJSON string) (*bench.Results, error) {
	previous := &bench.Results{}
	if b, err := os.ReadFile(outJSON); err == nil {
		if err := json.Unmarshal(b, previous); err != nil {
			return nil, fmt.Errorf("reading %s: %w", outJSON, err)
		}
	}
	return previous, nil
}

// parseMaxUnavailable reads -rollout-max-unavailable: a number or a percentage.
func parseMaxUnavailable(s string) (intstr.IntOrString, error) {
	v := intstr.Parse(s)
	if n, err := intstr.GetScaledValueFromIntOrPercent(&v, 100, false); err != nil || n < 1 {
		return v, fmt.Errorf("-rollout-max-unavailable: %q is neither a number ≥ 1 nor a percentage of 1%% to 100%%", s)
	}
	return v, nil
}

// runRollouts measures the rollout of ProviderConfig changes in a work folder of its own.
func runRollouts(ctx context.Context, cfg bench.Config, rc bench.RolloutConfig) (*bench.RolloutResults, error) {
	cfg.WorkDir = filepath.Join(cfg.WorkDir, "rollout")
	r, err := bench.RunRollout(ctx, cfg, rc)
	if err != nil {
		return nil, failed(r, err, cfg.WorkDir)
	}
	return r, nil
}

// runHandover measures the hand-over from the earlier provider in a work folder of its own.
func runHandover(ctx context.Context, cfg bench.Config, hc bench.HandoverConfig) (*bench.HandoverResults, error) {
	cfg.WorkDir = filepath.Join(cfg.WorkDir, "handover")
	r, err := bench.RunHandover(ctx, cfg, hc)
	if err != nil {
		return nil, failed(r, err, filepath.Join(cfg.WorkDir, "n-*"))
	}
	return r, nil
}

// runPlacement measures both placements in a work folder of its own.
func runPlacement(ctx context.Context, cfg bench.Config, pc bench.PlacementConfig) (*bench.PlacementResults, error) {
	cfg.WorkDir = filepath.Join(cfg.WorkDir, "placement")
	r, err := bench.RunPlacement(ctx, cfg, pc)
	if err != nil {
		return nil, failed(r, err, filepath.Join(cfg.WorkDir, "*"))
	}
	return r, nil
}

// failed prints what a failed run measured so far and says where the logs are.
func failed(partial any, err error, workDir string) error {
	if b, jerr := json.MarshalIndent(partial, "", "  "); jerr == nil && string(b) != "null" {
		fmt.Fprintf(os.Stderr, "partial results:\n%s\n", b)
	}
	return fmt.Errorf("%w (provider logs: %s)", err, filepath.Join(workDir, "provider-*.log"))
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
	targets := res.Targets
	if res.Sharded != nil {
		targets = append(slices.Clone(targets), res.Sharded.Targets...)
	}
	if res.Rollout != nil {
		targets = append(slices.Clone(targets), res.Rollout.Targets...)
	}
	if res.Handover != nil {
		targets = append(slices.Clone(targets), res.Handover.Targets...)
	}
	for _, t := range targets {
		met := "met"
		if !t.Met {
			met = "MISSED"
		}
		fmt.Printf("%-7s %s (target %s): %s\n", met, t.Name, t.Target, t.Measured)
	}
	return nil
}

// Command sandbox runs the end-to-end environment (test/e2e/env) for a person to play
// with: an onboarding and a platform cluster, two ControlPlanes, Flux, a registry with
// kro's chart, the provider, and sample objects. `task up` and `task down` drive it.
//
//	sandbox up      start `sandbox serve` in the background, wait until it is ready, print the status
//	                (-openmcp: openmcp-operator deploys the provider, see openmcp.go)
//	sandbox serve   run the sandbox in the foreground until SIGTERM or SIGINT
//	sandbox down    stop a running sandbox and wait until everything has stopped
//	sandbox status  print the Kros on the onboarding cluster
//	sandbox kubectl-path  print the path of the kubectl the sandbox uses (built once)
//
// Everything lives in .sandbox/ at the repository root: one self-contained kubeconfig
// per cluster (onboarding.kubeconfig, platform.kubeconfig, cp-1.kubeconfig,
// cp-2.kubeconfig), sandbox.log, the pid file, and env/ with every process's files and
// logs.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/clusters"
	"github.com/openmcp-project/service-provider-kro/test/e2e/env"
	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

// Files in the sandbox folder.
const (
	pidFile     = "pid"
	readyFile   = "ready"
	failedFile  = "failed"
	logFile     = "sandbox.log"
	summaryFile = "summary.txt"
	envDir      = "env"
)

// The sample Kros: cp-1 gets v0.9.3 (chart pull secret), cp-2 v0.9.4 (chart and image
// pull secret).
var sampleVersions = map[string]string{"cp-1": "v0.9.3", "cp-2": "v0.9.4"}

func main() {
	fs := flag.NewFlagSet("sandbox", flag.ExitOnError)
	dirFlag := fs.String("dir", "", "the sandbox folder (default: .sandbox at the repository root)")
	timeout := fs.Duration("timeout", 45*time.Minute, "up: how long to wait for the sandbox to be ready (a first run builds every binary)")
	openmcp := fs.Bool("openmcp", false, "up, serve: run the provider as OpenControlPlane does, deployed by openmcp-operator from a ServiceProvider, on one ControlPlane")
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: sandbox up|serve|down|status|kubectl-path [-dir DIR]")
		os.Exit(2)
	}
	cmd := os.Args[1]
	_ = fs.Parse(os.Args[2:])
	dir := *dirFlag
	if dir == "" {
		root, err := testenv.RepoRoot()
		if err != nil {
			fail(err)
		}
		dir = filepath.Join(root, ".sandbox")
	}
	var err error
	if cmd != "kubectl-path" {
		if err := platformError(); err != nil {
			fail(err)
		}
	}
	switch cmd {
	case "up":
		err = up(dir, *timeout, *openmcp)
	case "serve":
		err = serve(dir, *openmcp)
	case "down":
		err = down(dir)
	case "status":
		err = status(context.Background(), dir, os.Stdout)
	case "kubectl-path":
		var p string
		p, err = testenv.Kubectl.Path(context.Background(), os.Stderr)
		fmt.Println(p)
	default:
		err = fmt.Errorf("unknown command %q: up, serve, down, status or kubectl-path", cmd)
	}
	if err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "sandbox:", err)
	os.Exit(1)
}

// running returns the pid of a running sandbox, or 0.
func running(dir string) int {
	data, err := os.ReadFile(filepath.Join(dir, pidFile))
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 1 {
		return 0
	}
	if signalPid(pid, 0) != nil {
		return 0
	}
	return pid
}

// up starts `serve` detached (its own session, output into sandbox.log), waits for it
// to be ready and prints how to use it.
func up(dir string, timeout time.Duration, openmcp bool) error {
	if pid := running(dir); pid != 0 {
		fmt.Printf("The sandbox is already running (pid %d).\n\n", pid)
		return printUsage(dir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, f := range []string{readyFile, failedFile, pidFile, summaryFile} {
		_ = os.Remove(filepath.Join(dir, f))
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	log, err := os.Create(filepath.Join(dir, logFile))
	if err != nil {
		return err
	}
	defer log.Close()
	args := []string{"serve", "-dir", dir}
	if openmcp {
		args = append(args, "-openmcp")
	}
	cmd := exec.Command(self, args...)
	cmd.Stdout, cmd.Stderr = log, log
	detach(cmd)
	if err := cmd.Start(); err != nil {
		return err
	}
	fmt.Printf("Starting the sandbox (pid %d), logging into %s ...\n", cmd.Process.Pid, filepath.Join(dir, logFile))
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	start := time.Now()
	deadline := time.After(timeout)
	// Show the log as it grows: a first run builds every binary, which takes minutes.
	logReader, err := os.Open(filepath.Join(dir, logFile))
	if err != nil {
		return err
	}
	defer logReader.Close()
	for {
		_, _ = io.Copy(os.Stdout, logReader)
		if _, err := os.Stat(filepath.Join(dir, readyFile)); err == nil {
			_, _ = io.Copy(os.Stdout, logReader)
			break
		}
		select {
		case err := <-exited:
			if err == nil {
				err = errors.New("it exited")
			}
			return fmt.Errorf("the sandbox stopped before it was ready (%w); the end of %s:\n%s", err, filepath.Join(dir, logFile), tail(filepath.Join(dir, logFile), 40))
		case <-deadline:
			return fmt.Errorf("the sandbox is not ready after %s; see %s, stop it with `go tool task down`", timeout, filepath.Join(dir, logFile))
		case <-time.After(time.Second):
		}
	}
	// Detach: the sandbox goes on without us.
	_ = cmd.Process.Release()
	fmt.Printf("\nThe sandbox is up after %s.\n\n", time.Since(start).Round(time.Second))
	return printUsage(dir)
}

func printUsage(dir string) error {
	summary, err := os.ReadFile(filepath.Join(dir, summaryFile))
	if err != nil {
		return err
	}
	_, err = os.Stdout.Write(summary)
	return err
}

func tail(path string, n int) string {
	data, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// down signals the sandbox and waits until it has stopped everything.
func down(dir string) error {
	pid := running(dir)
	if pid == 0 {
		fmt.Println("No sandbox is running.")
		_ = os.Remove(filepath.Join(dir, pidFile))
		return nil
	}
	fmt.Printf("Stopping the sandbox (pid %d) ...\n", pid)
	if err := signalPid(pid, syscall.SIGTERM); err != nil {
		return err
	}
	start := time.Now()
	for signalPid(pid, 0) == nil {
		if time.Since(start) > 3*time.Minute {
			_ = signalPid(pid, syscall.SIGKILL)
			return fmt.Errorf("the sandbox (pid %d) did not stop within 3 minutes and was killed; see %s", pid, filepath.Join(dir, logFile))
		}
		time.Sleep(200 * time.Millisecond)
	}
	fmt.Printf("Stopped after %s.\n", time.Since(start).Round(100*time.Millisecond))
	return nil
}

// serve runs the sandbox until SIGTERM or SIGINT.
func serve(dir string, openmcp bool) (err error) {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if pid := running(dir); pid != 0 && pid != os.Getpid() {
		return fmt.Errorf("a sandbox is already running (pid %d)", pid)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, pidFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return err
	}
	defer func() {
		// The kubeconfigs point at clusters that are gone now.
		stale, _ := filepath.Glob(filepath.Join(dir, "*.kubeconfig"))
		for _, f := range append(stale, filepath.Join(dir, pidFile), filepath.Join(dir, readyFile), filepath.Join(dir, summaryFile)) {
			_ = os.Remove(f)
		}
		if err != nil {
			_ = os.WriteFile(filepath.Join(dir, failedFile), []byte(err.Error()), 0o644)
		}
	}()
	cleanStale(filepath.Join(dir, envDir))
	if openmcp {
		return serveOpenMCP(ctx, dir)
	}

	start := time.Now()
	e, err := env.Start(ctx, env.Options{Dir: filepath.Join(dir, envDir), Log: os.Stdout, Backend: mustBackend()})
	if err != nil {
		return err
	}
	defer func() {
		fmt.Println("sandbox: stopping everything")
		stopStart := time.Now()
		if err := e.Stop(); err != nil {
			fmt.Println("sandbox: stopping:", err)
		}
		fmt.Printf("sandbox: stopped in %s\n", time.Since(stopStart).Round(100*time.Millisecond))
	}()
	fmt.Printf("sandbox: environment up in %s\n", time.Since(start).Round(100*time.Millisecond))
	all := []*env.Cluster{e.Onboarding, e.Platform}
	for _, cp := range e.ControlPlanes {
		all = append(all, &cp.Cluster)
	}
	if err := writeKubeconfigs(dir, all...); err != nil {
		return err
	}
	// kro's controller (process backend) comes up on each ControlPlane once kro's CRDs are there.
	for _, cp := range e.ControlPlanes {
		go func() {
			if err := e.StartKroController(ctx, cp); err != nil && ctx.Err() == nil {
				fmt.Printf("sandbox: kro controller on %s: %v\n", cp.Name, err)
			}
		}()
	}
	if err := applySamples(ctx, e); err != nil {
		return err
	}
	waitStart := time.Now()
	warning := waitForSamples(ctx, e)
	if ctx.Err() != nil {
		return nil
	}
	fmt.Printf("sandbox: samples ready in %s\n", time.Since(waitStart).Round(100*time.Millisecond))
	if err := writeSummary(ctx, dir, e, warning); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, readyFile), nil, 0o644); err != nil {
		return err
	}
	fmt.Println("sandbox: ready; stop it with `go tool task down`")
	<-ctx.Done()
	return nil
}

func mustBackend() env.Backend {
	b, err := env.BackendFromEnvironment()
	if err != nil {
		fail(err)
	}
	if b == env.BackendKind {
		fail(fmt.Errorf("the sandbox runs its clusters as processes; kind clusters with the provider, Flux and kro as pods run in the e2e suite: %s=kind go tool task test-e2e", env.BackendVariable))
	}
	return b
}

// cleanStale stops what an earlier sandbox that was killed left behind (kwok starts its
// components detached) and removes its files.
func cleanStale(dir string) {
	pids, _ := filepath.Glob(filepath.Join(dir, "env", "*", "kwok", "clusters", "*", "pids", "*.pid"))
	for _, f := range pids {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if pid, err := strconv.Atoi(strings.TrimSpace(string(data))); err == nil && pid > 1 {
			_ = signalPid(pid, syscall.SIGKILL)
		}
	}
	_ = os.RemoveAll(dir)
}

func writeKubeconfigs(dir string, all ...*env.Cluster) error {
	for _, c := range all {
		// Name the context after the cluster's role, so that several can be merged.
		raw, err := clientcmd.Load(c.Kubeconfig)
		if err != nil {
			return err
		}
		if ctx, ok := raw.Contexts[raw.CurrentContext]; ok {
			delete(raw.Contexts, raw.CurrentContext)
			raw.Contexts["sandbox-"+c.Name] = ctx
			raw.CurrentContext = "sandbox-" + c.Name
		}
		data, err := clientcmd.Write(*raw)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, c.Name+".kubeconfig"), data, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// applySamples creates one Kro per ControlPlane on the onboarding cluster, and a sample
// ResourceGraphDefinition on cp-1 once kro's CRDs are there (in the background).
func applySamples(ctx context.Context, e *env.Env) error {
	for _, cp := range e.ControlPlanes {
		if err := create(ctx, e.Onboarding.Client, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: cp.Namespace}}); err != nil {
			return err
		}
		version := sampleVersions[cp.Name]
		if version == "" {
			version = "v0.9.4"
		}
		kro := &v1alpha1.Kro{ObjectMeta: metav1.ObjectMeta{Name: cp.Name, Namespace: cp.Namespace}, Spec: v1alpha1.KroSpec{Version: version}}
		if err := create(ctx, e.Onboarding.Client, kro); err != nil {
			return err
		}
	}
	return nil
}

func create(ctx context.Context, c client.Client, obj client.Object) error {
	if err := c.Create(ctx, obj); client.IgnoreAlreadyExists(err) != nil {
		return fmt.Errorf("creating %s: %w", client.ObjectKeyFromObject(obj), err)
	}
	return nil
}

// waitForSamples waits until every Kro is Ready, then applies the sample RGD on the
// first ControlPlane and waits until its Kro counts it Ready. It returns a warning when
// that does not happen within minutes: the sandbox stays up anyway, for a look.
func waitForSamples(ctx context.Context, e *env.Env) string {
	ctx, cancel := context.WithTimeout(ctx, 6*time.Minute)
	defer cancel()
	poll := func(cond func() bool) bool { return poll(ctx, cond) }
	allReady := poll(func() bool {
		for _, cp := range e.ControlPlanes {
			k := &v1alpha1.Kro{}
			if err := e.Onboarding.Client.Get(ctx, client.ObjectKey{Namespace: cp.Namespace, Name: cp.Name}, k); err != nil || !ready(k) {
				return false
			}
		}
		return true
	})
	if !allReady {
		return "not every Kro became Ready within minutes; see the conditions above and .sandbox/env/provider/service-provider-kro.log"
	}
	cp := e.ControlPlanes[0]
	rgd := testenv.ConfigMapRGD("sandbox-app", "SandboxApp")
	if err := create(ctx, cp.Client, rgd); err != nil {
		return err.Error()
	}
	counted := poll(func() bool {
		k := &v1alpha1.Kro{}
		if err := e.Onboarding.Client.Get(ctx, client.ObjectKey{Namespace: cp.Namespace, Name: cp.Name}, k); err != nil {
			return false
		}
		s := k.Status.ResourceGraphDefinitions
		return s != nil && s.Total == 1 && s.Ready == 1
	})
	if !counted {
		return fmt.Sprintf("the sample ResourceGraphDefinition on %s is not counted Ready in its Kro yet", cp.Name)
	}
	return ""
}

// poll checks cond every second until it holds (true) or ctx ends (false).
func poll(ctx context.Context, cond func() bool) bool {
	for !cond() {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(time.Second):
		}
	}
	return true
}

// ready says whether a Kro is Ready.
func ready(k *v1alpha1.Kro) bool {
	c := apimeta.FindStatusCondition(k.Status.Conditions, v1alpha1.ConditionReady)
	return c != nil && c.Status == metav1.ConditionTrue
}

func writeSummary(ctx context.Context, dir string, e *env.Env, warning string) error {
	kubectl, err := testenv.Kubectl.Path(ctx, os.Stdout)
	if err != nil {
		return err
	}
	var b strings.Builder
	rel := func(name string) string { return filepath.Join(".sandbox", name) }
	fmt.Fprintf(&b, "Backend: %s. Kubeconfigs, one per cluster (self-contained):\n", e.Backend)
	fmt.Fprintf(&b, "  %-32s Kro objects (one per ControlPlane)\n", rel("onboarding.kubeconfig"))
	fmt.Fprintf(&b, "  %-32s ProviderConfig %q, provider namespace %q, tenant namespaces, Flux objects\n", rel("platform.kubeconfig"), e.ProviderName, e.PodNamespace)
	for _, cp := range e.ControlPlanes {
		fmt.Fprintf(&b, "  %-32s ControlPlane %s (Kro %s/%s; tenant namespace %s)\n", rel(cp.Name+".kubeconfig"), cp.Name, cp.Namespace, cp.Name, cp.TenantNamespace)
	}
	fmt.Fprintf(&b, "\nTry:\n")
	fmt.Fprintf(&b, "  go tool task kubectl -- get kro -A                      (kubectl on the onboarding cluster)\n")
	fmt.Fprintf(&b, "  kubectl --kubeconfig .sandbox/onboarding.kubeconfig get kro -A\n")
	fmt.Fprintf(&b, "  kubectl --kubeconfig .sandbox/platform.kubeconfig get helmreleases,ocirepositories -A\n")
	fmt.Fprintf(&b, "  kubectl --kubeconfig .sandbox/cp-1.kubeconfig get deploy,secrets -n kro-system\n")
	fmt.Fprintf(&b, "  kubectl --kubeconfig .sandbox/cp-1.kubeconfig get rgd\n")
	fmt.Fprintf(&b, "(no kubectl installed? this one is built for the sandbox: %s)\n", kubectl)
	fmt.Fprintf(&b, "Logs: .sandbox/sandbox.log, every process's under .sandbox/env/. Stop it all: go tool task down\n\n")
	fmt.Fprintf(&b, "Kros now (go tool task sandbox-status prints them again):\n")
	if err := env.PrintKros(ctx, e.Onboarding.Client, &b); err != nil {
		return err
	}
	if warning != "" {
		fmt.Fprintf(&b, "\nWARNING: %s\n", warning)
	}
	return os.WriteFile(filepath.Join(dir, summaryFile), []byte(b.String()), 0o644)
}

// status prints the Kros of a running sandbox.
func status(ctx context.Context, dir string, w io.Writer) error {
	if running(dir) == 0 {
		return errors.New("no sandbox is running: start one with `go tool task up`")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(dir, "onboarding.kubeconfig"))
	if err != nil {
		return err
	}
	c, err := client.New(cfg, client.Options{Scheme: clusters.Scheme})
	if err != nil {
		return err
	}
	return env.PrintKros(ctx, c, w)
}

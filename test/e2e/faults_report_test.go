//go:build e2e

package e2e

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	"github.com/onsi/ginkgo/v2/types"
	. "github.com/onsi/gomega"

	"github.com/openmcp-project/service-provider-kro/test/e2e/env"
	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

// The fault suite's report: one row per fault spec, written to the file that
// RELIABILITY_REPORT names (relative to the repository's root) once every fault spec has
// run; `go tool task test-faults` sets it to docs/measurements/reliability.md.

// ReportVariable names the file the fault suite writes its report to.
const ReportVariable = "RELIABILITY_REPORT"

// faultRow is one row of the report. Everything but fault and expected comes from the run.
type faultRow struct {
	spec            string // the spec's text, for -ginkgo.focus
	fault, expected string
	notes           []string
	converge        string
	orphaned        string
	failed          string
	guardPolls      int
	start           time.Time
	took            time.Duration
}

var report struct {
	started, finished time.Time
	bringUp, teardown time.Duration
	rows              []*faultRow
	// load samples the machine's 1-minute load average while the faults run.
	load loadSampler
}

// loadSampler reads /proc/loadavg every few seconds, to say how busy the machine was.
type loadSampler struct {
	mu      sync.Mutex
	samples []float64
	stop    chan struct{}
	done    chan struct{}
}

func (l *loadSampler) start() {
	l.stop, l.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(l.done)
		for {
			var load float64
			if data, err := os.ReadFile("/proc/loadavg"); err == nil {
				if _, err := fmt.Sscan(string(data), &load); err == nil {
					l.mu.Lock()
					l.samples = append(l.samples, load)
					l.mu.Unlock()
				}
			}
			select {
			case <-l.stop:
				return
			case <-time.After(5 * time.Second):
			}
		}
	}()
}

func (l *loadSampler) end() {
	if l.stop != nil {
		close(l.stop)
		<-l.done
		l.stop = nil
	}
}

// summary is the mean and the highest sample, or "" without samples.
func (l *loadSampler) summary() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.samples) == 0 {
		return ""
	}
	sum, top := 0.0, 0.0
	for _, s := range l.samples {
		sum += s
		top = max(top, s)
	}
	return fmt.Sprintf("; the 1-minute load average was %.1f on average and %.1f at most", sum/float64(len(l.samples)), top)
}

// startRow begins the row of the running spec.
func startRow(fault, expected string) *faultRow {
	r := &faultRow{spec: CurrentSpecReport().LeafNodeText, fault: fault, expected: expected, start: time.Now(), orphaned: "not checked"}
	report.rows = append(report.rows, r)
	DeferCleanup(func() {
		r.took = time.Since(r.start)
		if sr := CurrentSpecReport(); sr.Failed() {
			msg := strings.TrimSpace(sr.Failure.Message)
			if i := strings.IndexByte(msg, '\n'); i > 0 {
				msg = msg[:i]
			}
			r.failed = msg
		}
		recordTiming("faults: "+r.spec, r.took)
	})
	return r
}

// note adds an observation to the row.
func (r *faultRow) note(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	r.notes = append(r.notes, s)
	fmt.Fprintf(GinkgoWriter, "observed: %s\n", s)
}

// converged records the time to converge, and another time for context.
func (r *faultRow) converged(d time.Duration, what string, d2 time.Duration, what2 string) {
	r.converge = ms(d) + " " + what
	if what2 != "" {
		r.converge += fmt.Sprintf(" (%s %s)", ms(d2), what2)
	}
	fmt.Fprintf(GinkgoWriter, "converged: %s\n", r.converge)
}

// finalizerGuard records what guardFinalizer saw and fails on a finalizer dropped early.
func (r *faultRow) finalizerGuard(res guardResult) {
	GinkgoHelper()
	r.guardPolls += res.polls
	if res.violation != "" {
		r.note("FINALIZER DROPPED EARLY: %s", res.violation)
	}
	Expect(res.violation).To(BeEmpty())
}

// orphans records the checker's result.
func (r *faultRow) orphans(left env.Leftovers) {
	var where string
	if !left.ControlPlaneChecked {
		where = " (platform only: the ControlPlane is gone)"
	}
	if len(left.Orphaned) == 0 {
		r.orphaned = "0" + where
		return
	}
	r.orphaned = fmt.Sprintf("%d%s: %s", len(left.Orphaned), where, left.Names())
}

func (r *faultRow) observed() string {
	var b strings.Builder
	if r.failed != "" {
		fmt.Fprintf(&b, "**FAILED**: %s. ", r.failed)
	}
	b.WriteString(strings.Join(r.notes, "; "))
	if r.guardPolls > 0 {
		fmt.Fprintf(&b, "; while the deletion ran, the Kro and kro's Helm release were seen together %d %s, the Kro never gone before the release", r.guardPolls, plural(r.guardPolls, "time", "times"))
	}
	return b.String()
}

// reportFile is where the process that ran the faults leaves the rendered report, in the
// run's log folder: with parallel processes (ginkgo -p) the faults run on any of them,
// while ReportAfterSuite runs on the first.
func reportFile() string { return filepath.Join(runDir, "reliability-report.md") }

// keepReport renders the report once the faults environment is down.
func keepReport() {
	if len(report.rows) == 0 {
		return
	}
	if err := os.WriteFile(reportFile(), []byte(renderReport()), 0o644); err != nil {
		fmt.Fprintf(GinkgoWriter, "keeping the reliability report: %v\n", err)
	}
}

var _ = ReportAfterSuite("reliability report", func(sr Report) {
	data, err := os.ReadFile(reportFile())
	if err != nil {
		return // no fault spec ran
	}
	total, ran := 0, 0
	for _, s := range sr.SpecReports {
		if s.LeafNodeType == types.NodeTypeIt && slices.Contains(s.Labels(), "faults") {
			total++
			if !s.State.Is(types.SpecStateSkipped | types.SpecStatePending) {
				ran++
			}
		}
	}
	doc := string(data)
	fmt.Println(doc)
	path := os.Getenv(ReportVariable)
	switch {
	case path == "":
		return
	case ran < total:
		fmt.Printf("%s=%s not written: %d of the %d fault specs ran\n", ReportVariable, path, ran, total)
		return
	}
	if !filepath.IsAbs(path) {
		root, err := testenv.RepoRoot()
		if err != nil {
			fmt.Printf("writing the reliability report: %v\n", err)
			return
		}
		path = filepath.Join(root, path)
	}
	if err := spliceReport(path, doc); err != nil {
		fmt.Printf("writing the reliability report: %v\n", err)
		return
	}
	fmt.Printf("reliability report written to %s\n", path)
})

func renderReport() string {
	var b strings.Builder
	b.WriteString(`# Reliability

What happens to Kros when a part of the system fails? The fault suite
(` + "`test/e2e/faults_test.go`" + `, Ginkgo label ` + "`faults`" + `) finds out in the same environment
as the end-to-end tests: real kube-apiservers, Flux's source-controller and helm-controller
as processes, kwok ControlPlanes, a TLS registry with kro's real chart, kro's controller,
and the provider as a process in standalone mode (with ` + "`--access-grace-period=20s`" + `).
Each row breaks one thing while Kros are being installed, upgraded or deleted, repairs it
where the fault is not meant to last, and records what the Kro said, whether it got where
it should, and how long that took. Every row ends with its Kros deleted, and a checker then
lists what is left: on the platform cluster every object carrying the provider's labels
(` + "`app.kubernetes.io/managed-by=service-provider-kro`" + `) for those Kros, and on each
ControlPlane every object with the provider's labels, kro's Helm release (its storage
secrets ` + "`sh.helm.release.v1.kro.*`" + ` in ` + "`kro-system`" + ` and whatever it installed),
ResourceGraphDefinitions, and instances of the CRDs kro generated (` + "`kro.run/owned=true`" + `).
Anything found there is orphaned, and the row fails. While a deletion runs, the suite also
checks every 100 ms (every 500 ms when 20 Kros go at once) that the Kro is not gone while
kro's Helm release is still on the ControlPlane.

Run it with ` + "`go tool task test-faults`" + ` (it rewrites this part of the page); the last
column runs one fault alone (then the page is left as it is). This part is generated: the
observations and times below come from the run, nothing in them is typed in by hand. Bad
input, a tenant's or a platform team's, has [a table of its own](#bad-input) below.

| fault | expected | observed | time to converge | objects orphaned | reproduce |
|---|---|---|---|---|---|
`)
	for _, r := range report.rows {
		converge := r.converge
		if converge == "" {
			converge = "did not converge"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | `go tool task test-faults -- -ginkgo.focus=\"%s\"` |\n",
			cell(r.fault), cell(r.expected), cell(r.observed()), cell(converge), cell(r.orphaned), r.spec)
	}
	var rows time.Duration
	for _, r := range report.rows {
		rows += r.took
	}
	suite := report.finished.Sub(report.started)
	if report.finished.IsZero() {
		suite = time.Since(report.started)
	}
	fmt.Fprintf(&b, "\nMeasured on %s on %s; the fault suite took %s (environment up %s, the %d faults %s, teardown %s)%s.\n",
		time.Now().UTC().Format("2006-01-02"), machine(), ms(suite), ms(report.bringUp), len(report.rows), ms(rows), ms(report.teardown),
		report.load.summary())
	return b.String()
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// tenantNamespace matches the tenant namespaces' names, which are shortened in the table.
var tenantNamespace = regexp.MustCompile(`mcp--[0-9a-f]{8}-[0-9a-f-]{27}`)

// cell makes text fit into a Markdown table cell.
func cell(s string) string {
	s = tenantNamespace.ReplaceAllString(s, "mcp--…")
	s = strings.ReplaceAll(s, "\n", " ")
	return strings.ReplaceAll(s, "|", `\|`)
}

// machine describes the machine: cores, CPU model and memory.
func machine() string {
	model, mem := "", ""
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
		_ = f.Close()
	}
	if f, err := os.Open("/proc/meminfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			var kb int
			if _, err := fmt.Sscanf(sc.Text(), "MemTotal: %d kB", &kb); err == nil {
				mem = fmt.Sprintf("%.0f GiB of memory", float64(kb)/(1<<20))
				break
			}
		}
		_ = f.Close()
	}
	s := fmt.Sprintf("%d cores", runtime.NumCPU())
	if model != "" {
		s += " (" + model + ")"
	}
	if mem != "" {
		s += ", " + mem
	}
	return s
}

// spliceReport puts doc between the faults markers of the page at path (hack/splice), so
// that the page's hand-written parts, the bad-input table, stay as they are.
func spliceReport(path, doc string) error {
	tmp, err := os.CreateTemp("", "faults-*.md")
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	if _, err := tmp.WriteString(doc); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	root, err := testenv.RepoRoot()
	if err != nil {
		return err
	}
	cmd := exec.Command("go", "run", "./hack/splice", "-file", path, "-marker", "faults", "-content", tmp.Name())
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%w: %s", err, out)
	}
	return nil
}

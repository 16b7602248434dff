//go:build e2e

package e2e

import (
	"bufio"
	"encoding/json"
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

// reportPart is what one fault container records: its rows, how long its environment
// took to come up and go, and how busy the machine was meanwhile.
type reportPart struct {
	name, title       string // name: its file in the run's folder; title: how the report's last line names it
	started, finished time.Time
	bringUp, teardown time.Duration
	rows              []*faultRow
	// load samples the machine's 1-minute load average while the faults run.
	load loadSampler
}

// report is the part of the fault container that runs (a process runs one container at
// a time); startFaultsEnv gives each container its own.
var report = &reportPart{}

// reportParts are the names of the fault containers' parts, in the order the report shows
// their rows.
var reportParts = []string{singleFaultsPart, loadFaultPart}

// The names of the two fault containers' parts: their report files and their folders in
// the run's log folder.
const (
	singleFaultsPart = "faults"
	loadFaultPart    = "faults-load"
)

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

// summary says how long the part took, for the report's last line.
func (p *reportPart) summary() string {
	var rows time.Duration
	for _, r := range p.rows {
		rows += r.took
	}
	took := p.finished.Sub(p.started)
	if p.finished.IsZero() {
		took = time.Since(p.started)
	}
	return fmt.Sprintf("%s took %s (environment up %s, %d %s %s, teardown %s%s)",
		p.title, ms(took), ms(p.bringUp), len(p.rows), plural(len(p.rows), "fault", "faults"), ms(rows), ms(p.teardown), p.load.summary())
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

// reportFile is where the process that ran a fault container leaves its part of the
// report, in the run's log folder: with parallel processes (ginkgo -p) the two containers
// may run on different processes, while ReportAfterSuite runs on the first.
func reportFile(part string) string { return filepath.Join(runDir, "reliability-"+part+".json") }

// keptPart is a part of the report as a process leaves it for ReportAfterSuite.
type keptPart struct {
	Rows    []string // the table's rows, rendered
	Summary string
}

// keepReport renders a container's part once its environment is down.
func keepReport(p *reportPart) {
	if len(p.rows) == 0 {
		return
	}
	kept := keptPart{Summary: p.summary()}
	for _, r := range p.rows {
		kept.Rows = append(kept.Rows, r.markdown())
	}
	data, err := json.Marshal(kept)
	if err == nil {
		err = os.WriteFile(reportFile(p.name), data, 0o644)
	}
	if err != nil {
		fmt.Fprintf(GinkgoWriter, "keeping the reliability report: %v\n", err)
	}
}

// reliabilityReport joins the fault containers' parts, prints the report and, when
// RELIABILITY_REPORT names a file and every fault spec ran, writes it there. It runs in
// the suite's ReportAfterSuite, before the run's folder with the parts is removed.
func reliabilityReport(sr Report) {
	var rows, summaries []string
	for _, part := range reportParts {
		data, err := os.ReadFile(reportFile(part))
		if err != nil {
			continue // that container did not run
		}
		var kept keptPart
		if err := json.Unmarshal(data, &kept); err != nil {
			fmt.Printf("reading the reliability report's part %s: %v\n", part, err)
			continue
		}
		rows, summaries = append(rows, kept.Rows...), append(summaries, kept.Summary)
	}
	if len(rows) == 0 {
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
	doc := renderReport(rows, summaries)
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
}

// renderReport is the generated part of reliability.md: the table of every part's rows and
// what each part took.
func renderReport(rows, summaries []string) string {
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
	for _, r := range rows {
		b.WriteString(r)
	}
	fmt.Fprintf(&b, "\nMeasured on %s on %s; %s.\n", time.Now().UTC().Format("2006-01-02"), machine(), strings.Join(summaries, "; "))
	return b.String()
}

// markdown is the row in the report's table.
func (r *faultRow) markdown() string {
	converge := r.converge
	if converge == "" {
		converge = "did not converge"
	}
	return fmt.Sprintf("| %s | %s | %s | %s | %s | `go tool task test-faults -- -ginkgo.focus=\"%s\"` |\n",
		cell(r.fault), cell(r.expected), cell(r.observed()), cell(converge), cell(r.orphaned), r.spec)
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

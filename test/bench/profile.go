package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Profile is a CPU profile of the provider taken from the start of the last burst: where
// the CPU of new Kros goes.
type Profile struct {
	// Seconds the profile covers, from the start of the last burst.
	Seconds float64 `json:"seconds"`
	// Kros in that burst.
	Kros int `json:"kros"`
	// File is the profile (pprof's format), kept in the work folder.
	File string `json:"file"`
	// Top are the heaviest functions by cumulative CPU, as `go tool pprof -top -cum`
	// prints them.
	Top []string `json:"top"`
	// HeapTop are the functions that allocated the most of the heap in use once the last
	// step settled (`go tool pprof -top -sample_index=inuse_space`).
	HeapTop []string `json:"heapTop,omitempty"`
}

// profileTopEntries is how many functions of the profile are recorded.
const profileTopEntries = 25

// cpuProfile starts a CPU profile of the provider as long as cfg.CPUProfile, unless
// profiling is off (then it returns nil). Wait for the result with the returned func.
func (h *harness) cpuProfile(ctx context.Context, kros int) func() (*Profile, error) {
	if h.pprof == "" || h.cfg.CPUProfile <= 0 {
		return nil
	}
	type out struct {
		p   *Profile
		err error
	}
	done := make(chan out, 1)
	go func() {
		p, err := h.takeProfile(ctx, kros)
		done <- out{p, err}
	}()
	return func() (*Profile, error) {
		o := <-done
		return o.p, o.err
	}
}

func (h *harness) takeProfile(ctx context.Context, kros int) (*Profile, error) {
	secs := int(h.cfg.CPUProfile.Seconds())
	top, file, err := h.pprofTop(ctx, fmt.Sprintf("profile?seconds=%d", secs), "provider-cpu.pprof", "-cum")
	if err != nil {
		return nil, err
	}
	return &Profile{Seconds: float64(secs), Kros: kros, File: file, Top: top}, nil
}

// heapProfile adds the provider's heap profile to p, if there is a profile.
func (h *harness) heapProfile(ctx context.Context, p *Profile) error {
	if p == nil {
		return nil
	}
	top, _, err := h.pprofTop(ctx, "heap?gc=1", "provider-heap.pprof", "-sample_index=inuse_space")
	p.HeapTop = top
	return err
}

// pprofTop fetches a profile from the provider's pprof endpoint into the work folder
// and returns its top entries as `go tool pprof -top` prints them with args.
func (h *harness) pprofTop(ctx context.Context, path, name string, args ...string) ([]string, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://%s/debug/pprof/%s", h.pprof, path), nil)
	if err != nil {
		return nil, "", err
	}
	client := &http.Client{Timeout: h.cfg.CPUProfile + time.Minute}
	resp, err := client.Do(req)
	if err != nil {
		return nil, "", fmt.Errorf("taking the provider's profile %s: %w", path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, "", fmt.Errorf("reading the provider's profile %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, "", fmt.Errorf("taking the provider's profile %s: %s", path, resp.Status)
	}
	file := filepath.Join(h.cfg.WorkDir, name)
	if err := os.WriteFile(file, data, 0o644); err != nil {
		return nil, "", err
	}
	cmd := append([]string{"tool", "pprof", "-top", fmt.Sprintf("-nodecount=%d", profileTopEntries)}, args...)
	out, err := exec.CommandContext(ctx, "go", append(cmd, h.bin, file)...).Output()
	if err != nil {
		return nil, "", fmt.Errorf("reading the profile %s with go tool pprof: %w", name, err)
	}
	return topLines(out), file, nil
}

// topLines are pprof's table, from its header on, without the trailing blank lines.
func topLines(out []byte) []string {
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), " ")
		if len(lines) == 0 && !strings.HasPrefix(strings.TrimSpace(line), "Showing") && !strings.Contains(line, "flat%") {
			continue
		}
		lines = append(lines, line)
	}
	return lines
}

// renderProfile writes the profile's top entries, if there is one.
func renderProfile(p func(string, ...any), pr *Profile) {
	if pr == nil || len(pr.Top) == 0 {
		return
	}
	p("The provider's CPU profile over the first %.0f s of the last burst (%d Kros), heaviest cumulative first (`-cpu-profile-seconds`):", pr.Seconds, pr.Kros)
	p("")
	p("```")
	for _, l := range pr.Top {
		p("%s", l)
	}
	p("```")
	p("")
	if len(pr.HeapTop) == 0 {
		return
	}
	p("Its heap in use once the last step settled, by allocating function:")
	p("")
	p("```")
	for _, l := range pr.HeapTop {
		p("%s", l)
	}
	p("```")
	p("")
}

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
}

// profileTopEntries is how many functions of the profile are recorded.
const profileTopEntries = 25

// cpuProfile starts a CPU profile of the provider of cfg.ProfileSeconds, unless
// profiling is off (then it returns nil). Wait for the result with the returned func.
func (h *harness) cpuProfile(ctx context.Context, kros int) func() (*Profile, error) {
	if h.pprof == "" || h.cfg.ProfileSeconds <= 0 {
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
	secs := int(h.cfg.ProfileSeconds.Seconds())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", h.pprof, secs), nil)
	if err != nil {
		return nil, err
	}
	client := &http.Client{Timeout: h.cfg.ProfileSeconds + time.Minute}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("taking the provider's CPU profile: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("taking the provider's CPU profile: %s %v", resp.Status, err)
	}
	file := filepath.Join(h.cfg.WorkDir, "provider-cpu.pprof")
	if err := os.WriteFile(file, data, 0o644); err != nil {
		return nil, err
	}
	top, err := exec.CommandContext(ctx, "go", "tool", "pprof", "-top", "-cum", fmt.Sprintf("-nodecount=%d", profileTopEntries), h.bin, file).Output()
	if err != nil {
		return nil, fmt.Errorf("reading the CPU profile with go tool pprof: %w", err)
	}
	return &Profile{Seconds: float64(secs), Kros: kros, File: file, Top: topLines(top)}, nil
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
}

package testenv

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
)

// Ports for the processes the tests start (API servers aside) come from reservations too.
// A port that was free a moment ago (a ":0" listener, closed again) is an ephemeral port,
// and until the process that was given it binds it, the kernel may hand it to any other
// connection on the machine as its source port: with many test processes opening
// connections at once, a provider replica of the benchmark failed to start with "bind:
// address already in use" (2026-12-07, CI, beside the controllers' tests). Ports from
// loopbackPortRange are below the ephemeral ones (32768 and up on Linux) and below
// kwokPortRange, and a reservation keeps two test processes from taking the same one.
var loopbackPortRange = [2]int{10000, 20000}

// FreeLoopbackAddrs returns n distinct addresses "127.0.0.1:<port>" on which nothing
// listens, each reserved for this process until it exits (a process of the tests that
// is stopped and started again keeps its address).
func FreeLoopbackAddrs(n int) ([]string, error) {
	out := make([]string, 0, n)
	for range n {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		out = append(out, "127.0.0.1:"+strconv.Itoa(port))
	}
	return out, nil
}

// freePort is a port of loopbackPortRange on which nothing listens on any address,
// reserved for this process until it exits.
func freePort() (int, error) {
	dir, err := ToolsDir()
	if err != nil {
		return 0, err
	}
	port, _, err := reservePort(filepath.Join(dir, "loopback-ports"), loopbackPortRange)
	if err != nil {
		return 0, fmt.Errorf("a port for a process of the tests: %w", err)
	}
	return port, nil
}

// reservePort reserves a port of span on which nothing listens: a file named after the
// port in dir, shared by every test process on the machine, holding this process's pid,
// made under a lock of dir so that two processes never reserve the same port. One whose
// process is gone (a killed test run) is taken over. release removes it.
func reservePort(dir string, span [2]int) (port int, release func(), err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, nil, err
	}
	unlock, err := lockFile(filepath.Join(dir, ".lock"))
	if err != nil {
		return 0, nil, err
	}
	defer unlock()
	size := span[1] - span[0]
	first := rand.IntN(size)
	for i := range size {
		p := span[0] + (first+i)%size
		file := filepath.Join(dir, strconv.Itoa(p))
		if reservedByLiveProcess(file) || !portFree(p) {
			continue
		}
		if err := os.WriteFile(file, []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
			return 0, nil, err
		}
		return p, func() { _ = os.Remove(file) }, nil
	}
	return 0, nil, fmt.Errorf("no free port in [%d, %d)", span[0], span[1])
}

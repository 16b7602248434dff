//go:build windows

package main

import (
	"errors"
	"os/exec"
	"syscall"
)

// errNeedsUnix is why the sandbox does not run on Windows: `sandbox down` stops `sandbox
// serve` with SIGTERM, so that it stops every process it started, and Windows cannot send
// one process a signal that another handles.
var errNeedsUnix = errors.New("the sandbox needs Linux or macOS (it stops its processes with signals); on Windows, run it in WSL 2")

// platformError says why the sandbox cannot run on this platform.
func platformError() error { return errNeedsUnix }

// detach does nothing: main does not get as far as starting the sandbox on Windows.
func detach(*exec.Cmd) {}

// signalPid fails: see errNeedsUnix.
func signalPid(int, syscall.Signal) error { return errNeedsUnix }

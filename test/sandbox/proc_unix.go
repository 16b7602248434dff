//go:build unix

package main

import (
	"os/exec"
	"syscall"
)

// platformError says why the sandbox cannot run on this platform; nil on Unix.
func platformError() error { return nil }

// detach makes cmd start in a session of its own, so that it goes on when the terminal
// that ran `sandbox up` closes.
func detach(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
}

// signalPid sends sig to the process pid; signal 0 only checks that it exists.
func signalPid(pid int, sig syscall.Signal) error {
	return syscall.Kill(pid, sig)
}

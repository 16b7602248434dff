//go:build unix && !linux

package testenv

import "syscall"

// processAlive says whether the process pid exists (signal 0 only checks). Unlike on Linux
// (proc_linux.go), a zombie counts as alive; the processes asked about here are detached,
// and launchd or init reaps them.
func processAlive(pid int) bool {
	return syscall.Kill(pid, 0) == nil
}

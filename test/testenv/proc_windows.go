//go:build windows

package testenv

import (
	"os"
	"os/exec"
	"syscall"

	"golang.org/x/sys/windows"
)

// Windows has no process groups that can be signalled and no signals but killing: the
// best it can do for what proc_unix.go does on Unix.

// ownProcessGroup starts cmd in a new process group, which keeps a Ctrl+C in the test's
// console from reaching it (as on Unix); signalGroup cannot reach the group.
func ownProcessGroup(cmd *exec.Cmd) {
	sysProcAttr(cmd).CreationFlags |= syscall.CREATE_NEW_PROCESS_GROUP
}

// signalGroup terminates p at once, whatever the signal: Windows can neither ask a
// process to stop nor end the processes it started.
func signalGroup(p *os.Process, _ syscall.Signal) error {
	return p.Kill()
}

// killPid terminates the process pid; a process that is gone already is no error.
func killPid(pid int) error {
	if !processAlive(pid) {
		return nil
	}
	p, err := os.FindProcess(pid)
	if err != nil {
		return err
	}
	defer func() { _ = p.Release() }()
	return p.Kill()
}

// stillActive is the exit code GetExitCodeProcess reports for a running process
// (STILL_ACTIVE).
const stillActive = 259

// processAlive says whether the process pid is running.
func processAlive(pid int) bool {
	h, err := windows.OpenProcess(windows.PROCESS_QUERY_LIMITED_INFORMATION, false, uint32(pid))
	if err != nil {
		return false
	}
	defer func() { _ = windows.CloseHandle(h) }()
	var code uint32
	return windows.GetExitCodeProcess(h, &code) == nil && code == stillActive
}

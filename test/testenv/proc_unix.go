//go:build unix

package testenv

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
)

// What differs between platforms in starting and ending processes:
// Unix (Linux and macOS) here, Windows in proc_windows.go; setDeathSignal and processAlive
// differ between Linux (proc_linux.go) and the rest (proc_other.go, proc_unix_other.go).

// ownProcessGroup makes cmd start as the leader of a process group of its own, so that
// signalGroup reaches the children it starts too.
func ownProcessGroup(cmd *exec.Cmd) {
	sysProcAttr(cmd).Setpgid = true
}

// signalGroup sends sig to the process group that p leads (see ownProcessGroup).
func signalGroup(p *os.Process, sig syscall.Signal) error {
	return syscall.Kill(-p.Pid, sig)
}

// killPid sends SIGKILL to the process pid, which this process need not have started; a
// process that is gone already is no error.
func killPid(pid int) error {
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	return nil
}

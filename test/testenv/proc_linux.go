//go:build linux

package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
)

// setDeathSignal has Linux kill cmd's process (SIGKILL) when the test process dies, so
// that a test process that is killed leaves nothing running.
func setDeathSignal(cmd *exec.Cmd) {
	sysProcAttr(cmd).Pdeathsig = syscall.SIGKILL
}

// processAlive says whether the process pid exists and is not a zombie, from /proc.
func processAlive(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name in parentheses, which may hold spaces.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || (s[i+2] != 'Z' && s[i+2] != 'X')
}

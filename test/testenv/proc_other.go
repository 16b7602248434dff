//go:build !linux

package testenv

import "os/exec"

// setDeathSignal does nothing: only Linux can have a process killed when its parent dies.
// Elsewhere a test process that is killed (rather than stopped, which stops what it
// started) leaves its processes running.
func setDeathSignal(*exec.Cmd) {}

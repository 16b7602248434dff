package testenv

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Process is a long-running command of the test environment (a controller, a registry).
// Its output goes to a log file; Stop ends it and its children.
type Process struct {
	// Name names the process in messages and its log file.
	Name string
	// LogPath is the file that holds the process's stdout and stderr.
	LogPath string

	cmd      *exec.Cmd
	logFile  *os.File
	done     chan struct{}
	err      error
	stopOnce sync.Once
	stopErr  error
}

// StartProcess starts bin with args in its own process group, with the test process's
// environment plus env, writing its output to logDir/<name>.log. On Linux the process is
// killed too when the test process dies without stopping it.
func StartProcess(name, logDir string, env []string, bin string, args ...string) (*Process, error) {
	return startProcess(name, logDir, append(os.Environ(), env...), bin, args...)
}

// startProcess is StartProcess with the whole environment given.
func startProcess(name, logDir string, env []string, bin string, args ...string) (*Process, error) {
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return nil, err
	}
	logPath := filepath.Join(logDir, name+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	cmd.Stdout = f
	cmd.Stderr = f
	ownProcessGroup(cmd)
	setDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &Process{Name: name, LogPath: logPath, cmd: cmd, logFile: f, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		_ = f.Close()
		close(p.done)
	}()
	return p, nil
}

// Exited is closed once the process has ended.
func (p *Process) Exited() <-chan struct{} { return p.done }

// Pid is the process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Stop sends SIGTERM to the process group, waits up to 10 seconds and then kills it.
// (On Windows, which has no SIGTERM, the process alone is terminated at once.) It is safe
// to call more than once and on a nil Process.
func (p *Process) Stop() error {
	if p == nil {
		return nil
	}
	p.stopOnce.Do(func() {
		select {
		case <-p.done:
			return
		default:
		}
		pgid := p.cmd.Process.Pid
		_ = signalGroup(p.cmd.Process, syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = signalGroup(p.cmd.Process, syscall.SIGKILL)
			select {
			case <-p.done:
			case <-time.After(5 * time.Second):
				p.stopErr = fmt.Errorf("%s (pid %d) did not stop", p.Name, pgid)
			}
		}
	})
	return p.stopErr
}

// Kill sends SIGKILL to the process group at once, as a crash or an OOM kill would end
// it, and waits until the process has exited. It is safe on a process that has ended
// and on a nil Process; Stop does nothing afterwards.
func (p *Process) Kill() error {
	if p == nil {
		return nil
	}
	p.stopOnce.Do(func() {
		select {
		case <-p.done:
			return
		default:
		}
		_ = signalGroup(p.cmd.Process, syscall.SIGKILL)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			p.stopErr = fmt.Errorf("%s (pid %d) did not die on SIGKILL", p.Name, p.cmd.Process.Pid)
		}
	})
	return p.stopErr
}

// Restart starts the command of a process that has ended (after Stop or Kill) again,
// with the same name, environment, binary and arguments; its output is appended to the
// same log file. It returns the new process; p stays as it was.
func (p *Process) Restart() (*Process, error) {
	select {
	case <-p.done:
	default:
		return nil, fmt.Errorf("%s (pid %d) still runs: stop it before restarting it", p.Name, p.cmd.Process.Pid)
	}
	// cmd.Env is the whole environment the process was started with.
	return startProcess(p.Name, filepath.Dir(p.LogPath), p.cmd.Env, p.cmd.Path, p.cmd.Args[1:]...)
}

// ExitError describes how the process ended; nil while it runs.
func (p *Process) ExitError() error {
	select {
	case <-p.done:
		if p.err == nil {
			return fmt.Errorf("%s exited", p.Name)
		}
		return fmt.Errorf("%s exited: %s", p.Name, p.err.Error())
	default:
		return nil
	}
}

// LogTail returns the last n lines of the process's log, for error messages.
func (p *Process) LogTail(n int) string {
	return fileTail(p.LogPath, n)
}

func fileTail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// StopProcesses stops every process (nil ones are skipped) and joins their errors.
func StopProcesses(ps ...*Process) error {
	var errs []error
	for _, p := range ps {
		errs = append(errs, p.Stop())
	}
	return errors.Join(errs...)
}

// runCommand runs a short command and returns its combined output in the error.
func runCommand(env []string, dir, bin string, args ...string) ([]byte, error) {
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	setDeathSignal(cmd)
	if err := cmd.Run(); err != nil {
		return out.Bytes(), fmt.Errorf("%s %s: %w\n%s", filepath.Base(bin), strings.Join(args, " "), err, out.String())
	}
	return out.Bytes(), nil
}

// sysProcAttr returns cmd's SysProcAttr, which it creates first if there is none.
func sysProcAttr(cmd *exec.Cmd) *syscall.SysProcAttr {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	return cmd.SysProcAttr
}

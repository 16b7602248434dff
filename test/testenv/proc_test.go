package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"
)

// The tests of proc_*.go: they start this test binary as a helper process (see
// TestHelperProcess), so they need no other binary and run on every platform.

// helperEnv names the variable that makes the test binary a helper process.
const helperEnv = "TESTENV_HELPER"

// TestHelperProcess is no test: with helperEnv set, the test binary is a helper that
// sleeps ("sleep"), or starts a sleeping child, prints "child <pid>" and sleeps ("parent").
func TestHelperProcess(_ *testing.T) {
	switch os.Getenv(helperEnv) {
	case "":
		return
	case "parent":
		cmd := helperCommand("sleep")
		if err := cmd.Start(); err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		fmt.Printf("child %d\n", cmd.Process.Pid)
	}
	time.Sleep(time.Minute)
	os.Exit(0)
}

// helperCommand runs the test binary as the helper process mode.
func helperCommand(mode string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$")
	cmd.Env = append(os.Environ(), helperEnv+"="+mode)
	return cmd
}

// waitGone waits up to 10 seconds for the process pid to end.
func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for processAlive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("process %d still runs", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestProcessAliveAndKillPid(t *testing.T) {
	if !processAlive(os.Getpid()) {
		t.Fatal("processAlive says this process is not alive")
	}
	cmd := helperCommand("sleep")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	if !processAlive(pid) {
		t.Fatalf("processAlive says the helper %d that was just started is not alive", pid)
	}
	if err := killPid(pid); err != nil {
		t.Fatalf("killPid: %v", err)
	}
	select {
	case err := <-exited:
		if err == nil {
			t.Fatalf("the helper %d exited by itself, not killed", pid)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the helper %d is still running after killPid", pid)
	}
	waitGone(t, pid)
	if err := killPid(pid); err != nil {
		t.Fatalf("killPid of a process that is gone: %v", err)
	}
}

func TestStopEndsTheProcessGroup(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("Windows ends the process only, not its children")
	}
	p, err := StartProcess("parent", t.TempDir(), []string{helperEnv + "=parent"}, os.Args[0], "-test.run=^TestHelperProcess$")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Kill() }()
	child := 0
	deadline := time.Now().Add(30 * time.Second)
	for child == 0 {
		data, _ := os.ReadFile(p.LogPath)
		for _, line := range strings.Split(string(data), "\n") {
			if _, err := fmt.Sscanf(line, "child %d", &child); err == nil {
				break
			}
		}
		if child == 0 && time.Now().After(deadline) {
			t.Fatalf("the helper printed no child's pid; its log:\n%s", p.LogTail(20))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	waitGone(t, child)
}

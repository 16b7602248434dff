package testenv

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// The API server ports of kwok clusters are handed out here, not by kwokctl. kwokctl takes
// the first port it finds free counting down from 32767, in every run afresh. A fault spec
// stops a ControlPlane's API server for half a minute and starts it again on the same port
// (StopAPIServer, StartAPIServer); meanwhile that port is free, and the next cluster that
// kwokctl made, in this process or in a parallel one, took it. The ControlPlane came back
// as "server gave HTTP response to HTTPS client", or not at all.
//
// A reservation is a file named after the port in a folder the whole machine shares
// (ToolsDir), holding the pid of the process that owns the cluster; it lasts until the
// cluster is deleted, whether its API server runs or not. A reservation whose process is
// gone is taken over. Ports come from kwokPortRange, below kwokctl's own (which counts down
// from 32767 for etcd and the controllers) and below the kernel's ephemeral ports (32768
// and up on Linux), which every ":0" listener of the tests takes.
var kwokPortRange = [2]int{20000, 30000}

// kwokComponentPorts are the KwokctlConfiguration options of the other ports a kwok
// cluster listens on. kwokctl would pick them as it picks the API server's, and a
// component that exited and is started again (a kube-controller-manager, see
// restartExited) found its port taken by a cluster made meanwhile: etcd of ControlPlane
// shard-0 failed "bind: address already in use" on a port a controller manager of a
// parallel process had held (CI, 2026-12-08). So they are reserved the same way.
var kwokComponentPorts = []string{"etcdPort", "etcdPeerPort", "kubeControllerManagerPort", "kubeSchedulerPort", "kwokControllerPort"}

// reserveComponentPorts reserves a port for each of kwokComponentPorts and returns them
// as KwokctlConfiguration options (YAML lines below "options:"); release gives them back.
func reserveComponentPorts(dir string) (options string, release func(), err error) {
	var releases []func()
	release = func() {
		for _, r := range releases {
			r()
		}
	}
	var b strings.Builder
	for _, name := range kwokComponentPorts {
		port, r, err := reservePort(filepath.Join(dir, "kwok-ports"), kwokPortRange)
		if err != nil {
			release()
			return "", nil, fmt.Errorf("a port for a kwok cluster's %s: %w", name, err)
		}
		releases = append(releases, r)
		fmt.Fprintf(&b, "  %s: %d\n", name, port)
	}
	return b.String(), release, nil
}

// reserveAPIServerPort reserves a free port for a kwok cluster's API server; release gives
// it back.
func reserveAPIServerPort(dir string) (port int, release func(), err error) {
	port, release, err = reservePort(filepath.Join(dir, "kwok-ports"), kwokPortRange)
	if err != nil {
		return 0, nil, fmt.Errorf("a port for a kwok API server: %w", err)
	}
	return port, release, nil
}

// reservedByLiveProcess says whether the reservation file names a process that still runs.
func reservedByLiveProcess(file string) bool {
	data, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		return false
	}
	pid, perr := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || perr != nil || pid <= 0 {
		return true // unreadable: leave it alone
	}
	return processAlive(pid)
}

// portFree says whether nothing listens on the port, on loopback and on every address
// (kwokctl's own test).
func portFree(port int) bool {
	for _, host := range []string{"127.0.0.1", ""} {
		l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err != nil {
			return false
		}
		_ = l.Close()
	}
	return true
}

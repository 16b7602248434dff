package testenv

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/openmcp-project/service-provider-kro/test/toolbuild"
)

// TestFreeLoopbackAddrs: the addresses are distinct, below the kernel's ephemeral ports
// (which any connection may take as its source port before the process binds), reserved
// for this process, and bindable.
func TestFreeLoopbackAddrs(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(toolbuild.ToolsDirEnv, dir)
	addrs, err := FreeLoopbackAddrs(3)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, a := range addrs {
		host, port, err := net.SplitHostPort(a)
		if err != nil || host != "127.0.0.1" {
			t.Fatalf("address %q: %v", a, err)
		}
		p, _ := strconv.Atoi(port)
		if p < loopbackPortRange[0] || p >= loopbackPortRange[1] || p >= 32768 {
			t.Fatalf("port %d is outside [%d, %d)", p, loopbackPortRange[0], loopbackPortRange[1])
		}
		if seen[a] {
			t.Fatalf("%s handed out twice in %v", a, addrs)
		}
		seen[a] = true
		owner, err := os.ReadFile(filepath.Join(dir, "loopback-ports", port))
		if err != nil || strings.TrimSpace(string(owner)) != strconv.Itoa(os.Getpid()) {
			t.Fatalf("port %s not reserved for this process: %q, %v", port, owner, err)
		}
		l, err := net.Listen("tcp", a)
		if err != nil {
			t.Fatalf("binding %s: %v", a, err)
		}
		_ = l.Close()
	}
	// A reserved port is not handed out again while this process lives.
	saved := loopbackPortRange
	t.Cleanup(func() { loopbackPortRange = saved })
	_, port, _ := net.SplitHostPort(addrs[0])
	p, _ := strconv.Atoi(port)
	loopbackPortRange = [2]int{p, p + 1}
	if again, err := FreeLoopbackAddrs(1); err == nil {
		t.Fatalf("the reserved port %d was handed out again: %v", p, again)
	}
}

package testenv

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// TestReserveAPIServerPort hands out the ports of a range of three: a reserved port is not
// handed out again until it is released, a port something listens on is skipped, and a
// reservation whose process is gone is taken over.
func TestReserveAPIServerPort(t *testing.T) {
	base, busy := threeFreePorts(t)
	defer busy.Close() // the third port: something listens on it
	saved := kwokPortRange
	kwokPortRange = [2]int{base, base + 3}
	t.Cleanup(func() { kwokPortRange = saved })
	dir := t.TempDir()
	reservation := func(p int) string { return filepath.Join(dir, "kwok-ports", strconv.Itoa(p)) }

	p1, release1, err := reserveAPIServerPort(dir)
	if err != nil {
		t.Fatal(err)
	}
	p2, _, err := reserveAPIServerPort(dir)
	if err != nil {
		t.Fatal(err)
	}
	if p1 == p2 || p1 == base+2 || p2 == base+2 {
		t.Fatalf("reserved %d and %d; want the two free ports %d and %d", p1, p2, base, base+1)
	}
	if p, _, err := reserveAPIServerPort(dir); err == nil {
		t.Fatalf("a third reservation got %d with both free ports reserved and the third listened on", p)
	}
	release1()
	p1again, _, err := reserveAPIServerPort(dir)
	if err != nil || p1again != p1 {
		t.Fatalf("after releasing %d: got %d, %v", p1, p1again, err)
	}

	// A reservation left by a process that is gone (a killed test run) is taken over.
	if err := os.WriteFile(reservation(p2), []byte("2147483646"), 0o644); err != nil {
		t.Fatal(err)
	}
	if p, _, err := reserveAPIServerPort(dir); err != nil || p != p2 {
		t.Fatalf("with %d held by this process and %d by a dead one: got %d, %v; want %d", p1, p2, p, err, p2)
	}
}

// threeFreePorts finds three consecutive free ports and listens on the third.
func threeFreePorts(t *testing.T) (int, net.Listener) {
	t.Helper()
	for range 50 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		base := l.Addr().(*net.TCPAddr).Port + 1
		_ = l.Close()
		if !portFree(base) || !portFree(base+1) {
			continue
		}
		if busy, err := net.Listen("tcp", net.JoinHostPort("", strconv.Itoa(base+2))); err == nil {
			return base, busy
		}
	}
	t.Fatal("found no three consecutive free ports")
	return 0, nil
}

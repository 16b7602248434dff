package bench

import (
	"os"
	"strconv"
	"strings"
)

// The machine's CPU times from /proc/stat, for the share of the machine that was busy
// while a run measured.

// cpuTimes are the machine's CPU times from /proc/stat (zero where it cannot be read).
type cpuTimes struct{ busy, total float64 }

func readCPU() cpuTimes {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTimes{}
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return cpuTimes{}
	}
	var t cpuTimes
	for i, v := range f[1:] {
		n, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return cpuTimes{}
		}
		t.total += n
		if i != 3 && i != 4 { // idle and iowait
			t.busy += n
		}
	}
	return t
}

// busySince is the share of all CPUs that was busy since earlier, 0..1.
func (t cpuTimes) busySince(earlier cpuTimes) float64 {
	if t.total <= earlier.total {
		return 0
	}
	return round3((t.busy - earlier.busy) / (t.total - earlier.total))
}

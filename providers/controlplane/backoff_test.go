package controlplane

import (
	"testing"
	"time"
)

// TestBackoffDoublesUpToMax: the pause between attempts starts at min, doubles, and
// never exceeds max, however many attempts fail.
func TestBackoffDoublesUpToMax(t *testing.T) {
	b := newBackoff(time.Second, 5*time.Second)
	var got []time.Duration
	for range 6 {
		got = append(got, b.Step())
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second, 5 * time.Second}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("pauses %v, want %v", got, want)
		}
	}
}

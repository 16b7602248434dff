package controllers

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// TestInstanceRecheckBacksOff: a deletion blocked by instances looks again soon while it
// is new, less often the longer it stays blocked, never less than once a minute.
func TestInstanceRecheckBacksOff(t *testing.T) {
	g := NewWithT(t)
	now := time.Now()
	g.Expect(instanceRecheck(time.Time{}, now)).To(Equal(2 * time.Second))
	g.Expect(instanceRecheck(now.Add(-5*time.Second), now)).To(Equal(2 * time.Second))
	g.Expect(instanceRecheck(now.Add(-2*time.Minute), now)).To(Equal(12 * time.Second))
	g.Expect(instanceRecheck(now.Add(-3*time.Hour), now)).To(Equal(time.Minute))
}

package deletion_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/openmcp-project/service-provider-kro/controllers/deletion"
)

// TestInstanceRecheckBacksOff: a deletion blocked by instances looks again soon while it
// is new, less often the longer it stays blocked, never less than once a minute.
func TestInstanceRecheckBacksOff(t *testing.T) {
	g := NewWithT(t)
	now := time.Now()
	g.Expect(deletion.InstanceRecheck(time.Time{}, now)).To(Equal(2 * time.Second))
	g.Expect(deletion.InstanceRecheck(now.Add(-5*time.Second), now)).To(Equal(2 * time.Second))
	g.Expect(deletion.InstanceRecheck(now.Add(-2*time.Minute), now)).To(Equal(12 * time.Second))
	g.Expect(deletion.InstanceRecheck(now.Add(-3*time.Hour), now)).To(Equal(time.Minute))
}

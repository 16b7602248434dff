package clusters

import (
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

// TestParseClaim: a claim reads back as the installation that wrote it; a bare
// environment is an earlier version's claim; anything else someone wrote by hand is
// neither, and a long one is cut before a message repeats it.
func TestParseClaim(t *testing.T) {
	g := NewWithT(t)
	self := Installation{Environment: "dev,eu", Provider: "kro", Platform: "0a1b"}
	g.Expect(parseClaim(self.Claim())).To(Equal(self), "an environment with a comma reads back")
	g.Expect(parseClaim("standalone")).To(Equal(Installation{Environment: "standalone"}))
	g.Expect(parseClaim("standalone").earlier()).To(BeTrue())
	odd := parseClaim("environment=standalone")
	g.Expect(odd.earlier()).To(BeFalse(), "names the new format but no provider or platform: not an earlier version's claim to take over")
	g.Expect(odd.String()).To(Equal(`environment "standalone" of provider "?" on the platform cluster whose kube-system namespace has UID ?`))
	long := parseClaim(strings.Repeat("x", 10000))
	g.Expect(len(long.Environment)).To(BeNumerically("<=", maxClaim+len("…")))
	err := &ClaimError{Holder: long, Self: self, claim: strings.Repeat("x", 10000)}
	g.Expect(len(err.Error())).To(BeNumerically("<", 2000))
	g.Expect(err.Error()).To(ContainSubstring(`installation environment "dev,eu" of provider "kro" on the platform cluster whose kube-system namespace has UID 0a1b cannot serve`))
}

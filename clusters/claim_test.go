package clusters

import (
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

// TestParseClaim: a claim reads back as the installation that wrote it, with or
// without its namespace; a bare environment is an earlier version's claim; anything
// else someone wrote by hand is neither, and a long one is cut before a message
// repeats it.
func TestParseClaim(t *testing.T) {
	g := NewWithT(t)
	self := Installation{Environment: "dev,eu", Provider: "kro", Platform: "0a1b", Namespace: "kro-a"}
	g.Expect(ParseClaim(self.Claim())).To(Equal(self), "an environment with a comma reads back")
	g.Expect(self.Claim()).To(Equal("environment=dev,eu,provider=kro,platform=0a1b,namespace=kro-a"))
	previous := Installation{Environment: "standalone", Provider: "kro", Platform: "0a1b"}
	g.Expect(ParseClaim("environment=standalone,provider=kro,platform=0a1b")).To(Equal(previous), "the previous format names no namespace")
	g.Expect(ParseClaim("standalone")).To(Equal(Installation{Environment: "standalone"}))
	g.Expect(ParseClaim("standalone").earlier()).To(BeTrue())
	odd := ParseClaim("environment=standalone")
	g.Expect(odd.earlier()).To(BeFalse(), "names the new format but no provider or platform: not an earlier version's claim to take over")
	g.Expect(odd.String()).To(Equal(`environment "standalone" of provider "?" on the platform cluster whose kube-system namespace has UID ?`))
	g.Expect(self.String()).To(Equal(`environment "dev,eu" of provider "kro" in namespace "kro-a" on the platform cluster whose kube-system namespace has UID 0a1b`))
	long := ParseClaim(strings.Repeat("x", 10000))
	g.Expect(len(long.Environment)).To(BeNumerically("<=", maxClaim+len("…")))
	err := &ClaimError{Holder: long, Self: self, claim: strings.Repeat("x", 10000)}
	g.Expect(len(err.Error())).To(BeNumerically("<", 2000))
	g.Expect(err.Error()).To(ContainSubstring(`installation environment "dev,eu" of provider "kro" in namespace "kro-a" on the platform cluster whose kube-system namespace has UID 0a1b cannot serve`))
}

// TestJudge: what an installation does with each claim it can find.
func TestJudge(t *testing.T) {
	self := Installation{Environment: "standalone", Provider: "kro", Platform: "p1", Namespace: "kro-a"}
	withNS := func(ns string) Installation { i := self; i.Namespace = ns; return i }
	onPlatform := func(p string) Installation { i := self; i.Platform = p; return i }
	for _, tc := range []struct {
		name    string
		value   string
		self    Claimant
		want    Claimed
		refused string // part of the refusal; empty: not refused
	}{
		{"unclaimed", "", Claimant{Installation: self}, ClaimWritten, ""},
		{"its own claim", self.Claim(), Claimant{Installation: self}, ClaimHeld, ""},
		{"its own claim of the previous format, without the namespace", withNS("").Claim(), Claimant{Installation: self}, ClaimRewritten, ""},
		{"the installation in another namespace", withNS("kro-b").Claim(), Claimant{Installation: self}, ClaimHeld, `in namespace "kro-b"`},
		{"init without its namespace beside its installation's claim", self.Claim(), Claimant{Installation: withNS("")}, ClaimHeld, ""},
		{"the previous format from another platform cluster", onPlatform("p2").Claim(), Claimant{Installation: self}, ClaimHeld, "UID p2 serves it"},
		{"another provider name", Installation{Environment: "standalone", Provider: "kro2", Platform: "p1"}.Claim(), Claimant{Installation: self}, ClaimHeld, `provider "kro2"`},
		{"a bare claim of its environment with a trace here", "standalone", Claimant{Installation: self, Trace: "Lease kro-a/service-provider-kro"}, ClaimTakenOver, ""},
		{"a bare claim of its environment without a trace", "standalone", Claimant{Installation: self}, ClaimHeld, "no Lease service-provider-kro or service-provider-kro-<shard> of this provider is in namespace kro-a"},
		{"a bare claim without the namespace to look in", "standalone", Claimant{Installation: withNS("")}, ClaimHeld, "give the provider's namespace (--pod-namespace)"},
		{"a bare claim of another environment", "env-b", Claimant{Installation: self, Trace: "Lease kro-a/service-provider-kro"}, ClaimHeld, `environment "env-b" (a claim by an earlier version`},
		{"a hand-written claim that lacks parts", "environment=standalone", Claimant{Installation: self}, ClaimHeld, `provider "?"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			got, refused := judge(tc.value, tc.self)
			g.Expect(got).To(Equal(tc.want))
			if tc.refused == "" {
				g.Expect(refused).To(BeNil())
				return
			}
			g.Expect(refused).NotTo(BeNil())
			g.Expect(refused.Error()).To(ContainSubstring(tc.refused))
			g.Expect(refused.Error()).To(ContainSubstring("release the claim with"))
		})
	}
}

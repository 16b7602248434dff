package main

import (
	"bytes"
	"context"
	"flag"
	"os"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

// TestFlagReferenceIsCurrent: docs/reference/flags.md is what the binary prints, and it
// names every flag of every command; a flag added without regenerating it fails here
// (and in task verify).
func TestFlagReferenceIsCurrent(t *testing.T) {
	g := NewWithT(t)
	t.Setenv("POD_NAMESPACE", "somewhere") // defaults from the environment stay out of it
	var out bytes.Buffer
	g.Expect(dispatch(context.Background(), []string{"flags"}, &out, &out)).To(Succeed())
	written, err := os.ReadFile("../../docs/reference/flags.md")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out.String()).To(Equal(string(written)), "run go tool task generate-flags")
	g.Expect(out.String()).NotTo(ContainSubstring("somewhere"))
	for _, c := range commands {
		flagsOf(c.name, c.bind).VisitAll(func(f *flag.Flag) {
			g.Expect(out.String()).To(ContainSubstring("| `--"+f.Name+"` |"), "%s --%s", c.name, f.Name)
		})
	}
	g.Expect(strings.Count(out.String(), "\n## ")).To(Equal(len(commands)))
}

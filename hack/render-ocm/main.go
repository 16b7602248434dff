// Command render-ocm renders the OCM component constructor: it replaces ${VERSION} with
// the content of the VERSION file and ${COMMIT} with the commit it is built from, fails
// on any other ${...}, checks that the result is YAML naming the image of that version,
// and writes it out.
//
//	go run ./hack/render-ocm [-in ocm/component-constructor.yaml] [-version-file VERSION] [-commit SHA] [-out bin/ocm/component-constructor.yaml]
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/openmcp-project/service-provider-kro/hack/release/ocm"
)

func main() {
	in := flag.String("in", "ocm/component-constructor.yaml", "component constructor template")
	versionFile := flag.String("version-file", "VERSION", "file holding the version")
	commit := flag.String("commit", "", "commit the component is built from (default: git rev-parse HEAD)")
	out := flag.String("out", "bin/ocm/component-constructor.yaml", "where to write the rendered constructor")
	flag.Parse()
	if err := run(*in, *versionFile, *commit, *out); err != nil {
		fmt.Fprintln(os.Stderr, "render-ocm:", err)
		os.Exit(1)
	}
	fmt.Println(*out)
}

func run(in, versionFile, commit, out string) error {
	tmpl, err := os.ReadFile(in)
	if err != nil {
		return err
	}
	v, err := os.ReadFile(versionFile)
	if err != nil {
		return err
	}
	if commit == "" {
		head, err := exec.Command("git", "rev-parse", "HEAD").Output()
		if err != nil {
			return fmt.Errorf("finding the commit (pass -commit): %w", err)
		}
		commit = strings.TrimSpace(string(head))
	}
	rendered, err := ocm.Render(tmpl, strings.TrimSpace(string(v)), commit)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	return os.WriteFile(out, rendered, 0o644)
}

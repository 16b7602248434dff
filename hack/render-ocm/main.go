// Command render-ocm renders the OCM component constructor: it replaces ${VERSION} with
// the content of the VERSION file and ${COMMIT} with the commit it is built from, fails
// on any other ${...}, checks that the result is YAML naming the image of that version,
// and writes it out.
//
//	go run ./hack/render-ocm [-in ocm/component-constructor.yaml] [-version-file VERSION] [-commit SHA] [-out bin/ocm/component-constructor.yaml]
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

	"sigs.k8s.io/yaml"
)

// Image is the repository of the provider's image; its tag is the version.
const Image = "ghcr.io/openmcp-project/images/service-provider-kro"

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
	rendered, err := Render(tmpl, strings.TrimSpace(string(v)), commit)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	return os.WriteFile(out, rendered, 0o644)
}

var (
	// semver 2.0 with an optional leading v, as OCM and image tags accept it.
	versionPattern = regexp.MustCompile(`^v?(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$`)
	commitPattern  = regexp.MustCompile(`^[0-9a-f]{7,64}$`)
	variable       = regexp.MustCompile(`\$\{([^}]*)\}`)
)

// Render substitutes the variables of a component constructor and checks the result.
func Render(tmpl []byte, version, commit string) ([]byte, error) {
	if !versionPattern.MatchString(version) {
		return nil, fmt.Errorf("version %q is not a semantic version", version)
	}
	if !commitPattern.MatchString(commit) {
		return nil, fmt.Errorf("commit %q is not a git commit id", commit)
	}
	values := map[string]string{"VERSION": version, "COMMIT": commit}
	var unknown []string
	rendered := variable.ReplaceAllStringFunc(string(tmpl), func(m string) string {
		name := variable.FindStringSubmatch(m)[1]
		if v, ok := values[name]; ok {
			return v
		}
		unknown = append(unknown, m)
		return m
	})
	if len(unknown) > 0 {
		return nil, fmt.Errorf("unknown variables %s (known: ${VERSION}, ${COMMIT})", strings.Join(unknown, ", "))
	}
	if err := check([]byte(rendered), version); err != nil {
		return nil, err
	}
	return []byte(rendered), nil
}

// constructor is the part of a component constructor that check looks at.
type constructor struct {
	Components []struct {
		Name      string `json:"name"`
		Version   string `json:"version"`
		Resources []struct {
			Name    string `json:"name"`
			Type    string `json:"type"`
			Version string `json:"version"`
			Access  struct {
				Type           string `json:"type"`
				ImageReference string `json:"imageReference"`
			} `json:"access"`
		} `json:"resources"`
	} `json:"components"`
}

// check makes sure that the constructor holds one component of the version with the
// provider's image of the same version.
func check(rendered []byte, version string) error {
	var c constructor
	if err := yaml.Unmarshal(rendered, &c); err != nil {
		return fmt.Errorf("the rendered constructor is no valid YAML: %w", err)
	}
	if len(c.Components) != 1 {
		return fmt.Errorf("expected one component, found %d", len(c.Components))
	}
	comp := c.Components[0]
	if comp.Name == "" || comp.Version != version {
		return fmt.Errorf("component %q has version %q, expected %q", comp.Name, comp.Version, version)
	}
	want := Image + ":" + version
	for _, r := range comp.Resources {
		if r.Type == "ociImage" && r.Access.ImageReference == want && r.Version == version {
			return nil
		}
	}
	return errors.New("no ociImage resource references " + want)
}

// Package ocm renders the provider's OCM component constructor (ocm/component-constructor.yaml)
// and turns it into a component descriptor that it pushes to an OCI registry the way OCM's
// OCI repository mapping stores component versions, so that `ocm get componentversions`
// and openmcp's deployment find it.
package ocm

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"sigs.k8s.io/yaml"
)

// Image is the repository of the provider's image in the project's registry; its tag is
// the version.
const Image = "ghcr.io/openmcp-project/images/service-provider-kro"

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

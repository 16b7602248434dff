package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/openmcp-project/service-provider-kro/hack/release/ocm"
)

const commit = "0123456789abcdef0123456789abcdef01234567"

func TestRenderTheRepositorysConstructor(t *testing.T) {
	out := filepath.Join(t.TempDir(), "ocm", "cc.yaml")
	if err := run("../../ocm/component-constructor.yaml", "../../VERSION", commit, out); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	v, err := os.ReadFile("../../VERSION")
	if err != nil {
		t.Fatal(err)
	}
	version := strings.TrimSpace(string(v))
	for _, want := range []string{"version: " + version, ocm.Image + ":" + version, "commit: " + commit} {
		if !strings.Contains(string(data), want) {
			t.Errorf("rendered constructor lacks %q:\n%s", want, data)
		}
	}
	if strings.Contains(string(data), "${") {
		t.Errorf("variables left in the rendered constructor:\n%s", data)
	}
}

func TestRenderRejects(t *testing.T) {
	good := "components:\n- name: x\n  version: ${VERSION}\n  resources:\n  - name: image\n    type: ociImage\n    version: ${VERSION}\n    access:\n      type: ociArtifact\n      imageReference: " + ocm.Image + ":${VERSION}\n"
	if _, err := ocm.Render([]byte(good), "v1.2.3", commit); err != nil {
		t.Fatalf("a good constructor: %v", err)
	}
	for name, tc := range map[string]struct{ tmpl, version, commit, want string }{
		"no semver":        {good, "latest", commit, "not a semantic version"},
		"no commit":        {good, "v1.2.3", "main", "not a git commit"},
		"unknown variable": {good + "# ${TAG}\n", "v1.2.3", commit, "unknown variables ${TAG}"},
		"no image":         {strings.ReplaceAll(good, ocm.Image, "example.com/other"), "v1.2.3", commit, "no ociImage resource"},
		"broken yaml":      {good + "\t:\n", "v1.2.3", commit, "no valid YAML"},
	} {
		if _, err := ocm.Render([]byte(tc.tmpl), tc.version, tc.commit); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error with %q", name, err, tc.want)
		}
	}
}

package controllers

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// layers ranks the packages under controllers/ as CONTRIBUTING.md's table does: a package
// imports only packages of a lower rank.
var layers = map[string]int{
	"foreign": 0, "chartparts": 0, "versions": 0,
	"rollout": 1, "rollout/rollouttest": 1, "guard": 1, "owned": 1,
	"reach":       2,
	"step":        3,
	"flux":        4,
	"pullsecrets": 5, "handover": 5,
	"placement": 6, "placement/credentialtest": 6,
	"deletion": 7,
}

// pure are the packages that read no cluster: no client of any kind.
var pure = []string{"versions", "rollout"}

const controllersPath = "github.com/openmcp-project/service-provider-kro/controllers/"

// TestPackageLayers reads the imports of every package under controllers/ and fails on
// one that reaches beside or above its own layer, or on a package the table lacks.
func TestPackageLayers(t *testing.T) {
	dirs := map[string]bool{}
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		if dir := filepath.ToSlash(filepath.Dir(path)); dir != "." && !strings.HasPrefix(dir, "rbac") {
			dirs[dir] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for dir := range dirs {
		rank, ok := layers[dir]
		if !ok {
			t.Errorf("package controllers/%s is in no layer: add it to CONTRIBUTING.md's table and to layers", dir)
			continue
		}
		for _, imp := range imports(t, dir) {
			if slices.Contains(pure, dir) && (strings.HasPrefix(imp, "sigs.k8s.io/controller-runtime") || strings.HasPrefix(imp, "k8s.io/client-go")) {
				t.Errorf("controllers/%s is pure but imports %s", dir, imp)
			}
			other, ok := strings.CutPrefix(imp, controllersPath)
			if !ok || strings.HasPrefix(other, "rbac") {
				continue
			}
			if layers[other] >= rank {
				t.Errorf("controllers/%s (layer %d) imports controllers/%s (layer %d): a package imports only lower layers", dir, rank, other, layers[other])
			}
		}
	}
	if len(dirs) < len(layers) {
		t.Errorf("found %d packages, the table has %d", len(dirs), len(layers))
	}
}

// imports are the import paths of the package's non-test files.
func imports(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, spec := range af.Imports {
			p, _ := strconv.Unquote(spec.Path.Value)
			out = append(out, p)
		}
	}
	return out
}

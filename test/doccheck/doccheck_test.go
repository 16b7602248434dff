// Package doccheck_test keeps the user docs and the code naming the same things: every
// condition, reason, label, annotation, flag and task the code defines is named in a
// doc, and every one a doc names exists in the code.
package doccheck_test

import (
	"fmt"
	"go/ast"
	"go/constant"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"

	"sigs.k8s.io/yaml"
)

// userDocs are the docs users read; the measurement records are not among them.
var userDocs = []string{
	"README.md", "CHANGELOG.md", "CONTRIBUTING.md", "config/README.md",
	"docs/api.md", "docs/operations.md", "docs/migration.md", "docs/releases.md", "docs/architecture.md", "docs/rbac.md", "docs/testing.md",
	"docs/reference/flags.md",
}

const apiPackage = "github.com/openmcp-project/service-provider-kro/api/v1alpha1"

func root(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// docs is the text of every user doc.
func docs(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, f := range userDocs {
		data, err := os.ReadFile(filepath.Join(root(t), f))
		if err != nil {
			t.Fatal(err)
		}
		out[f] = string(data)
	}
	return out
}

// apiNames are the string constants of the API package whose names start with prefix.
// The package is type-checked alone: its imports are left unresolved, which leaves the
// constants, built only from each other, their values.
func apiNames(t *testing.T, prefix string) map[string]string {
	t.Helper()
	dir := filepath.Join(root(t), "api", "v1alpha1")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	conf := types.Config{Importer: unresolved{}, Error: func(error) {}}
	pkg, _ := conf.Check(apiPackage, fset, files, nil)
	out := map[string]string{}
	for _, name := range pkg.Scope().Names() {
		c, ok := pkg.Scope().Lookup(name).(*types.Const)
		if !ok || !strings.HasPrefix(name, prefix) || c.Val().Kind() != constant.String {
			continue
		}
		out[name] = constant.StringVal(c.Val())
	}
	return out
}

// unresolved resolves no import.
type unresolved struct{}

func (unresolved) Import(path string) (*types.Package, error) {
	return nil, fmt.Errorf("%s: not resolved", path)
}

// keyPrefix is the prefix of the provider's labels and annotations.
const keyPrefix = "kro.services.open-control-plane.io/"

// codeKeys are the labels and annotations of the provider's prefix that non-test Go code
// builds as LabelPrefix + "<name>", in any package.
func codeKeys(t *testing.T) []string {
	t.Helper()
	var out []string
	built := regexp.MustCompile(`(?:v1alpha1\.|[^A-Za-z0-9_.])LabelPrefix \+ "([a-z0-9-]+)"`)
	err := filepath.WalkDir(root(t), func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || path == filepath.Join(root(t), "hack", "tools")) {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range built.FindAllStringSubmatch(string(data), -1) {
			if !slices.Contains(out, keyPrefix+m[1]) {
				out = append(out, keyPrefix+m[1])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// named tells whether a doc names value in code quotes, alone or as the start of one; a
// key of the provider's prefix may be shortened to "…/<name>".
func named(all map[string]string, value string) bool {
	quoted := []string{"`" + value + "`", "`" + value + "=", "`" + value + ":"}
	if rest, ok := strings.CutPrefix(value, keyPrefix); ok {
		quoted = append(quoted, "`…/"+rest+"`")
	}
	for _, text := range all {
		for _, q := range quoted {
			if strings.Contains(text, q) {
				return true
			}
		}
	}
	return false
}

// TestEveryAPINameIsDocumented: each condition, reason, label, annotation and the
// finalizer of the API, and each label or annotation of the provider's prefix that other
// packages build, is named in a user doc.
func TestEveryAPINameIsDocumented(t *testing.T) {
	all := docs(t)
	for _, prefix := range []string{"Condition", "Reason", "Label", "Annotation", "Finalizer"} {
		for name, value := range apiNames(t, prefix) {
			if name == "LabelPrefix" {
				continue
			}
			if !named(all, value) {
				t.Errorf("%s.%s = %q is named in no user doc (%s)", filepath.Base(apiPackage), name, value, strings.Join(userDocs, ", "))
			}
		}
	}
	for _, key := range codeKeys(t) {
		if !named(all, key) {
			t.Errorf("the code builds the key %q, which no user doc names", key)
		}
	}
}

// section is the text of a doc from a heading to the next one of the same level.
func section(t *testing.T, text, heading string) string {
	t.Helper()
	i := strings.Index(text, "\n"+heading+"\n")
	if i < 0 {
		t.Fatalf("no section %q", heading)
	}
	rest := text[i+len(heading)+2:]
	level := strings.Index(heading, " ") + 1
	if j := strings.Index(rest, "\n"+strings.Repeat("#", level-1)+" "); j >= 0 {
		rest = rest[:j]
	}
	return rest
}

// firstColumn are the code-quoted names in the first column of a section's table.
func firstColumn(text string) []string {
	var out []string
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cell := strings.SplitN(line, "|", 3)[1]
		for _, m := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(cell, -1) {
			out = append(out, m[1])
		}
	}
	return out
}

// TestDocumentedAPINamesExist: the conditions and reasons docs/api.md's tables list, and
// every label or annotation of the API's prefix a doc names, exist in the code.
func TestDocumentedAPINamesExist(t *testing.T) {
	all := docs(t)
	api := all["docs/api.md"]
	values := func(prefixes ...string) []string {
		var out []string
		for _, p := range prefixes {
			for _, v := range apiNames(t, p) {
				out = append(out, v)
			}
		}
		return out
	}
	conditions, reasons := values("Condition"), values("Reason")
	for _, c := range firstColumn(section(t, api, "### Conditions")) {
		if !slices.Contains(conditions, c) {
			t.Errorf("docs/api.md lists condition %q, which the code does not define", c)
		}
	}
	for _, r := range firstColumn(section(t, api, "### Reasons")) {
		if !slices.Contains(reasons, r) {
			t.Errorf("docs/api.md lists reason %q, which the code does not define", r)
		}
	}
	keys := append(values("Label", "Annotation", "Finalizer"), codeKeys(t)...)
	prefixed := regexp.MustCompile("`(kro\\.services\\.open-control-plane\\.io/[a-z0-9-]+)")
	for f, text := range all {
		for _, m := range prefixed.FindAllStringSubmatch(text, -1) {
			if !slices.Contains(keys, m[1]) {
				t.Errorf("%s names %q, which is no label, annotation or finalizer of the code", f, m[1])
			}
		}
	}
}

// otherTools are flags of other programs that the docs quote.
var otherTools = []string{
	"kubeconfig", "dry-run", "from-file", // kubectl
	"watch-label-selector", "allow-crd-deletion", // Flux's controllers
	"privileged", "cap-add", "cgroupns", // docker run
}

// TestDocumentedFlagsExist: every flag a user doc quotes is one of the binary's (the
// reference, which TestFlagReferenceIsCurrent keeps equal to the binary, names them all)
// or of a tool the docs use.
func TestDocumentedFlagsExist(t *testing.T) {
	all := docs(t)
	reference := all["docs/reference/flags.md"]
	flag := regexp.MustCompile("`--([a-z][a-z0-9.-]*)")
	for f, text := range all {
		for _, m := range flag.FindAllStringSubmatch(text, -1) {
			if !strings.Contains(reference, "| `--"+m[1]+"` |") && !slices.Contains(otherTools, m[1]) {
				t.Errorf("%s quotes --%s, which no command of service-provider-kro defines", f, m[1])
			}
		}
	}
}

// TestTasksAndDocsAgree: every task of Taskfile.yaml a user can run is named in a user
// doc, and every task a doc names exists and can be run (an internal task is a step of
// another, which `task` refuses to run on its own).
func TestTasksAndDocsAgree(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(root(t), "Taskfile.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var tf struct {
		Tasks map[string]struct {
			Internal bool `json:"internal"`
		} `json:"tasks"`
	}
	if err := yaml.Unmarshal(data, &tf); err != nil {
		t.Fatal(err)
	}
	all := docs(t)
	task := regexp.MustCompile("(?:go tool task |`task )([a-z][a-z0-9-]*)")
	seen := map[string]bool{}
	for f, text := range all {
		for _, m := range task.FindAllStringSubmatch(text, -1) {
			seen[m[1]] = true
			if tk, ok := tf.Tasks[m[1]]; !ok {
				t.Errorf("%s names task %q, which Taskfile.yaml does not define", f, m[1])
			} else if tk.Internal {
				t.Errorf("%s names task %q, which is internal: a user cannot run it", f, m[1])
			}
		}
	}
	for name, tk := range tf.Tasks {
		if !seen[name] && !tk.Internal {
			t.Errorf("task %q of Taskfile.yaml is named in no user doc", name)
		}
	}
}

// TestRelativeLinksResolve: every relative link in the repository's Markdown files points
// at a file that exists and, for a Markdown file, at a heading it has.
func TestRelativeLinksResolve(t *testing.T) {
	link := regexp.MustCompile(`\]\(([^)#\s]*)(#[^)\s]*)?\)`)
	err := filepath.WalkDir(root(t), func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "bin") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".md") {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root(t), path)
		for _, m := range link.FindAllStringSubmatch(string(data), -1) {
			target, anchor := m[1], strings.TrimPrefix(m[2], "#")
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file := path
			if target != "" {
				file = filepath.Join(filepath.Dir(path), target)
			}
			if _, err := os.Stat(file); err != nil {
				t.Errorf("%s links %s, which does not exist", rel, m[1])
				continue
			}
			if anchor != "" && strings.HasSuffix(file, ".md") && !slices.Contains(headingAnchors(t, file), anchor) {
				t.Errorf("%s links %s#%s, a heading %s does not have", rel, m[1], anchor, filepath.Base(file))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// headingAnchors are the anchors GitHub gives a Markdown file's headings.
func headingAnchors(t *testing.T, file string) []string {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	inCode := false
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "```") {
			inCode = !inCode
		}
		if inCode || !strings.HasPrefix(line, "#") {
			continue
		}
		title := strings.ToLower(strings.TrimSpace(strings.TrimLeft(line, "#")))
		var b strings.Builder
		for _, r := range title {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		out = append(out, b.String())
	}
	return out
}

// TestImageReferencesAreTheRelease: every reference to the provider's image in a user doc
// names the release VERSION is making (VERSION without its pre-release part), except in
// the migration guide, which quotes the earlier provider's images.
func TestImageReferencesAreTheRelease(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(root(t), "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	release, _, _ := strings.Cut(strings.TrimSpace(string(data)), "-")
	ref := regexp.MustCompile(`ghcr\.io/openmcp-project/images/service-provider-kro:([A-Za-z0-9._-]+)`)
	found := 0
	for file, text := range docs(t) {
		if file == "docs/migration.md" {
			continue
		}
		for _, m := range ref.FindAllStringSubmatch(text, -1) {
			found++
			if m[1] != release && m[1] != "vX.Y.Z" { // the placeholder of docs/releases.md

				t.Errorf("%s names %s: the release is %s", file, m[0], release)
			}
		}
	}
	if found == 0 {
		t.Error("no doc names the provider's image with a tag")
	}
}

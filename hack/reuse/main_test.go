package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// The headers in these tests are built from licenseTag and copyrightTag so that this
// file does not carry SPDX tags itself.

const apache = `version = 1
[[annotations]]
path = "**"
precedence = "aggregate"
SPDX-FileCopyrightText = "2026 The Authors"
SPDX-License-Identifier = "Apache-2.0"
`

func mustParse(t *testing.T, src string) *Config {
	t.Helper()
	cfg, err := ParseConfig(src)
	if err != nil {
		t.Fatalf("ParseConfig: %v\n%s", err, src)
	}
	return cfg
}

// header is a file's beginning with the given tags, as comment lines.
func header(copyright, license string) []byte {
	var b strings.Builder
	b.WriteString("// Package x does x.\n//\n")
	if copyright != "" {
		b.WriteString("// " + copyrightTag + " " + copyright + "\n")
	}
	if license != "" {
		b.WriteString("// " + licenseTag + " " + license + "\n")
	}
	b.WriteString("package x\n")
	return []byte(b.String())
}

func TestGlobRegexp(t *testing.T) {
	for _, tc := range []struct {
		glob string
		yes  []string
		no   []string
	}{
		{"**", []string{"a", "a/b/c.go", ".ci/run"}, nil},
		{"*", []string{"README.md", ".gitignore"}, []string{"docs/api.md"}},
		{"*.go", []string{"main.go"}, []string{"hack/main.go", "main.go.orig"}},
		{"docs/*.md", []string{"docs/api.md"}, []string{"docs/a/b.md", "api.md", "docs/api.mdx"}},
		{"config/**", []string{"config/crd/platform/x.yaml", "config/x"}, []string{"configx/y", "a/config/x"}},
		{"**/*.go", []string{"main.go", "api/v1alpha1/types.go"}, []string{"README.md"}},
		{"api/**/zz_generated.deepcopy.go", []string{"api/zz_generated.deepcopy.go", "api/v1alpha1/zz_generated.deepcopy.go"}, []string{"zz_generated.deepcopy.go"}},
		// As in the REUSE tool, the / after ** is dropped: **/x also matches ax.
		{"**/x", []string{"x", "a/b/x", "ax"}, []string{"x/a"}},
		{"a.b", []string{"a.b"}, []string{"aXb"}},
		{"file?[1].txt", []string{"file?[1].txt"}, []string{"fileA1.txt"}},
		{`star\*.txt`, []string{"star*.txt"}, []string{"starry.txt"}},
		{"LICENSE", []string{"LICENSE"}, []string{"a/LICENSE", "LICENSE.txt"}},
	} {
		re := GlobRegexp(tc.glob)
		for _, p := range tc.yes {
			if !re.MatchString(p) {
				t.Errorf("%q does not match %q (%s)", tc.glob, p, re)
			}
		}
		for _, p := range tc.no {
			if re.MatchString(p) {
				t.Errorf("%q matches %q (%s)", tc.glob, p, re)
			}
		}
	}
}

func TestParseConfig(t *testing.T) {
	cfg := mustParse(t, `# A comment.
version = 1 # trailing comment
SPDX-PackageName = "service-provider-kro"

[[annotations]]
path = "**"
SPDX-FileCopyrightText = "2026 A \"quoted\" Holder \u00a9"
SPDX-License-Identifier = 'Apache-2.0'

[[annotations]]
  path = [
    "docs/*.svg", # generated
    'docs/benchmarks.json',
  ]
  "precedence" = "override"
  SPDX-FileCopyrightText = ["2026 A", "2025 B"]
  SPDX-License-Identifier = "CC-BY-4.0 OR (MIT AND Apache-2.0)"
`)
	want := []*Annotation{
		{Line: 5, Paths: []string{"**"}, Precedence: Closest, Copyrights: []string{`2026 A "quoted" Holder ©`}, Licenses: []string{"Apache-2.0"}},
		{Line: 10, Paths: []string{"docs/*.svg", "docs/benchmarks.json"}, Precedence: Override, Copyrights: []string{"2026 A", "2025 B"}, Licenses: []string{"CC-BY-4.0 OR (MIT AND Apache-2.0)"}},
	}
	if cfg.Version != 1 || len(cfg.Annotations) != len(want) {
		t.Fatalf("got version %d and %d annotations", cfg.Version, len(cfg.Annotations))
	}
	for i, a := range cfg.Annotations {
		a.globs = nil
		if !reflect.DeepEqual(a, want[i]) {
			t.Errorf("annotation %d:\ngot  %+v\nwant %+v", i, a, want[i])
		}
	}
	if got := licenseIDs(cfg.Annotations[1].Licenses); !slices.Equal(got, []string{"CC-BY-4.0", "MIT", "Apache-2.0"}) {
		t.Errorf("licenseIDs = %q", got)
	}
}

func TestParseConfigRejects(t *testing.T) {
	const ann = "version = 1\n[[annotations]]\n"
	for name, tc := range map[string]struct{ src, want string }{
		"no version":           {"[[annotations]]\npath = \"**\"\n", "want version = 1"},
		"version 2":            {"version = 2\n", "want version = 1"},
		"version a string":     {"version = \"1\"\n", "not version = 1"},
		"other table":          {"version = 1\n[annotation]\n", "line 2: want a key or [[annotations]]"},
		"unknown key":          {ann + "path = \"**\"\nLicense = \"MIT\"\n", "line 4: hack/reuse does not know the key License in [[annotations]]"},
		"unknown top-level":    {"version = 1\nname = \"x\"\n", "line 2: hack/reuse knows only version"},
		"no path":              {ann + "precedence = \"closest\"\n", "line 2: the annotation has no path"},
		"empty path":           {ann + "path = []\n", "line 3: path must be a string or a non-empty array"},
		"bad precedence":       {ann + "path = \"**\"\nprecedence = \"nearest\"\n", "line 4: precedence must be"},
		"twice":                {ann + "path = \"a\"\npath = \"b\"\n", "line 4: path is set twice"},
		"no license":           {ann + "path = \"**\"\nSPDX-License-Identifier = \"()\"\n", "names no license"},
		"unterminated":         {ann + "path = \"**\n", "line 3: cannot read \"\\\"**\""},
		"multi-line string":    {ann + "path = \"\"\"**\"\"\"\n", "multi-line strings"},
		"two on a line":        {ann + "path = \"a\" precedence = \"closest\"\n", "line 3: want the end of the line"},
		"no =":                 {ann + "path \"**\"\n", "line 3: want = after path"},
		"number in array":      {ann + "path = [\"a\", 1]\n", "line 3: want a string in the array"},
		"unclosed array":       {ann + "path = [\"a\" \"b\"]\n", "line 3: want , or ]"},
		"bad escape":           {ann + "path = \"\\q\"\n", "line 3: bad string"},
		"a float":              {"version = 1.0\n", "line 1: cannot read"},
		"table header garbage": {"version = 1\n[[annotations]] x\n", "line 2: want the end of the line"},
	} {
		if _, err := ParseConfig(tc.src); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error with %q", name, err, tc.want)
		}
	}
}

func TestParseHeader(t *testing.T) {
	text := "<!--\n" + copyrightTag + " 2026 Jane Doe -->\n" +
		"/* " + licenseTag + " MIT OR Apache-2.0 */\n" +
		`const s = "` + licenseTag + `"` + "\n" + // a tag without a value is none
		"# " + "REUSE-" + "IgnoreStart\n" + "# " + licenseTag + " GPL-3.0-only\n# " + "REUSE-" + "IgnoreEnd\n"
	h := ParseHeader([]byte(text))
	if !slices.Equal(h.Copyrights, []string{"2026 Jane Doe"}) || !slices.Equal(h.Licenses, []string{"MIT OR Apache-2.0"}) {
		t.Errorf("got %+v", h)
	}
	if got := licenseIDs([]string{"GPL-2.0+ WITH Classpath-exception-2.0 */"}); !slices.Equal(got, []string{"GPL-2.0", "Classpath-exception-2.0"}) {
		t.Errorf("licenseIDs = %q", got)
	}
}

// repo is a tracked file list: everything covered by the apache configuration.
func repo(extra ...File) []File {
	return append([]File{
		{Path: ".ci/run", Header: []byte("#!/usr/bin/env bash\n")},
		{Path: "LICENSE", Header: []byte("Apache License\n")},
		{Path: "LICENSES/Apache-2.0.txt", Header: []byte("Apache License\n")},
		{Path: "REUSE.toml", Header: []byte(apache)},
		{Path: "main.go", Header: []byte("package main\n")},
	}, extra...)
}

func TestCheckPasses(t *testing.T) {
	res := Check(mustParse(t, apache), repo(
		File{Path: "docs/logo.png"}, // binary: no header
		File{Path: "a/b/c.yaml", Header: header("2025 Someone Else", "")},
	))
	if len(res.Problems) > 0 {
		t.Fatalf("problems: %q", res.Problems)
	}
	// LICENSE, LICENSES/ and REUSE.toml need no licensing information.
	if res.Files != 4 || !reflect.DeepEqual(res.Licenses, map[string]int{"Apache-2.0": 4}) {
		t.Errorf("got %d files, licenses %v", res.Files, res.Licenses)
	}
}

func TestCheckFails(t *testing.T) {
	const mit = "version = 1\n[[annotations]]\npath = \"**\"\nSPDX-FileCopyrightText = \"2026 X\"\nSPDX-License-Identifier = \"MIT\"\n"
	for name, tc := range map[string]struct {
		cfg   string
		files []File
		want  []string
	}{
		"a file no annotation covers": {
			cfg:   "version = 1\n[[annotations]]\npath = [\"*\", \".ci/*\", \"LICENSES/*\"]\nSPDX-FileCopyrightText = \"2026 X\"\nSPDX-License-Identifier = \"Apache-2.0\"\n",
			files: repo(File{Path: "docs/api.md", Header: []byte("# API\n")}),
			want: []string{
				"docs/api.md: no copyright notice: no [[annotations]] path in REUSE.toml matches it and its header has no SPDX-FileCopyrightText tag",
				"docs/api.md: no license: no [[annotations]] path in REUSE.toml matches it and its header has no SPDX-License-Identifier tag",
			},
		},
		"a header with a license and no copyright": {
			cfg:   "version = 1\n[[annotations]]\npath = \"*\"\nSPDX-FileCopyrightText = \"2026 X\"\nSPDX-License-Identifier = \"Apache-2.0\"\n",
			files: []File{{Path: "LICENSES/Apache-2.0.txt"}, {Path: "main.go"}, {Path: "x/y.go", Header: header("", "Apache-2.0")}},
			want:  []string{"x/y.go: no copyright notice: no [[annotations]] path"},
		},
		"an annotation without a license": {
			cfg:   "version = 1\n[[annotations]]\npath = \"**\"\nSPDX-FileCopyrightText = \"2026 X\"\n",
			files: []File{{Path: "main.go"}},
			want:  []string{"main.go: no license: REUSE.toml:2, the last annotation matching it, has no SPDX-License-Identifier"},
		},
		"a missing LICENSES text": {
			cfg:   mit,
			files: repo(),
			want: []string{
				"LICENSES/MIT.txt is missing: 2 files are under MIT (.ci/run among them); add its text",
				"LICENSES/Apache-2.0.txt: no file is under Apache-2.0",
			},
		},
		"a header's license without its text": {
			cfg:   apache,
			files: repo(File{Path: "x.go", Header: header("", "GPL-2.0-only WITH Classpath-exception-2.0")}),
			want:  []string{"LICENSES/Classpath-exception-2.0.txt is missing: 1 files", "LICENSES/GPL-2.0-only.txt is missing: 1 files are under GPL-2.0-only (x.go among them)"},
		},
		"override ignores the header": {
			cfg:   strings.Replace(apache, "aggregate", "override", 1),
			files: repo(File{Path: "LICENSES/MIT.txt"}, File{Path: "x.go", Header: header("", "MIT")}),
			want:  []string{"LICENSES/MIT.txt: no file is under MIT"},
		},
		"closest prefers the header": {
			cfg:   strings.Replace(apache, "aggregate", "closest", 1),
			files: []File{{Path: "LICENSES/Apache-2.0.txt"}, {Path: "LICENSES/MIT.txt"}, {Path: "x.go", Header: header("", "MIT")}},
			want:  []string{"LICENSES/Apache-2.0.txt: no file is under Apache-2.0"},
		},
		"the last matching annotation applies": {
			cfg:   apache + "[[annotations]]\npath = \"third_party/**\"\nSPDX-FileCopyrightText = \"2020 Upstream\"\nSPDX-License-Identifier = \"MIT\"\n",
			files: repo(File{Path: "third_party/x/y.go"}),
			want:  []string{"LICENSES/MIT.txt is missing: 1 files are under MIT (third_party/x/y.go among them)"},
		},
		"a stale path and a nested REUSE.toml": {
			cfg:   apache + "[[annotations]]\npath = [\"**\", \"docs/*.svg\"]\nSPDX-FileCopyrightText = \"2026 X\"\nSPDX-License-Identifier = \"Apache-2.0\"\n",
			files: repo(File{Path: "sub/REUSE.toml"}),
			want:  []string{"sub/REUSE.toml: hack/reuse reads only the root REUSE.toml", `REUSE.toml:7: path "docs/*.svg" matches no file git tracks`},
		},
	} {
		res := Check(mustParse(t, tc.cfg), tc.files)
		if len(res.Problems) != len(tc.want) {
			t.Errorf("%s: got %d problems, want %d:\n%s", name, len(res.Problems), len(tc.want), strings.Join(res.Problems, "\n"))
			continue
		}
		for i, w := range tc.want {
			if !strings.HasPrefix(res.Problems[i], w) {
				t.Errorf("%s: problem %d:\ngot  %s\nwant %s...", name, i, res.Problems[i], w)
			}
		}
	}
}

func TestCheckLicenseCompanion(t *testing.T) {
	cfg := mustParse(t, "version = 1\n[[annotations]]\npath = \"LICENSES/*\"\nSPDX-FileCopyrightText = \"2026 X\"\nSPDX-License-Identifier = \"Apache-2.0\"\n")
	files := []File{
		{Path: "LICENSES/Apache-2.0.txt"},
		{Path: "logo.png"},
		{Path: "logo.png.license", Header: header("2026 X", "Apache-2.0")},
	}
	if res := Check(cfg, files); len(res.Problems) > 0 || res.Files != 1 {
		t.Errorf("logo.png.license should cover logo.png: %d files, problems %q", res.Files, res.Problems)
	}
	if res := Check(cfg, files[:2]); len(res.Problems) != 3 || !strings.HasPrefix(res.Problems[0], "logo.png: no copyright notice") {
		t.Errorf("without its companion logo.png is not covered: %q", res.Problems)
	}
}

// TestRun checks a real repository: what git tracks is checked, symbolic links and
// empty files are left out, and untracked files are not looked at.
func TestRun(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	dir := t.TempDir()
	write := func(name, content string) {
		t.Helper()
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gitIn := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	gitIn("init", "-q")
	write("REUSE.toml", strings.Replace(apache, `"**"`, `["*.go", "LICENSES/*"]`, 1))
	write("LICENSES/Apache-2.0.txt", "Apache License\n")
	write("main.go", "package main\n")
	write("empty.txt", "")
	write("docs/own.md", string(header("2026 X", "Apache-2.0")))
	write("docs/binary.bin", "\x00\x01"+string(header("2026 X", "Apache-2.0")))
	write("untracked.txt", "no licensing\n")
	if err := os.Symlink("main.go", filepath.Join(dir, "link.txt")); err != nil {
		t.Fatal(err)
	}
	gitIn("add", "REUSE.toml", "LICENSES", "main.go", "empty.txt", "docs", "link.txt")

	res, err := run(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"docs/binary.bin: no copyright notice: no [[annotations]] path",
		"docs/binary.bin: no license: no [[annotations]] path",
	}
	if len(res.Problems) != len(want) || !strings.HasPrefix(res.Problems[0], want[0]) || !strings.HasPrefix(res.Problems[1], want[1]) {
		t.Errorf("got problems:\n%s\nwant:\n%s", strings.Join(res.Problems, "\n"), strings.Join(want, "\n"))
	}
	if res.Files != 3 {
		t.Errorf("checked %d files, want 3 (main.go, docs/own.md, docs/binary.bin)", res.Files)
	}

	write("REUSE.toml", "version = 1\n[[annotations]]\npath = \"**\"\nprecedence = \"sometimes\"\n")
	if _, err := run(dir); err == nil || !strings.Contains(err.Error(), "REUSE.toml: line 4: precedence must be") {
		t.Errorf("a broken REUSE.toml: got %v", err)
	}
}

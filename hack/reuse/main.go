// Command reuse checks the repository against its REUSE.toml (REUSE specification 3.2)
// offline and without the REUSE tool: every file git tracks needs a copyright notice and
// a license, from the last [[annotations]] table whose path matches it or from SPDX tags
// in its own header (or in its .license companion), and every license and exception
// used needs its text in LICENSES/. A LICENSES text nobody uses, an annotation path that
// matches no tracked file and a nested REUSE.toml are reported too. It prints what is
// wrong and exits 1; task verify runs it.
//
//	go run ./hack/reuse [-C dir]
//
// Like the REUSE tool it exempts license texts (LICENSE*, COPYING*, LICENSES/), REUSE.toml,
// .license companions, SPDX documents, symbolic links and empty files. Unlike the tool it
// reads only the first 4 KiB of a file for tags, knows copyright notices only in their
// SPDX form, and reads only the root REUSE.toml.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// The tags are spelt in two parts so that this file does not carry them itself: the
// REUSE tool would read them as this file's licensing.
const (
	licenseTag   = "SPDX-" + "License-Identifier:"
	copyrightTag = "SPDX-" + "FileCopyrightText:"
	ignoreStart  = "REUSE-" + "IgnoreStart"
	ignoreEnd    = "REUSE-" + "IgnoreEnd"
)

// headerBytes is how much of a file is searched for tags.
const headerBytes = 4096

func main() {
	root := flag.String("C", ".", "the root of the repository to check")
	flag.Parse()
	res, err := run(*root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "reuse:", err)
		os.Exit(1)
	}
	if len(res.Problems) > 0 {
		fmt.Fprintf(os.Stderr, "reuse: %d problem(s) with REUSE.toml and the files git tracks:\n", len(res.Problems))
		for _, p := range res.Problems {
			fmt.Fprintln(os.Stderr, "  "+p)
		}
		fmt.Fprintln(os.Stderr, "Cover a file with a path of an [[annotations]] table in REUSE.toml or with SPDX tags in its header, and put each license's text into LICENSES/<id>.txt.")
		os.Exit(1)
	}
	var licenses []string
	for _, id := range slices.Sorted(maps.Keys(res.Licenses)) {
		licenses = append(licenses, fmt.Sprintf("%s (%d)", id, res.Licenses[id]))
	}
	fmt.Printf("reuse: all %d tracked files have a copyright notice and a license with its text in LICENSES/: %s\n",
		res.Files, strings.Join(licenses, ", "))
}

// run checks the git repository at root against its REUSE.toml.
func run(root string) (Result, error) {
	src, err := os.ReadFile(filepath.Join(root, "REUSE.toml"))
	if err != nil {
		return Result{}, err
	}
	cfg, err := ParseConfig(string(src))
	if err != nil {
		return Result{}, fmt.Errorf("REUSE.toml: %w", err)
	}
	git := exec.Command("git", "-C", root, "ls-files", "-z")
	git.Stderr = os.Stderr
	out, err := git.Output()
	if err != nil {
		return Result{}, fmt.Errorf("git ls-files: %w", err)
	}
	files, err := readFiles(root, strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00"))
	if err != nil {
		return Result{}, err
	}
	return Check(cfg, files), nil
}

// readFiles reads the header of each tracked file. Symbolic links, submodules and empty
// files are left out, as the REUSE tool leaves them out; a file deleted from the work
// tree but still tracked is kept without a header. Binary files get no header.
func readFiles(root string, paths []string) ([]File, error) {
	var files []File
	for _, p := range paths {
		if p == "" {
			continue
		}
		name := filepath.Join(root, filepath.FromSlash(p))
		info, err := os.Lstat(name)
		switch {
		case errors.Is(err, os.ErrNotExist):
			files = append(files, File{Path: p})
			continue
		case err != nil:
			return nil, err
		case !info.Mode().IsRegular() || info.Size() == 0:
			continue
		}
		header, err := os.ReadFile(name)
		if err != nil {
			return nil, err
		}
		header = header[:min(len(header), headerBytes)]
		if bytes.IndexByte(header, 0) >= 0 {
			header = nil // binary
		}
		files = append(files, File{Path: p, Header: header})
	}
	return files, nil
}

// File is a file git tracks, as Check sees it.
type File struct {
	Path   string // slash-separated, from the repository's root
	Header []byte // the beginning of the file, nil for a binary file
}

// Result is what Check found.
type Result struct {
	Files    int            // how many files need licensing information (not the exempt ones)
	Licenses map[string]int // how many files each license or exception applies to
	Problems []string       // what keeps the repository from being compliant; none when it is
}

// Check resolves the licensing information of each file from cfg and the file's header,
// as the REUSE tool does: the last annotation whose path matches a file applies; with
// precedence "override" its information is all there is, with "aggregate" the header's
// is added, and with "closest" (the default) the header's copyright notices and
// licenses win over the annotation's where the header has any. A file's "<name>.license"
// companion, when tracked, stands in for its header. Every license and exception used
// needs a LICENSES/<id>.<ext> text, and every such text must be used.
func Check(cfg *Config, files []File) Result {
	res := Result{Licenses: map[string]int{}}
	byPath := map[string]File{}
	texts := map[string]string{}
	for _, f := range files {
		byPath[f.Path] = f
		if dir, base := path.Split(f.Path); dir == "LICENSES/" && !strings.HasSuffix(base, ".license") {
			texts[strings.TrimSuffix(base, path.Ext(base))] = f.Path
		}
	}
	usedBy := map[string]string{}
	for _, f := range files {
		if path.Base(f.Path) == "REUSE.toml" && f.Path != "REUSE.toml" {
			res.Problems = append(res.Problems, f.Path+": hack/reuse reads only the root REUSE.toml: move its annotations there, with paths from the root")
		}
		if exempt.MatchString(f.Path) {
			continue
		}
		res.Files++
		header := f.Header
		if companion, ok := byPath[f.Path+".license"]; ok {
			header = companion.Header
		}
		a := cfg.match(f.Path)
		copyrights, licenses := resolve(a, ParseHeader(header))
		if len(copyrights) == 0 {
			res.Problems = append(res.Problems, missing(f.Path, "copyright notice", "SPDX-FileCopyrightText", a))
		}
		if len(licenses) == 0 {
			res.Problems = append(res.Problems, missing(f.Path, "license", "SPDX-License-Identifier", a))
		}
		for _, id := range licenseIDs(licenses) {
			res.Licenses[id]++
			if _, ok := usedBy[id]; !ok {
				usedBy[id] = f.Path
			}
		}
	}
	for _, id := range slices.Sorted(maps.Keys(usedBy)) {
		if _, ok := texts[id]; !ok {
			res.Problems = append(res.Problems, fmt.Sprintf("LICENSES/%s.txt is missing: %d files are under %s (%s among them); add its text", id, res.Licenses[id], id, usedBy[id]))
		}
	}
	for _, id := range slices.Sorted(maps.Keys(texts)) {
		if _, ok := usedBy[id]; !ok {
			res.Problems = append(res.Problems, fmt.Sprintf("%s: no file is under %s: remove the text or name the license where it applies", texts[id], id))
		}
	}
	for _, a := range cfg.Annotations {
		for i, glob := range a.Paths {
			if !slices.ContainsFunc(files, func(f File) bool { return a.globs[i].MatchString(f.Path) }) {
				res.Problems = append(res.Problems, fmt.Sprintf("REUSE.toml:%d: path %q matches no file git tracks: fix or remove it", a.Line, glob))
			}
		}
	}
	return res
}

// exempt matches the paths the REUSE specification exempts from carrying licensing
// information: license texts, REUSE.toml, .license companions, SPDX documents, and
// whatever is under LICENSES/, .reuse/ or .git/.
var exempt = regexp.MustCompile(`(^|/)((LICENSES|\.reuse|\.git)/.*|(LICEN[CS]E|COPYING)([-.][^/]*)?|REUSE\.toml|[^/]*\.license|[^/]*\.spdx(\.(rdf|json|xml|ya?ml))?)$`)

// resolve combines an annotation (nil if none matches) and a header into the copyright
// notices and license expressions that apply.
func resolve(a *Annotation, h Header) (copyrights, licenses []string) {
	if a == nil {
		return h.Copyrights, h.Licenses
	}
	switch a.Precedence {
	case Override:
		return a.Copyrights, a.Licenses
	case Aggregate:
		return append(slices.Clone(a.Copyrights), h.Copyrights...), append(slices.Clone(a.Licenses), h.Licenses...)
	default: // Closest
		copyrights, licenses = h.Copyrights, h.Licenses
		if len(copyrights) == 0 {
			copyrights = a.Copyrights
		}
		if len(licenses) == 0 {
			licenses = a.Licenses
		}
		return copyrights, licenses
	}
}

// missing says why a file has no copyright notice or no license.
func missing(p, what, tag string, a *Annotation) string {
	if a == nil {
		return fmt.Sprintf("%s: no %s: no [[annotations]] path in REUSE.toml matches it and its header has no %s tag", p, what, tag)
	}
	return fmt.Sprintf("%s: no %s: REUSE.toml:%d, the last annotation matching it, has no %s, and its header (read unless precedence is override) has none either", p, what, a.Line, tag)
}

// Header is the licensing information a file carries itself.
type Header struct {
	Copyrights []string // what follows each SPDX-FileCopyrightText tag
	Licenses   []string // the SPDX expression after each SPDX-License-Identifier tag
}

// commentEnd is what may follow a tag's value on its line: the end of a comment or of a
// string.
var commentEnd = regexp.MustCompile(`(\s*(\*/|-->|\*\)|#}|%}|"|'|\\n))+\s*$`)

// ParseHeader finds the SPDX tags in a file's header, leaving out the text between
// REUSE's ignore markers.
func ParseHeader(text []byte) Header {
	var h Header
	ignoring := false
	for _, line := range strings.Split(string(text), "\n") {
		if strings.Contains(line, ignoreStart) || strings.Contains(line, ignoreEnd) {
			ignoring = strings.Contains(line, ignoreStart)
			continue
		}
		if ignoring {
			continue
		}
		if v, ok := tagValue(line, copyrightTag); ok {
			h.Copyrights = append(h.Copyrights, v)
		}
		if v, ok := tagValue(line, licenseTag); ok {
			h.Licenses = append(h.Licenses, v)
		}
	}
	return h
}

// tagValue returns the non-empty value that follows tag on line.
func tagValue(line, tag string) (string, bool) {
	i := strings.Index(line, tag)
	if i < 0 {
		return "", false
	}
	v := strings.TrimSpace(commentEnd.ReplaceAllString(line[i+len(tag):], ""))
	return v, v != ""
}

var (
	expressionChars = regexp.MustCompile(`^[A-Za-z0-9.+\-()\s]*`)
	licenseID       = regexp.MustCompile(`[A-Za-z0-9][A-Za-z0-9.\-]*\+?`)
)

// licenseIDs returns the license and exception identifiers in SPDX expressions, without
// the operators, parentheses and a trailing "+". An expression ends at the first
// character no identifier has, e.g. a quote or the end of a comment.
func licenseIDs(expressions []string) []string {
	var ids []string
	for _, e := range expressions {
		for _, tok := range licenseID.FindAllString(expressionChars.FindString(e), -1) {
			switch tok {
			case "AND", "OR", "WITH", "and", "or", "with":
				continue
			}
			if id := strings.TrimSuffix(tok, "+"); !slices.Contains(ids, id) {
				ids = append(ids, id)
			}
		}
	}
	return ids
}

// Precedences of an annotation.
const (
	Closest   = "closest"
	Aggregate = "aggregate"
	Override  = "override"
)

// Config is what hack/reuse reads of a REUSE.toml.
type Config struct {
	Version     int
	Annotations []*Annotation
}

// Annotation is one [[annotations]] table.
type Annotation struct {
	Line       int      // of its [[annotations]] header
	Paths      []string // globs, from the repository's root
	Precedence string
	Copyrights []string
	Licenses   []string // SPDX expressions
	globs      []*regexp.Regexp
}

// match returns the last annotation with a path that matches p, or nil.
func (c *Config) match(p string) *Annotation {
	for i := len(c.Annotations) - 1; i >= 0; i-- {
		a := c.Annotations[i]
		if slices.ContainsFunc(a.globs, func(g *regexp.Regexp) bool { return g.MatchString(p) }) {
			return a
		}
	}
	return nil
}

// GlobRegexp translates a path of REUSE.toml into a regular expression as the REUSE tool
// does: "*" matches any characters but "/", "**" matches any characters, and a "/" right
// after "**" is dropped, so "**/x" matches "x", "a/x" and also "ax"; "\" makes the next
// character literal, and every other character is literal (no "?", no "[...]").
func GlobRegexp(glob string) *regexp.Regexp {
	var b strings.Builder
	b.WriteString("^")
	for i := 0; i < len(glob); i++ {
		switch c := glob[i]; c {
		case '\\':
			if i+1 < len(glob) {
				i++
				b.WriteString(regexp.QuoteMeta(glob[i : i+1]))
			}
		case '*':
			stars := len(glob[i:]) - len(strings.TrimLeft(glob[i:], "*"))
			i += stars - 1
			if stars == 1 {
				b.WriteString("[^/]*")
				continue
			}
			b.WriteString(".*")
			if i+1 < len(glob) && glob[i+1] == '/' {
				i++
			}
		default:
			b.WriteString(regexp.QuoteMeta(glob[i : i+1]))
		}
	}
	b.WriteString("$")
	return regexp.MustCompile(b.String())
}

// finish checks what the parser cannot check line by line and compiles the globs.
func (c *Config) finish() error {
	if c.Version != 1 {
		return fmt.Errorf("version = %d, want version = 1 (REUSE.toml version 1)", c.Version)
	}
	for _, a := range c.Annotations {
		if len(a.Paths) == 0 {
			return fmt.Errorf("line %d: the annotation has no path", a.Line)
		}
		if a.Precedence == "" {
			a.Precedence = Closest
		}
		for _, l := range a.Licenses {
			if len(licenseIDs([]string{l})) == 0 {
				return fmt.Errorf("line %d: SPDX-License-Identifier %q names no license", a.Line, l)
			}
		}
		for _, p := range a.Paths {
			a.globs = append(a.globs, GlobRegexp(p))
		}
	}
	return nil
}

// set assigns a key of an [[annotations]] table, or of the top level when a is nil.
func (c *Config) set(a *Annotation, key string, v any) error {
	if a == nil {
		if n, ok := v.(int); ok && key == "version" {
			c.Version = n
			return nil
		}
		if _, ok := v.(string); ok && strings.HasPrefix(key, "SPDX-Package") {
			return nil
		}
		return fmt.Errorf("hack/reuse knows only version (an integer) and SPDX-Package* keys (strings) at the top level, not %s = %v", key, v)
	}
	if key == "precedence" {
		if s, ok := v.(string); ok && (s == Closest || s == Aggregate || s == Override) {
			a.Precedence = s
			return nil
		}
		return fmt.Errorf("precedence must be %q, %q or %q", Closest, Aggregate, Override)
	}
	field := map[string]*[]string{"path": &a.Paths, "SPDX-FileCopyrightText": &a.Copyrights, "SPDX-License-Identifier": &a.Licenses}[key]
	if field == nil {
		return fmt.Errorf("hack/reuse does not know the key %s in [[annotations]] (only path, precedence, SPDX-FileCopyrightText, SPDX-License-Identifier)", key)
	}
	switch v := v.(type) {
	case string:
		*field = []string{v}
	case []string:
		*field = v
	}
	if len(*field) == 0 {
		return fmt.Errorf("%s must be a string or a non-empty array of strings", key)
	}
	return nil
}

// ParseConfig reads the subset of TOML a REUSE.toml needs: top-level key = value pairs
// (version, and SPDX-Package* strings, which are accepted and ignored) and
// [[annotations]] tables of path, precedence, SPDX-FileCopyrightText and
// SPDX-License-Identifier. Keys are bare or quoted; values are strings ("..." with
// escapes as Go reads them, a superset of TOML's, or '...'), integers and arrays of
// strings, which may span lines; # starts a comment. Anything else is an error that
// names its line.
func ParseConfig(src string) (*Config, error) {
	if strings.Contains(src, `"""`) || strings.Contains(src, "'''") {
		return nil, errors.New("multi-line strings are not supported")
	}
	toks, err := tokenize(src)
	if err != nil {
		return nil, err
	}
	p := &parser{toks: toks}
	cfg := &Config{}
	var current *Annotation
	seen := map[string]bool{}
	for t := p.next(); t.text != ""; t = p.next() {
		switch {
		case t.newline():
			continue
		case t.text == "[[annotations]]":
			current = &Annotation{Line: t.line}
			cfg.Annotations = append(cfg.Annotations, current)
			seen = map[string]bool{}
		case bareKey.MatchString(t.text) || strings.HasPrefix(t.text, `"`):
			key, err := p.str(t)
			if err != nil {
				return nil, err
			}
			if seen[key] {
				return nil, t.errorf("%s is set twice", key)
			}
			seen[key] = true
			if eq := p.next(); eq.text != "=" {
				return nil, eq.errorf("want = after %s, got %q", key, eq.text)
			}
			v, err := p.value()
			if err != nil {
				return nil, err
			}
			if err := cfg.set(current, key, v); err != nil {
				return nil, t.errorf("%v", err)
			}
		default:
			return nil, t.errorf("want a key or [[annotations]], got %q", t.text)
		}
		if end := p.next(); !end.newline() && end.text != "" {
			return nil, end.errorf("want the end of the line, got %q", end.text)
		}
	}
	if err := cfg.finish(); err != nil {
		return nil, err
	}
	return cfg, nil
}

// token is a piece of TOML text: a line end, [[annotations]], one of [ ] , =, a string
// with its quotes, or a bare word (a key or an integer); "" is the end of the text.
type token struct {
	text string
	line int
}

func (t token) newline() bool { return t.text == "\n" || t.text == "\r\n" }

func (t token) errorf(format string, args ...any) error {
	return fmt.Errorf("line %d: %s", t.line, fmt.Sprintf(format, args...))
}

// tokenRE matches the spaces and comments before a token, and the token.
var tokenRE = regexp.MustCompile(`^(?:[ \t]+|#[^\r\n]*)*(\r?\n|\[\[annotations\]\]|[\[\],=]|"(?:[^"\\\r\n]|\\.)*"|'[^'\r\n]*'|[A-Za-z0-9_+-]+|$)`)

var (
	bareKey = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)
	integer = regexp.MustCompile(`^[+-]?[0-9]+$`)
)

func tokenize(src string) ([]token, error) {
	var toks []token
	line := 1
	for rest := src; ; {
		m := tokenRE.FindStringSubmatchIndex(rest)
		if m == nil {
			return nil, fmt.Errorf("line %d: cannot read %.40q (an unterminated string?)", line, strings.SplitN(strings.TrimLeft(rest, " \t"), "\n", 2)[0])
		}
		t := token{text: rest[m[2]:m[3]], line: line}
		toks = append(toks, t)
		if t.text == "" {
			return toks, nil
		}
		if t.newline() {
			line++
		}
		rest = rest[m[1]:]
	}
}

// parser reads tokens; past the end it keeps returning the end.
type parser struct {
	toks []token
	i    int
}

// next returns the next token, the next that is not a line end if skipLines.
func (p *parser) next(skipLines ...bool) token {
	t := p.toks[p.i]
	if p.i < len(p.toks)-1 {
		p.i++
	}
	if t.newline() && len(skipLines) > 0 {
		return p.next(true)
	}
	return t
}

// str returns the string a quoted token holds, or a bare key as it is.
func (p *parser) str(t token) (string, error) {
	switch {
	case strings.HasPrefix(t.text, `"`):
		s, err := strconv.Unquote(t.text)
		if err != nil {
			return "", t.errorf("bad string %s: %v", t.text, err)
		}
		return s, nil
	case strings.HasPrefix(t.text, "'"):
		return t.text[1 : len(t.text)-1], nil
	}
	return t.text, nil
}

// value reads a string, an integer or an array of strings.
func (p *parser) value() (any, error) {
	t := p.next()
	switch {
	case strings.HasPrefix(t.text, `"`), strings.HasPrefix(t.text, "'"):
		return p.str(t)
	case integer.MatchString(t.text):
		return strconv.Atoi(t.text)
	case t.text != "[":
		return nil, t.errorf("want a string, an integer or an array of strings, got %q", t.text)
	}
	list := []string{}
	for {
		t := p.next(true)
		if t.text == "]" {
			return list, nil
		}
		if !strings.HasPrefix(t.text, `"`) && !strings.HasPrefix(t.text, "'") {
			return nil, t.errorf("want a string in the array, got %q", t.text)
		}
		s, err := p.str(t)
		if err != nil {
			return nil, err
		}
		list = append(list, s)
		switch t := p.next(true); t.text {
		case ",":
		case "]":
			return list, nil
		default:
			return nil, t.errorf("want , or ] in the array, got %q", t.text)
		}
	}
}

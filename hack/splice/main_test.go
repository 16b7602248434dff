package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSplice(t *testing.T) {
	doc := "# Title\n\nIntro.\n\n<!-- sim:begin -->\nold\nfigures\n<!-- sim:end -->\n\nAfter.\n"
	got, err := Splice([]byte(doc), "sim", []byte("new table"))
	if err != nil {
		t.Fatal(err)
	}
	want := "# Title\n\nIntro.\n\n<!-- sim:begin -->\nnew table\n<!-- sim:end -->\n\nAfter.\n"
	if string(got) != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
	again, err := Splice(got, "sim", []byte("new table\n"))
	if err != nil || string(again) != want {
		t.Errorf("splicing the same section twice: %v\n%s", err, again)
	}
	empty, err := Splice([]byte("<!-- sim:begin -->\n<!-- sim:end -->\n"), "sim", []byte("x\n"))
	if err != nil || string(empty) != "<!-- sim:begin -->\nx\n<!-- sim:end -->\n" {
		t.Errorf("empty section: %v\n%s", err, empty)
	}
}

func TestSpliceRejects(t *testing.T) {
	for name, tc := range map[string]struct{ doc, want string }{
		"no begin":     {"a\n<!-- sim:end -->\n", "0 <!-- sim:begin --> markers"},
		"no end":       {"<!-- sim:begin -->\na\n", "0 <!-- sim:end --> markers"},
		"two begins":   {"<!-- sim:begin -->\n<!-- sim:begin -->\n<!-- sim:end -->\n", "2 <!-- sim:begin --> markers"},
		"out of order": {"<!-- sim:end -->\n<!-- sim:begin -->\n", "comes before"},
		"on one line":  {"<!-- sim:begin --> <!-- sim:end -->\n", "lines of their own"},
		"other name":   {"<!-- other:begin -->\n<!-- other:end -->\n", "0 <!-- sim:begin --> markers"},
	} {
		if _, err := Splice([]byte(tc.doc), "sim", []byte("x\n")); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error with %q", name, err, tc.want)
		}
	}
}

func TestRunLeavesTheRestOfTheFile(t *testing.T) {
	dir := t.TempDir()
	file, content := filepath.Join(dir, "doc.md"), filepath.Join(dir, "section.md")
	if err := os.WriteFile(file, []byte("keep\n<!-- sim:begin -->\n<!-- sim:end -->\nkeep too\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(content, []byte("| a | b |\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run(file, "sim", content); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if want := "keep\n<!-- sim:begin -->\n| a | b |\n<!-- sim:end -->\nkeep too\n"; string(got) != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
}

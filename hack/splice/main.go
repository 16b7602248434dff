// Command splice replaces the generated part of a document: the lines between
// "<!-- NAME:begin -->" and "<!-- NAME:end -->" become the content of a file. The
// markers stay; everything outside them is left as it is. It fails if the markers are
// missing, repeated or out of order.
//
//	go run ./hack/splice -file docs/measurements/scaling.md -marker sharding-sim -content section.md
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
)

func main() {
	file := flag.String("file", "", "the document to change")
	marker := flag.String("marker", "", "NAME of the markers <!-- NAME:begin --> and <!-- NAME:end -->")
	content := flag.String("content", "", "file holding what goes between the markers")
	flag.Parse()
	if *file == "" || *marker == "" || *content == "" {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(*file, *marker, *content); err != nil {
		fmt.Fprintln(os.Stderr, "splice:", err)
		os.Exit(1)
	}
}

func run(file, marker, content string) error {
	doc, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	section, err := os.ReadFile(content)
	if err != nil {
		return err
	}
	out, err := Splice(doc, marker, section)
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	if bytes.Equal(out, doc) {
		return nil
	}
	info, err := os.Stat(file)
	if err != nil {
		return err
	}
	return os.WriteFile(file, out, info.Mode().Perm())
}

// Splice returns doc with the lines between the markers named marker replaced by
// section, which is ended with a newline if it lacks one.
func Splice(doc []byte, marker string, section []byte) ([]byte, error) {
	begin := []byte("<!-- " + marker + ":begin -->")
	end := []byte("<!-- " + marker + ":end -->")
	if n := bytes.Count(doc, begin); n != 1 {
		return nil, fmt.Errorf("%d %s markers, want 1", n, begin)
	}
	if n := bytes.Count(doc, end); n != 1 {
		return nil, fmt.Errorf("%d %s markers, want 1", n, end)
	}
	b, e := bytes.Index(doc, begin), bytes.Index(doc, end)
	if e < b {
		return nil, fmt.Errorf("%s comes before %s", end, begin)
	}
	// Keep the begin marker's line and the end marker's line whole.
	from := b + len(begin)
	if i := bytes.IndexByte(doc[from:], '\n'); i >= 0 && from+i < e {
		from += i + 1
	} else {
		return nil, fmt.Errorf("%s and %s must be on lines of their own", begin, end)
	}
	to := bytes.LastIndexByte(doc[:e], '\n') + 1
	if len(section) > 0 && section[len(section)-1] != '\n' {
		section = append(section, '\n')
	}
	var out bytes.Buffer
	out.Write(doc[:from])
	out.Write(section)
	out.Write(doc[to:])
	return out.Bytes(), nil
}

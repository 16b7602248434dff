// Command modalign keeps the wrapper modules under hack/tools at the main module's
// versions of every module they share with it, so that a package both compile (client-go,
// the k8s.io API types, gRPC, OpenTelemetry, golang.org/x) is compiled once: Go's build
// cache keys a compiled package by its source and by the compiled form of everything it
// imports, so client-go at two patch versions, or one version over two versions of
// golang.org/x/net, are two compiles (docs/measurements/builds.md).
//
//	modalign          raises each wrapper's shared modules to the main module's versions
//	modalign -check   lists the shared modules a wrapper has older than the main module, and fails if any
//
// Only upgrades are made: a module a wrapper needs newer than the main module stays newer
// (its packages are compiled twice; -v lists them). A module the wrapper replaces (the
// Kubernetes staging modules, which k8s.io/kubernetes replaces with local paths) gets its
// replace line moved to the main module's version.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/mod/semver"
)

func main() {
	check := flag.Bool("check", false, "only report; exit 1 when a wrapper has a shared module older than the main module")
	verbose := flag.Bool("v", false, "also list the shared modules a wrapper has newer than the main module")
	flag.Parse()
	wrappers := flag.Args()
	if len(wrappers) == 0 {
		var err error
		if wrappers, err = wrapperDirs("hack/tools"); err != nil {
			fail(err)
		}
	}
	base, err := buildList(".")
	if err != nil {
		fail(err)
	}
	lagging := false
	for _, dir := range wrappers {
		n, err := align(os.Stdout, base, dir, *check, *verbose)
		if err != nil {
			fail(fmt.Errorf("%s: %w", dir, err))
		}
		lagging = lagging || n > 0
	}
	if *check && lagging {
		fmt.Println("modalign: run `go tool task tidy` (or go run ./hack/modalign) and commit the wrappers' go.mod and go.sum")
		os.Exit(1)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "modalign:", err)
	os.Exit(1)
}

// wrapperDirs lists the folders under root that hold a go.mod.
func wrapperDirs(root string) ([]string, error) {
	mods, err := filepath.Glob(filepath.Join(root, "*", "go.mod"))
	if err != nil {
		return nil, err
	}
	dirs := make([]string, len(mods))
	for i, m := range mods {
		dirs[i] = filepath.Dir(m)
	}
	return dirs, nil
}

// module is a line of `go list -m -json all`.
type module struct {
	Path    string
	Version string
	Main    bool
	Replace *struct{ Path, Version string }
}

// version is the version that is built: the replacement's when the module is replaced by
// another version of itself.
func (m module) version() string {
	if m.Replace != nil && m.Replace.Path == m.Path {
		return m.Replace.Version
	}
	return m.Version
}

// replacedElsewhere tells whether the build takes the module from another path or a folder.
func (m module) replacedElsewhere() bool {
	return m.Replace != nil && (m.Replace.Path != m.Path || m.Replace.Version == "")
}

// buildList is the module graph's build list in dir.
func buildList(dir string) (map[string]module, error) {
	out, err := goCmd(dir, "list", "-m", "-json", "all")
	if err != nil {
		return nil, err
	}
	list := map[string]module{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var m module
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			return list, nil
		} else if err != nil {
			return nil, err
		}
		if !m.Main {
			list[m.Path] = m
		}
	}
}

// change is a shared module whose version differs between a wrapper and the main module.
type change struct {
	m         module
	to        string
	wrapperIs string
}

// differences compares a wrapper's build list with the main module's.
func differences(base, w map[string]module) (older, newer []change) {
	for path, wm := range w {
		bm, ok := base[path]
		if !ok || wm.replacedElsewhere() || bm.replacedElsewhere() {
			continue
		}
		switch c := semver.Compare(bm.version(), wm.version()); {
		case c > 0:
			older = append(older, change{m: wm, to: bm.version(), wrapperIs: wm.version()})
		case c < 0:
			newer = append(newer, change{m: wm, to: bm.version(), wrapperIs: wm.version()})
		}
	}
	byPath := func(a, b change) int { return strings.Compare(a.m.Path, b.m.Path) }
	slices.SortFunc(older, byPath)
	slices.SortFunc(newer, byPath)
	return older, newer
}

// align brings one wrapper up to the main module's versions (or, with check, only reports
// how far behind it is) and returns the number of shared modules it had older. Raising a
// module can raise others, so it repeats until nothing lags.
func align(w io.Writer, base map[string]module, dir string, check, verbose bool) (int, error) {
	first := -1
	for round := 0; round < 5; round++ {
		list, err := buildList(dir)
		if err != nil {
			return 0, err
		}
		older, newer := differences(base, list)
		if first < 0 {
			first = len(older)
			if verbose {
				for _, c := range newer {
					fmt.Fprintf(w, "%s: %s %s is newer than the main module's %s (compiled twice)\n", dir, c.m.Path, c.wrapperIs, c.to)
				}
			}
		}
		if len(older) == 0 {
			if round > 0 {
				fmt.Fprintf(w, "%s: aligned\n", dir)
			}
			return first, nil
		}
		for _, c := range older {
			fmt.Fprintf(w, "%s: %s %s is older than the main module's %s\n", dir, c.m.Path, c.wrapperIs, c.to)
		}
		if check {
			return first, nil
		}
		if err := raise(dir, older); err != nil {
			return first, err
		}
	}
	return first, fmt.Errorf("still not aligned after five rounds")
}

// raise moves the replace lines of replaced modules and `go get`s the rest.
func raise(dir string, older []change) error {
	var get []string
	for _, c := range older {
		if c.m.Replace == nil {
			get = append(get, c.m.Path+"@"+c.to)
			continue
		}
		if _, err := goCmd(dir, "mod", "edit", "-replace="+c.m.Path+"="+c.m.Path+"@"+c.to); err != nil {
			return err
		}
		if err := addSums(dir, c.m.Path, c.to); err != nil {
			return err
		}
	}
	if len(get) == 0 {
		return nil
	}
	_, err := goCmd(dir, append([]string{"get"}, get...)...)
	return err
}

// addSums writes a module's go.sum lines, which neither `go mod edit` nor `go get` writes
// for a replacement (and `go mod tidy` cannot run in a module of tools: it would follow
// the tools' dependencies' tests).
func addSums(dir, path, version string) error {
	out, err := goCmd(dir, "mod", "download", "-json", path+"@"+version)
	if err != nil {
		return err
	}
	var info struct{ Sum, GoModSum string }
	if err := json.Unmarshal(out, &info); err != nil {
		return err
	}
	sumFile := filepath.Join(dir, "go.sum")
	have := map[string]bool{}
	if f, err := os.Open(sumFile); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			have[sc.Text()] = true
		}
		f.Close()
	}
	var add []string
	for _, line := range []string{path + " " + version + " " + info.Sum, path + " " + version + "/go.mod " + info.GoModSum} {
		if !have[line] {
			add = append(add, line+"\n")
		}
	}
	if len(add) == 0 {
		return nil
	}
	f, err := os.OpenFile(sumFile, os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	_, err = f.WriteString(strings.Join(add, ""))
	return errors.Join(err, f.Close())
}

func goCmd(dir string, args ...string) ([]byte, error) {
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return out, nil
}

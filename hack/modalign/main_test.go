package main

import (
	"testing"
)

func TestDifferencesRaiseOnlyWhatTheWrapperHasOlder(t *testing.T) {
	replaced := func(path, version string) module {
		return module{Path: path, Version: "v0.0.0", Replace: &struct{ Path, Version string }{path, version}}
	}
	base := map[string]module{
		"k8s.io/client-go":  {Path: "k8s.io/client-go", Version: "v0.36.6"},
		"k8s.io/api":        {Path: "k8s.io/api", Version: "v0.36.6"},
		"golang.org/x/net":  {Path: "golang.org/x/net", Version: "v0.59.0"},
		"dario.cat/mergo":   {Path: "dario.cat/mergo", Version: "v1.0.1"},
		"example.com/local": {Path: "example.com/local", Version: "v1.0.0", Replace: &struct{ Path, Version string }{"../local", ""}},
		"only.in/main":      {Path: "only.in/main", Version: "v1.0.0"},
	}
	wrapper := map[string]module{
		"k8s.io/client-go":  replaced("k8s.io/client-go", "v0.36.3"), // a staging module k8s.io/kubernetes replaces
		"k8s.io/api":        replaced("k8s.io/api", "v0.36.6"),       // already there
		"golang.org/x/net":  {Path: "golang.org/x/net", Version: "v0.58.0"},
		"dario.cat/mergo":   {Path: "dario.cat/mergo", Version: "v1.0.2"}, // the wrapper needs it newer
		"example.com/local": {Path: "example.com/local", Version: "v0.9.0"},
		"only.in/wrapper":   {Path: "only.in/wrapper", Version: "v1.0.0"},
	}
	older, newer := differences(base, wrapper)
	got := map[string]string{}
	for _, c := range older {
		got[c.m.Path] = c.wrapperIs + " -> " + c.to
	}
	want := map[string]string{
		"k8s.io/client-go": "v0.36.3 -> v0.36.6",
		"golang.org/x/net": "v0.58.0 -> v0.59.0",
	}
	if len(got) != len(want) {
		t.Fatalf("older: got %v, want %v", got, want)
	}
	for p, w := range want {
		if got[p] != w {
			t.Errorf("older %s: got %q, want %q", p, got[p], w)
		}
	}
	if len(newer) != 1 || newer[0].m.Path != "dario.cat/mergo" {
		t.Errorf("newer: got %+v, want only dario.cat/mergo", newer)
	}
	for _, c := range older {
		if (c.m.Replace != nil) != (c.m.Path == "k8s.io/client-go") {
			t.Errorf("%s: replace %v; only the replaced staging module is raised through its replace line", c.m.Path, c.m.Replace)
		}
	}
}

package main

import (
	"bytes"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	cdx "github.com/CycloneDX/cyclonedx-go"
)

// SBOM writes a CycloneDX (JSON) software bill of materials of a Go binary from the build
// information the Go toolchain embeds in it: the main module at the release's version,
// every module linked in with its version and go.sum hash, the Go version and the build
// settings. It reads the binary itself, so it lists exactly what was linked, not what
// go.mod allows. created is the BOM's timestamp (the image's, for reproducible output).
func SBOM(binary, version, platform string, created time.Time) ([]byte, error) {
	info, err := buildinfo.ReadFile(binary)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", binary, err)
	}
	data, err := os.ReadFile(binary)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(data)
	mainRef := purl(info.Main.Path, version)
	bom := cdx.NewBOM()
	bom.SerialNumber = "" // a random serial would change the file, and with it its checksum, on every run
	bom.Metadata = &cdx.Metadata{
		Timestamp: created.UTC().Format(time.RFC3339),
		Tools: &cdx.ToolsChoice{Components: &[]cdx.Component{{
			Type: cdx.ComponentTypeLibrary, Name: "cyclonedx-go", Group: "github.com/CycloneDX",
		}}},
		Component: &cdx.Component{
			BOMRef: mainRef, Type: cdx.ComponentTypeApplication, Name: info.Main.Path, Version: version,
			PackageURL: mainRef,
			Hashes:     &[]cdx.Hash{{Algorithm: cdx.HashAlgoSHA256, Value: hex.EncodeToString(sum[:])}},
			Properties: buildProperties(info, platform),
		},
	}
	var components []cdx.Component
	var refs []string
	for _, d := range info.Deps {
		m := d
		if d.Replace != nil {
			m = d.Replace
		}
		ref := purl(m.Path, m.Version)
		c := cdx.Component{BOMRef: ref, Type: cdx.ComponentTypeLibrary, Name: m.Path, Version: m.Version, PackageURL: ref, Scope: cdx.ScopeRequired}
		if h, ok := goSumHash(m.Sum); ok {
			c.Hashes = &[]cdx.Hash{{Algorithm: cdx.HashAlgoSHA256, Value: h}}
		}
		components = append(components, c)
		refs = append(refs, ref)
	}
	sort.Slice(components, func(i, j int) bool { return components[i].BOMRef < components[j].BOMRef })
	sort.Strings(refs)
	bom.Components = &components
	bom.Dependencies = &[]cdx.Dependency{{Ref: mainRef, Dependencies: &refs}}
	var buf bytes.Buffer
	enc := cdx.NewBOMEncoder(&buf, cdx.BOMFileFormatJSON)
	enc.SetPretty(true)
	if err := enc.Encode(bom); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// purl is a Go module's package URL (pkg:golang/<path>@<version>).
func purl(path, version string) string {
	return "pkg:golang/" + path + "@" + version
}

// goSumHash turns a go.sum hash ("h1:<base64 of SHA-256>") into hex.
func goSumHash(sum string) (string, bool) {
	b64, ok := strings.CutPrefix(sum, "h1:")
	if !ok {
		return "", false
	}
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || len(raw) != sha256.Size {
		return "", false
	}
	return hex.EncodeToString(raw), true
}

func buildProperties(info *buildinfo.BuildInfo, platform string) *[]cdx.Property {
	props := []cdx.Property{{Name: "go:version", Value: info.GoVersion}, {Name: "go:platform", Value: platform}}
	for _, s := range info.Settings {
		if s.Key == "-ldflags" || strings.HasPrefix(s.Key, "vcs") || s.Key == "CGO_ENABLED" || s.Key == "-trimpath" || s.Key == "GOOS" || s.Key == "GOARCH" {
			props = append(props, cdx.Property{Name: "go:build:" + s.Key, Value: s.Value})
		}
	}
	return &props
}

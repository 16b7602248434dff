package chartparts

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
)

// kroVersion is the kro release whose chart the tests package: the one in go.mod.
// kroChartDir checks that go.mod still says so.
const kroVersion = "0.9.4"

// kroChartDir finds kro's chart in the module cache through the go command, once.
var kroChartDir = sync.OnceValues(func() (string, error) {
	out, err := exec.Command("go", "mod", "download", "-json", "github.com/kubernetes-sigs/kro").Output()
	if err != nil {
		return "", fmt.Errorf("go mod download github.com/kubernetes-sigs/kro: %w", err)
	}
	var info struct{ Dir, Version, Error string }
	if err := json.Unmarshal(out, &info); err != nil {
		return "", fmt.Errorf("go mod download github.com/kubernetes-sigs/kro: %w", err)
	}
	if info.Error != "" || info.Dir == "" {
		return "", fmt.Errorf("go mod download github.com/kubernetes-sigs/kro: %s", info.Error)
	}
	if info.Version != "v"+kroVersion {
		return "", fmt.Errorf("go.mod has kro %s, the tests expect v%s: update kroVersion", info.Version, kroVersion)
	}
	return filepath.Join(info.Dir, "helm"), nil
})

// chartVersionLine matches Chart.yaml's version and appVersion lines.
var chartVersionLine = regexp.MustCompile(`(?m)^(version|appVersion): .*$`)

// kroChartArchive returns kro's real chart as a .tar.gz with a top folder kro/, prepared
// as the project's packager does: values.yaml's ${VERSION} and Chart.yaml's version and
// appVersion set to kroVersion. With dirEntries the archive also has entries for the
// folders, as source-controller's artifacts do; without, it is laid out like `helm package`.
func kroChartArchive(t *testing.T, dirEntries bool) []byte {
	t.Helper()
	dir, err := kroChartDir()
	if err != nil {
		t.Fatalf("finding kro's chart in the module cache: %v", err)
	}
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		name := filepath.ToSlash(filepath.Join("kro", rel))
		if d.IsDir() {
			if !dirEntries {
				return nil
			}
			return tw.WriteHeader(&tar.Header{Name: name + "/", Typeflag: tar.TypeDir, Mode: 0o755})
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		data = prepareChartFile(rel, data)
		if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(data))}); err != nil {
			return err
		}
		_, err = tw.Write(data)
		return err
	})
	if err != nil {
		t.Fatalf("archiving kro's chart from %s: %v", dir, err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// prepareChartFile sets the version in the files that carry it, like the packager.
func prepareChartFile(rel string, data []byte) []byte {
	switch rel {
	case "values.yaml":
		return []byte(strings.ReplaceAll(string(data), "${VERSION}", kroVersion))
	case "Chart.yaml":
		return chartVersionLine.ReplaceAll(data, []byte("${1}: "+kroVersion))
	}
	return data
}

// sha256Digest is a Flux artifact digest of data.
func sha256Digest(data []byte) string {
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// TestKroChartArchiveIsPrepared guards the helper: a chart that still said ${VERSION} or
// 0.0.0-dev would make the other tests pass on something the packager never ships.
func TestKroChartArchiveIsPrepared(t *testing.T) {
	archive := kroChartArchive(t, false)
	gz, err := gzip.NewReader(bytes.NewReader(archive))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	seen := map[string]string{}
	for {
		hd, err := tr.Next()
		if err != nil {
			break
		}
		var b bytes.Buffer
		if _, err := b.ReadFrom(tr); err != nil {
			t.Fatal(err)
		}
		seen[hd.Name] = b.String()
	}
	if v := seen["kro/values.yaml"]; !strings.Contains(v, "tag: "+kroVersion) || strings.Contains(v, "${VERSION}") {
		t.Errorf("values.yaml does not carry image tag %s", kroVersion)
	}
	if c := seen["kro/Chart.yaml"]; !strings.Contains(c, "\nversion: "+kroVersion) || !strings.Contains(c, "\nappVersion: "+kroVersion) {
		t.Errorf("Chart.yaml does not carry version %s:\n%s", kroVersion, c)
	}
}

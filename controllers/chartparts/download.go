// Package chartparts takes from a Helm chart what the chart would have put on a cluster
// besides its workload: the CRDs and the cluster-wide RBAC.
//
// When kro's controller runs on a shared workload cluster and reconciles a tenant's
// ControlPlane through a kubeconfig, Flux installs the chart on the workload cluster, so
// the ControlPlane gets neither kro's CRDs nor kro's ClusterRoles. The provider installs
// those itself, taken from the very artifact Flux installs, so they always match the
// version of kro that runs. Download fetches that artifact from source-controller, Render
// turns it into typed objects, and Cache shares the result among the tenants that run the
// same chart with the same values.
package chartparts

import (
	"context"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"net/http"
	"strings"
)

// MaxArtifactSize bounds what Download reads. kro's chart is well below 1 MiB; the bound
// keeps a wrong URL (or a wrong layer) from filling the provider's memory.
const MaxArtifactSize = 20 << 20

// maxErrorBody bounds how much of a failed response's body an error quotes.
const maxErrorBody = 512

// digestAlgorithms are the algorithms of Flux artifact digests ("<algorithm>:<hex>") that
// Download can verify. source-controller uses sha256 unless it is told otherwise.
var digestAlgorithms = map[string]func() hash.Hash{
	"sha256": sha256.New,
	"sha384": sha512.New384,
	"sha512": sha512.New,
}

// Download fetches a Flux artifact (an OCIRepository's status.artifact.url) and checks it
// against the artifact's digest (status.artifact.digest, e.g. "sha256:<hex>"), so that
// what the provider installs is exactly what Flux installs. A nil client means
// http.DefaultClient. It reads at most MaxArtifactSize bytes.
func Download(ctx context.Context, c *http.Client, url, digest string) ([]byte, error) {
	algorithm, want, err := parseDigest(digest)
	if err != nil {
		return nil, err
	}
	data, err := fetch(ctx, c, url)
	if err != nil {
		return nil, err
	}
	h := digestAlgorithms[algorithm]()
	h.Write(data)
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		return nil, fmt.Errorf("the chart artifact at %s has digest %s:%s, expected %s:%s (source-controller may have replaced the artifact since its status was read)",
			url, algorithm, got, algorithm, want)
	}
	return data, nil
}

// parseDigest splits a digest into its algorithm and its lower-case hex value, and
// refuses one that Download could not verify: an unverified artifact would defeat its
// purpose.
func parseDigest(digest string) (algorithm, value string, err error) {
	algorithm, value, ok := strings.Cut(digest, ":")
	if !ok || algorithm == "" || value == "" {
		return "", "", fmt.Errorf("artifact digest %q is not of the form <algorithm>:<hex>", digest)
	}
	newHash, known := digestAlgorithms[algorithm]
	if !known {
		return "", "", fmt.Errorf("artifact digest %q uses algorithm %q; supported are sha256, sha384 and sha512", digest, algorithm)
	}
	value = strings.ToLower(value)
	raw, err := hex.DecodeString(value)
	if err != nil || len(raw) != newHash().Size() {
		return "", "", fmt.Errorf("artifact digest %q does not hold a %s value", digest, algorithm)
	}
	return algorithm, value, nil
}

// fetch GETs url and returns its body, failing on any status but 200 and on a body larger
// than MaxArtifactSize.
func fetch(ctx context.Context, c *http.Client, url string) ([]byte, error) {
	if c == nil {
		c = http.DefaultClient
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("building the request for the chart artifact %s: %w", url, err)
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("downloading the chart artifact %s: %w", url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("downloading the chart artifact %s: the server answered %s%s", url, resp.Status, bodySnippet(resp.Body))
	}
	if resp.ContentLength > MaxArtifactSize {
		return nil, fmt.Errorf("the chart artifact at %s has %d bytes, more than the %d bytes allowed", url, resp.ContentLength, MaxArtifactSize)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, MaxArtifactSize+1))
	if err != nil {
		return nil, fmt.Errorf("reading the chart artifact %s: %w", url, err)
	}
	if len(data) > MaxArtifactSize {
		return nil, fmt.Errorf("the chart artifact at %s has more than the %d bytes allowed", url, MaxArtifactSize)
	}
	return data, nil
}

// bodySnippet returns the start of a failed response's body, prefixed with ": ", or ""
// when it has none. source-controller says there why it failed (e.g. "404 page not found").
func bodySnippet(body io.Reader) string {
	data, _ := io.ReadAll(io.LimitReader(body, maxErrorBody))
	text := strings.TrimSpace(string(data))
	if text == "" {
		return ""
	}
	return ": " + text
}

package chartparts

import (
	"bytes"
	"context"
	"crypto/sha512"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
)

// artifactServer serves body at /artifact.tar.gz, counting requests; any other path is a
// 404 like source-controller's for an artifact it no longer has.
func artifactServer(t *testing.T, body []byte) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		if r.URL.Path != "/artifact.tar.gz" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write(body)
	}))
	t.Cleanup(srv.Close)
	return srv, &requests
}

func TestDownloadChecksTheDigest(t *testing.T) {
	body := []byte("the artifact")
	srv, _ := artifactServer(t, body)
	url := srv.URL + "/artifact.tar.gz"

	got, err := Download(context.Background(), srv.Client(), url, sha256Digest(body))
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("Download = %q, %v; want the body", got, err)
	}
	sum512 := sha512.Sum512(body)
	if _, err := Download(context.Background(), nil, url, "sha512:"+strings.ToUpper(hex.EncodeToString(sum512[:]))); err != nil {
		t.Errorf("sha512 digest: %v", err)
	}

	other := sha256Digest([]byte("another artifact"))
	_, err = Download(context.Background(), srv.Client(), url, other)
	if err == nil {
		t.Fatal("Download accepted a wrong digest")
	}
	for _, w := range []string{"expected " + other, "has digest " + sha256Digest(body)} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not contain %q", err, w)
		}
	}
}

func TestDownloadRefusesBadDigestsWithoutRequesting(t *testing.T) {
	srv, requests := artifactServer(t, []byte("x"))
	for _, digest := range []string{"", "abc", "md5:00", "sha256:zz", "sha256:abcd"} {
		if _, err := Download(context.Background(), srv.Client(), srv.URL+"/artifact.tar.gz", digest); err == nil {
			t.Errorf("digest %q was accepted", digest)
		}
	}
	if n := requests.Load(); n != 0 {
		t.Errorf("%d requests for unverifiable digests", n)
	}
}

func TestDownloadNotFound(t *testing.T) {
	srv, _ := artifactServer(t, []byte("x"))
	_, err := Download(context.Background(), srv.Client(), srv.URL+"/gone.tar.gz", sha256Digest([]byte("x")))
	if err == nil || !strings.Contains(err.Error(), "404 Not Found: 404 page not found") {
		t.Errorf("error %v, want one naming the 404 and the body", err)
	}
}

func TestDownloadRefusesOversizedArtifacts(t *testing.T) {
	big := bytes.Repeat([]byte{'a'}, MaxArtifactSize+1)
	for _, tc := range []struct {
		name          string
		contentLength bool
		want          string
	}{
		{"declared", true, strconv.Itoa(MaxArtifactSize+1) + " bytes, more than the"},
		{"streamed", false, "has more than the " + strconv.Itoa(MaxArtifactSize) + " bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				if tc.contentLength {
					w.Header().Set("Content-Length", strconv.Itoa(len(big)))
					_, _ = w.Write(big)
					return
				}
				// Flushing first makes the response chunked, without a length.
				w.(http.Flusher).Flush()
				_, _ = w.Write(big)
			}))
			defer srv.Close()
			_, err := Download(context.Background(), srv.Client(), srv.URL, sha256Digest(big))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestDownloadAcceptsTheLargestArtifact(t *testing.T) {
	body := bytes.Repeat([]byte{'a'}, MaxArtifactSize)
	srv, _ := artifactServer(t, body)
	if _, err := Download(context.Background(), srv.Client(), srv.URL+"/artifact.tar.gz", sha256Digest(body)); err != nil {
		t.Errorf("an artifact of exactly MaxArtifactSize bytes: %v", err)
	}
}

package chartparts

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var aggregation = map[string]any{"rbac": map[string]any{"mode": "aggregation"}}

func TestCacheDownloadsAndRendersOncePerKey(t *testing.T) {
	archive := kroChartArchive(t, true)
	srv, requests := artifactServer(t, archive)
	url, digest := srv.URL+"/artifact.tar.gz", sha256Digest(archive)
	var c Cache
	ctx := context.Background()

	first, err := c.Get(ctx, srv.Client(), url, digest, testOptions(nil))
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	// Each Get's result is the caller's: changing it (as applying it does) must not reach
	// the next caller, whether the result came from the download or from the cache.
	previous := first
	for i := range 2 {
		previous.ClusterRoles[0].Name = "changed by the caller"
		next, err := c.Get(ctx, srv.Client(), url, digest, testOptions(nil))
		if err != nil {
			t.Fatalf("Get: %v", err)
		}
		if got := roleNames(next); !slices.Equal(got, []string{"kro-cluster-role", "kro-edit", "kro-view"}) {
			t.Errorf("Get %d returned roles %v: a caller's change leaked into the cache", i+2, got)
		}
		previous = next
	}
	if n := requests.Load(); n != 1 {
		t.Errorf("%d requests for three Gets of one key, want 1", n)
	}

	agg, err := c.Get(ctx, srv.Client(), url, digest, testOptions(aggregation))
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	if n := requests.Load(); n != 2 {
		t.Errorf("%d requests after a Get with other values, want 2", n)
	}
	if got := bindingNames(agg); !slices.Equal(got, []string{"kro:controller"}) {
		t.Errorf("Get with aggregation values returned bindings %v", got)
	}
}

// TestCacheSharesADownloadUnderWay holds the artifact's response until every Get has
// joined the download, so that only a shared download (not the cache) can answer them
// all with one request.
func TestCacheSharesADownloadUnderWay(t *testing.T) {
	archive := kroChartArchive(t, false)
	srv, requests, release := heldArtifactServer(t, archive)
	var c Cache
	const callers = 5
	errs := make(chan error, callers)
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			_, err := c.Get(context.Background(), srv.Client(), srv.URL, sha256Digest(archive), testOptions(nil))
			errs <- err
		})
	}
	waitFor(t, func() bool { return c.joined() == callers-1 })
	release()
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("Get: %v", err)
		}
	}
	if n := requests.Load(); n != 1 {
		t.Errorf("%d requests for %d concurrent Gets, want 1", n, callers)
	}
}

func TestCacheDoesNotKeepErrors(t *testing.T) {
	archive := kroChartArchive(t, false)
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if requests.Add(1) == 1 {
			http.Error(w, "not yet", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write(archive)
	}))
	defer srv.Close()
	var c Cache
	if _, err := c.Get(context.Background(), srv.Client(), srv.URL, sha256Digest(archive), testOptions(nil)); err == nil {
		t.Fatal("first Get succeeded against a 503")
	}
	if _, err := c.Get(context.Background(), srv.Client(), srv.URL, sha256Digest(archive), testOptions(nil)); err != nil {
		t.Fatalf("second Get: %v", err)
	}
	if n := requests.Load(); n != 2 {
		t.Errorf("%d requests, want 2", n)
	}
}

// TestCacheWaiterLeavesOnItsContext: a Get whose context ends returns, while the download
// goes on and fills the cache for the next Get.
func TestCacheWaiterLeavesOnItsContext(t *testing.T) {
	archive := kroChartArchive(t, false)
	srv, requests, release := heldArtifactServer(t, archive)
	var c Cache
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		_, err := c.Get(ctx, srv.Client(), srv.URL, sha256Digest(archive), testOptions(nil))
		done <- err
	}()
	waitFor(t, func() bool { return requests.Load() == 1 })
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled Get returned %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a Get whose context ended did not return")
	}
	release()
	waitFor(t, func() bool { return c.cached() == 1 })
	if _, err := c.Get(context.Background(), srv.Client(), srv.URL, sha256Digest(archive), testOptions(nil)); err != nil {
		t.Fatalf("Get: %v", err)
	}
	if n := requests.Load(); n != 1 {
		t.Errorf("%d requests, want 1", n)
	}
}

func TestCacheKeepsTheMostRecentlyUsed(t *testing.T) {
	archive := kroChartArchive(t, false)
	srv, requests := artifactServer(t, archive)
	url, digest := srv.URL+"/artifact.tar.gz", sha256Digest(archive)
	var c Cache
	get := func(i int) {
		t.Helper()
		opts := testOptions(map[string]any{"additionalLabels": map[string]any{"n": strconv.Itoa(i)}})
		if _, err := c.Get(context.Background(), srv.Client(), url, digest, opts); err != nil {
			t.Fatalf("Get %d: %v", i, err)
		}
	}
	for i := range cacheEntries {
		get(i)
	}
	get(0) // 0 becomes the most recently used, 1 the least
	get(cacheEntries)
	if n, want := requests.Load(), int32(cacheEntries+1); n != want {
		t.Fatalf("%d requests, want %d", n, want)
	}
	get(0)
	if n, want := requests.Load(), int32(cacheEntries+1); n != want {
		t.Errorf("the recently used entry was dropped: %d requests, want %d", n, want)
	}
	get(1)
	if n, want := requests.Load(), int32(cacheEntries+2); n != want {
		t.Errorf("the least recently used entry was kept: %d requests, want %d", n, want)
	}
	if n := c.cached(); n != cacheEntries {
		t.Errorf("the cache holds %d entries, want %d", n, cacheEntries)
	}
}

func TestCacheKeyCoversTheOptions(t *testing.T) {
	base := testOptions(map[string]any{"a": 1})
	variants := []Options{base}
	for _, change := range []func(*Options){
		func(o *Options) { o.ReleaseName = "other" },
		func(o *Options) { o.Namespace = "other" },
		func(o *Options) { o.ServiceAccount.Name = "other" },
		func(o *Options) { o.ServiceAccount.Namespace = "other" },
		func(o *Options) { o.Values = map[string]any{"a": 2} },
	} {
		o := base
		change(&o)
		variants = append(variants, o)
	}
	seen := map[string]int{}
	for i, o := range variants {
		key, err := cacheKey("sha256:00", o)
		if err != nil {
			t.Fatal(err)
		}
		if j, dup := seen[key]; dup {
			t.Errorf("options %d and %d share a key", j, i)
		}
		seen[key] = i
	}
	k1, _ := cacheKey("sha256:00", base)
	k2, _ := cacheKey("sha256:11", base)
	if k1 == k2 {
		t.Error("two digests share a key")
	}
}

// heldArtifactServer serves body once release is called, counting requests. It releases
// the requests when the test ends, too, so a failing test does not hang in srv.Close.
func heldArtifactServer(t *testing.T, body []byte) (*httptest.Server, *atomic.Int32, func()) {
	t.Helper()
	var requests atomic.Int32
	held := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		requests.Add(1)
		<-held
		_, _ = w.Write(body)
	}))
	release := sync.OnceFunc(func() { close(held) })
	t.Cleanup(srv.Close)
	t.Cleanup(release) // cleanups run last first: release, then Close
	return srv, &requests, release
}

// joined is how many Gets wait for a download that another Get started.
func (c *Cache) joined() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, call := range c.inflight {
		n += call.joined
	}
	return n
}

// cached is how many rendered charts c holds.
func (c *Cache) cached() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lru == nil {
		return 0
	}
	return c.lru.Len()
}

// waitFor polls cond for up to ten seconds.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

package chartparts

import (
	"container/list"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// cacheEntries bounds how many rendered charts a Cache keeps. Tenants share a handful of
// chart versions and value sets; the bound only matters when values differ per tenant.
const cacheEntries = 32

// sharedFetchTimeout bounds one download and render. It runs on behalf of every caller
// waiting for it, so it does not end when the first caller's context does.
const sharedFetchTimeout = 2 * time.Minute

// Cache downloads and renders each chart artifact once per set of Options, so that many
// tenants on the same chart version and values share one download and one render. It
// keeps the cacheEntries most recently used results and does not keep errors. Concurrent
// Gets for the same key share one download. The zero Cache is ready to use; it must not
// be copied after first use.
type Cache struct {
	mu sync.Mutex
	// lru holds *cacheEntry, the most recently used at the front.
	lru *list.List
	// entries finds the element of lru by key.
	entries map[string]*list.Element
	// inflight holds the downloads under way by key.
	inflight map[string]*fetchCall
}

// cacheEntry is one rendered chart in the Cache.
type cacheEntry struct {
	key   string
	parts *Parts
}

// fetchCall is a download and render under way; done is closed when parts or err is set.
type fetchCall struct {
	done  chan struct{}
	parts *Parts
	err   error
	// joined counts the Gets that wait for this call besides the one that started it;
	// tests read it to know that concurrent callers shared the call.
	joined int
}

// Get returns the Parts of the artifact at url with that digest rendered with opts: from
// the cache when it has them, else by Download and Render. The result is the caller's own
// copy. Get returns when ctx ends even while the download goes on for other callers (and
// for the cache).
func (c *Cache) Get(ctx context.Context, hc *http.Client, url, digest string, opts Options) (*Parts, error) {
	key, err := cacheKey(digest, opts)
	if err != nil {
		return nil, err
	}
	parts, call := c.lookup(ctx, key, func(ctx context.Context) (*Parts, error) {
		archive, err := Download(ctx, hc, url, digest)
		if err != nil {
			return nil, err
		}
		return Render(archive, opts)
	})
	if parts != nil {
		return parts.DeepCopy(), nil
	}
	select {
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for the chart artifact %s: %w", url, context.Cause(ctx))
	case <-call.done:
	}
	if call.err != nil {
		return nil, call.err
	}
	return call.parts.DeepCopy(), nil
}

// lookup returns the cached Parts of key, or else the call that produces them: the one
// under way, or a new one that runs fetch.
func (c *Cache) lookup(ctx context.Context, key string, fetch func(context.Context) (*Parts, error)) (*Parts, *fetchCall) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lru == nil {
		c.lru = list.New()
		c.entries = map[string]*list.Element{}
		c.inflight = map[string]*fetchCall{}
	}
	if el, ok := c.entries[key]; ok {
		c.lru.MoveToFront(el)
		return el.Value.(*cacheEntry).parts, nil
	}
	if call, ok := c.inflight[key]; ok {
		call.joined++
		return nil, call
	}
	call := &fetchCall{done: make(chan struct{})}
	c.inflight[key] = call
	go c.run(context.WithoutCancel(ctx), key, call, fetch)
	return nil, call
}

// run runs fetch for call, keeps its result when it succeeded and wakes the waiters. Its
// context keeps the first caller's values but not its end: others may be waiting.
func (c *Cache) run(ctx context.Context, key string, call *fetchCall, fetch func(context.Context) (*Parts, error)) {
	ctx, cancel := context.WithTimeout(ctx, sharedFetchTimeout)
	defer cancel()
	call.parts, call.err = fetch(ctx)

	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.inflight, key)
	if call.err == nil {
		c.add(key, call.parts)
	}
	close(call.done)
}

// add keeps parts under key and drops the least recently used entries beyond
// cacheEntries. c.mu must be held.
func (c *Cache) add(key string, parts *Parts) {
	c.entries[key] = c.lru.PushFront(&cacheEntry{key: key, parts: parts})
	for c.lru.Len() > cacheEntries {
		oldest := c.lru.Back()
		c.lru.Remove(oldest)
		delete(c.entries, oldest.Value.(*cacheEntry).key)
	}
}

// cacheKey identifies a rendered chart: the artifact's digest (the same content whatever
// its URL) and a hash of everything in opts that changes the result.
func cacheKey(digest string, opts Options) (string, error) {
	data, err := json.Marshal(struct {
		ReleaseName, Namespace string
		ServiceAccount         string
		Values                 map[string]any
	}{opts.ReleaseName, opts.Namespace, opts.ServiceAccount.String(), opts.Values})
	if err != nil {
		return "", fmt.Errorf("hashing the chart render options: %w", err)
	}
	sum := sha256.Sum256(data)
	return digest + "/" + hex.EncodeToString(sum[:]), nil
}

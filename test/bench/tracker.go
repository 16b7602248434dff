package bench

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// tracker remembers when the harness first saw each event of interest.
type tracker struct {
	mu       sync.Mutex
	first    map[string]time.Time
	adds     map[string][]time.Time
	counting atomic.Bool
	changes  atomic.Int64
	byKind   map[string]int
	// notReady lists, while counting, the distinct reasons and messages of Kros seen not Ready.
	notReady map[string]int
}

func newTracker() *tracker {
	return &tracker{first: map[string]time.Time{}, adds: map[string][]time.Time{}, byKind: map[string]int{}, notReady: map[string]int{}}
}

func (t *tracker) mark(key string, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.first[key]; !ok {
		t.first[key] = at
	}
}

func (t *tracker) added(key string, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.adds[key] = append(t.adds[key], at)
}

func (t *tracker) changed(kind string) {
	if t.counting.Load() {
		t.changes.Add(1)
		t.mu.Lock()
		t.byKind[kind]++
		t.mu.Unlock()
	}
}

func (t *tracker) sawNotReady(what string) {
	if t.counting.Load() {
		t.mu.Lock()
		t.notReady[what]++
		t.mu.Unlock()
	}
}

// startCounting counts object changes from now on; stopCounting returns how many, by
// kind, and the distinct not-Ready states of Kros seen meanwhile.
func (t *tracker) startCounting() {
	t.mu.Lock()
	t.byKind, t.notReady = map[string]int{}, map[string]int{}
	t.mu.Unlock()
	t.changes.Store(0)
	t.counting.Store(true)
}

func (t *tracker) stopCounting() (int, map[string]int, map[string]int) {
	t.counting.Store(false)
	t.mu.Lock()
	defer t.mu.Unlock()
	return int(t.changes.Load()), t.byKind, t.notReady
}

// wait returns the times of keys once all were seen.
func (t *tracker) wait(ctx context.Context, keys []string, what string) (map[string]time.Time, error) {
	deadline := time.Now().Add(waitTimeout)
	for {
		t.mu.Lock()
		out := map[string]time.Time{}
		var missing []string
		for _, k := range keys {
			if at, ok := t.first[k]; ok {
				out[k] = at
			} else {
				missing = append(missing, k)
			}
		}
		t.mu.Unlock()
		if len(missing) == 0 {
			return out, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("waiting for %s: %d of %d not seen, e.g. %s", what, len(missing), len(keys), missing[0])
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// waitAddedAfter returns when key was next added after after.
func (t *tracker) waitAddedAfter(ctx context.Context, key string, after time.Time) (time.Time, error) {
	deadline := time.Now().Add(waitTimeout)
	for {
		t.mu.Lock()
		for _, at := range t.adds[key] {
			if at.After(after) {
				t.mu.Unlock()
				return at, nil
			}
		}
		t.mu.Unlock()
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("waiting for %s to be created again", key)
		}
		select {
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func fingerprint(data map[string][]byte) string {
	keys := slices.Sorted(maps.Keys(data))
	sum := sha256.New()
	for _, k := range keys {
		sum.Write([]byte(k))
		sum.Write([]byte{0})
		sum.Write(data[k])
		sum.Write([]byte{0})
	}
	return hex.EncodeToString(sum.Sum(nil))[:12]
}

package controlplane

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"k8s.io/client-go/rest"
)

// liveness is what a ControlPlane's own traffic tells about it, so that the provider
// probes only a ControlPlane that has gone quiet:
//   - when its API server last answered one of the cluster's requests; each event and
//     each bookmark on its watches counts as an answer;
//   - whether a request has just failed in a way that a probe should look at at once: a
//     connection that cannot be made or breaks, credentials refused (401, 403), a server
//     error (5xx).
//
// The probe itself does not go through it: its own failures must not call for another.
type liveness struct {
	last    atomic.Int64  // Unix nanoseconds of the last answer
	trouble chan struct{} // a failure since the loop last looked; never blocks
}

func newLiveness() *liveness {
	l := &liveness{trouble: make(chan struct{}, 1)}
	l.answered()
	return l
}

func (l *liveness) answered() { l.last.Store(time.Now().UnixNano()) }

func (l *liveness) failed() {
	select {
	case l.trouble <- struct{}{}:
	default:
	}
}

// quiet is how long the ControlPlane has not answered.
func (l *liveness) quiet() time.Duration { return time.Since(time.Unix(0, l.last.Load())) }

// watch returns a copy of cfg whose requests report to l.
func (l *liveness) watch(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.Wrap(func(rt http.RoundTripper) http.RoundTripper { return &livenessTransport{next: rt, l: l} })
	return c
}

type livenessTransport struct {
	next http.RoundTripper
	l    *liveness
}

func (t *livenessTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	switch {
	case err != nil:
		if req.Context().Err() == nil { // not the cache stopping
			t.l.failed()
		}
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden || resp.StatusCode >= 500:
		t.l.failed()
	default:
		t.l.answered()
		resp.Body = &livenessBody{ReadCloser: resp.Body, l: t.l, ctx: req.Context()}
	}
	return resp, err
}

// livenessBody counts what arrives on a response, a watch's events and bookmarks
// included, as answers, and a stream that breaks as a failure.
type livenessBody struct {
	io.ReadCloser
	l      *liveness
	ctx    context.Context
	closed atomic.Bool // closed by the reader: what a read returns then is no failure
}

func (b *livenessBody) Close() error {
	b.closed.Store(true)
	return b.ReadCloser.Close()
}

func (b *livenessBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.l.answered()
	}
	if err != nil && !errors.Is(err, io.EOF) && b.ctx.Err() == nil && !b.closed.Load() {
		b.l.failed()
	}
	return n, err
}

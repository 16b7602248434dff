package controlplane

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

// TestLivenessTransport: what a ControlPlane's own requests tell the provider, on a real
// HTTP server: answers and each read of a stream count as proof of life; refused
// credentials, server errors, failed connections and broken streams call for a probe;
// a request that its caller cancelled, or a body its reader closed, do not.
func TestLivenessTransport(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(answer))
	defer srv.Close()

	l := newLiveness()
	cl := &http.Client{Transport: l.watch(&rest.Config{Host: srv.URL}).WrapTransport(http.DefaultTransport)}
	failed := func() bool {
		select {
		case <-l.trouble:
			return true
		default:
			return false
		}
	}
	get := func(ctx context.Context, path string) *http.Response {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+path, nil)
		resp, _ := cl.Do(req)
		return resp
	}
	read := func(path string) {
		if resp := get(context.Background(), path); resp != nil {
			_, _ = io.ReadAll(resp.Body)
			_ = resp.Body.Close()
		}
	}

	l.last.Store(0)
	read("/ok")
	if l.quiet() > time.Second || failed() {
		t.Errorf("an answer: quiet %s, failed %v; want proof of life", l.quiet(), failed())
	}
	l.last.Store(0)
	read("/404")
	if l.quiet() > time.Second || failed() {
		t.Errorf("a 404 is an answer: quiet %s", l.quiet())
	}
	for _, path := range []string{"/401", "/403", "/503"} {
		l.last.Store(0)
		read(path)
		if !failed() || l.quiet() < time.Hour {
			t.Errorf("%s: want a failure and no proof of life", path)
		}
	}

	// A stream: its first event is proof of life, its breaking a failure.
	resp := get(context.Background(), "/stream")
	l.last.Store(0)
	_, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err == nil || l.quiet() > time.Second || !failed() {
		t.Errorf("a broken stream: err %v, quiet %s; want its event as proof of life and then a failure", err, l.quiet())
	}

	// Closed by its reader, or cancelled by its caller: no failure.
	resp = get(context.Background(), "/slow")
	_ = resp.Body.Close()
	_, _ = resp.Body.Read(make([]byte, 8))
	ctx, cancel := context.WithCancel(context.Background())
	resp = get(ctx, "/slow")
	cancel()
	_, _ = io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if failed() {
		t.Error("a body closed by its reader, or a request cancelled by its caller, called for a probe")
	}

	// No server at all.
	srv.Close()
	read("/ok")
	if !failed() {
		t.Error("a refused connection did not call for a probe")
	}
}

// answer plays an API server for TestLivenessTransport, by path.
func answer(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/401":
		w.WriteHeader(http.StatusUnauthorized)
	case "/403":
		w.WriteHeader(http.StatusForbidden)
	case "/503":
		w.WriteHeader(http.StatusServiceUnavailable)
	case "/404":
		w.WriteHeader(http.StatusNotFound)
	case "/stream": // a watch: a first event, then the connection breaks
		w.Header().Set("Content-Length", "1000")
		_, _ = w.Write([]byte(`{"type":"BOOKMARK"}`))
		w.(http.Flusher).Flush()
		time.Sleep(50 * time.Millisecond)
		panic(http.ErrAbortHandler)
	case "/slow":
		_, _ = w.Write([]byte("a"))
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	default:
		_, _ = w.Write([]byte("ok"))
	}
}

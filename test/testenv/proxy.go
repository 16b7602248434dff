package testenv

import (
	"fmt"
	"io"
	"net"
	"net/url"
	"sync"

	"k8s.io/client-go/rest"
)

// Proxy forwards TCP connections to an API server, and can play two network failures
// between one client and the server until Heal: Cut closes every open connection and
// refuses new ones (the client learns at once); Stall drops what is sent either way and
// keeps the connections open (the client learns only by waiting).
type Proxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	cut     bool
	stalled bool
	conns   map[net.Conn]struct{}
}

// StartProxy starts a proxy to the API server of cfg, on a free local port.
func StartProxy(cfg *rest.Config) (*Proxy, error) {
	u, err := url.Parse(cfg.Host)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: u.Host, conns: map[net.Conn]struct{}{}}
	go p.serve()
	return p, nil
}

// Config returns a copy of cfg that reaches the server through the proxy. The server's
// certificate stays valid: the proxy listens on 127.0.0.1 too.
func (p *Proxy) Config(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.Host = fmt.Sprintf("https://%s", p.ln.Addr())
	return c
}

// Cut closes every connection through the proxy and refuses new ones.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		_ = c.Close()
	}
}

// Stall drops every byte sent through the proxy, on open connections and new ones.
func (p *Proxy) Stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stalled = true
}

// Heal lets connections through again.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut, p.stalled = false, false
}

// Close stops the proxy.
func (p *Proxy) Close() error {
	p.Cut()
	return p.ln.Close()
}

func (p *Proxy) serve() {
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.forward(in)
	}
}

func (p *Proxy) forward(in net.Conn) {
	out, err := net.Dial("tcp", p.target)
	if err != nil {
		_ = in.Close()
		return
	}
	if !p.track(in, out) {
		_, _ = in.Close(), out.Close()
		return
	}
	done := make(chan struct{}, 2)
	go func() { p.pipe(out, in); done <- struct{}{} }()
	go func() { p.pipe(in, out); done <- struct{}{} }()
	<-done
	_, _ = in.Close(), out.Close()
	p.mu.Lock()
	delete(p.conns, in)
	delete(p.conns, out)
	p.mu.Unlock()
}

// pipe copies from src to dst until either ends, dropping what arrives while stalled.
func (p *Proxy) pipe(dst io.Writer, src io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		p.mu.Lock()
		stalled := p.stalled
		p.mu.Unlock()
		if n > 0 && !stalled {
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *Proxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

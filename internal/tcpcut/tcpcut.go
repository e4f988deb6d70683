// Package tcpcut is a TCP proxy for tests that cut the network between
// two real processes: Cut closes every connection through it and refuses
// new ones until Heal; Freeze holds every byte (and every close) of the
// connections through it, as a peer whose machine vanished leaves them.
package tcpcut

import (
	"net"
	"sync"
	"testing"
)

// Proxy forwards the TCP connections made to it to a target.
type Proxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	cut   bool
	conns []net.Conn
	// thaw is open while the proxy is frozen (nil: not frozen).
	thaw chan struct{}
}

// New starts a proxy on a loopback port to target (host:port); it stops
// (every connection closed) when the test ends.
func New(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{ln: ln, target: target}
	var wg sync.WaitGroup
	wg.Go(p.serve)
	t.Cleanup(func() { _ = ln.Close(); p.Cut(); wg.Wait() })
	return p
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// URL is the proxy's address as an http:// base URL.
func (p *Proxy) URL() string { return "http://" + p.Addr() }

func (p *Proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.cut {
			p.mu.Unlock()
			_ = c.Close()
			continue
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			p.mu.Unlock()
			_ = c.Close()
			continue
		}
		p.conns = append(p.conns, c, up)
		p.mu.Unlock()
		go p.pipe(up, c)
		go p.pipe(c, up)
	}
}

// Cut closes every connection through the proxy and refuses new ones (a
// network gone).
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	p.unfreeze()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}

// Heal lets connections through again.
func (p *Proxy) Heal() {
	p.mu.Lock()
	p.cut = false
	p.mu.Unlock()
}

// pipe copies src to dst, holding each chunk (and the close) while the
// proxy is frozen.
func (p *Proxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if !p.held() {
			break // cut while held: the held bytes are lost
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	_ = dst.Close()
}

// held waits while the proxy is frozen; false when it was cut.
func (p *Proxy) held() bool {
	p.mu.Lock()
	thaw := p.thaw
	p.mu.Unlock()
	if thaw != nil {
		<-thaw
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.cut
}

// Freeze holds every byte through the proxy's connections, both ways, and
// their closes, until Cut (or Thaw): the peers see a connection that is
// open and silent, as after the other machine lost power.
func (p *Proxy) Freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.thaw == nil {
		p.thaw = make(chan struct{})
	}
}

// Thaw lets the held bytes through again.
func (p *Proxy) Thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.unfreeze()
}

func (p *Proxy) unfreeze() {
	if p.thaw != nil {
		close(p.thaw)
		p.thaw = nil
	}
}

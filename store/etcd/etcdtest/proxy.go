package etcdtest

import (
	"fmt"
	"io"
	"net"
	"sync"
)

// proxy forwards TCP connections from a stable loopback address to the
// etcd member, and can cut them all at once.
type proxy struct {
	ln net.Listener

	mu     sync.Mutex
	target string // "" while down: new connections are closed at once
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

func newProxy() (*proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("proxy: %w", err)
	}
	p := &proxy{ln: ln, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

// up forwards new connections to target.
func (p *proxy) up(target string) {
	p.mu.Lock()
	p.target = target
	p.mu.Unlock()
}

// down refuses new connections and cuts the open ones.
func (p *proxy) down() {
	p.mu.Lock()
	p.target = ""
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
}

func (p *proxy) close() {
	_ = p.ln.Close()
	p.down()
	p.wg.Wait()
}

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		target := p.target
		p.mu.Unlock()
		if target == "" {
			_ = c.Close()
			continue
		}
		up, err := net.Dial("tcp", target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		if p.target != target { // went down meanwhile
			p.mu.Unlock()
			_ = c.Close()
			_ = up.Close()
			continue
		}
		p.conns[c], p.conns[up] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(c, up)
		go p.pipe(up, c)
	}
}

// pipe copies from src to dst; when either side ends, both are closed.
func (p *proxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	_, _ = io.Copy(dst, src)
	_ = dst.Close()
	_ = src.Close()
	p.mu.Lock()
	delete(p.conns, dst)
	delete(p.conns, src)
	p.mu.Unlock()
}

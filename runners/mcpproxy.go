package runners

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
)

// mcpProxy serves the agent tools on localhost to the runner's agents: it
// forwards each call to the bridge's /mcp with the turn's token, so the
// agent never holds the bridge's token and reaches it only through the
// runner.
type mcpProxy struct {
	r   *Runner
	url string
	srv *http.Server
	mu  sync.Mutex
	tok map[string]*localTurn // local token → turn
}

func newMCPProxy(r *Runner) (*mcpProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("runner: mcp listen: %w", err)
	}
	p := &mcpProxy{r: r, url: "http://" + ln.Addr().String() + "/mcp", tok: map[string]*localTurn{}}
	rp := &httputil.ReverseProxy{Rewrite: p.rewrite}
	p.srv = &http.Server{Handler: p.gate(rp)}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

func (p *mcpProxy) close() { _ = p.srv.Close() }

func (p *mcpProxy) issue(lt *localTurn) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	tok := "rl_" + hex.EncodeToString(b[:])
	p.mu.Lock()
	p.tok[tok] = lt
	p.mu.Unlock()
	return tok
}

func (p *mcpProxy) revoke(tok string) {
	p.mu.Lock()
	delete(p.tok, tok)
	p.mu.Unlock()
}

// gate refuses calls without a live turn's local token.
func (p *mcpProxy) gate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		tok, _ := strings.CutPrefix(req.Header.Get("Authorization"), "Bearer ")
		p.mu.Lock()
		lt := p.tok[tok]
		p.mu.Unlock()
		c := p.r.current()
		switch {
		case lt == nil:
			http.Error(w, `{"error":"unknown or expired token"}`, http.StatusUnauthorized)
			return
		case c == nil:
			http.Error(w, `{"error":"the runner is not connected to the bridge; retry"}`, http.StatusServiceUnavailable)
			return
		}
		req.Header.Set("Authorization", "Bearer "+lt.bridgeToken())
		req.Header.Set("X-Roombridge-Upstream", c.base)
		next.ServeHTTP(w, req)
	})
}

func (p *mcpProxy) rewrite(pr *httputil.ProxyRequest) {
	base, err := url.Parse(pr.In.Header.Get("X-Roombridge-Upstream"))
	if err != nil {
		return
	}
	pr.Out.Header.Del("X-Roombridge-Upstream")
	pr.SetURL(base)
	pr.Out.Header.Set("Authorization", pr.In.Header.Get("Authorization"))
}

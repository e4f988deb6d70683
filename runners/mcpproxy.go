package runners

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
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
	tr  *http.Transport
	mu  sync.Mutex
	tok map[string]*localTurn // local token → turn
}

func newMCPProxy(r *Runner) (*mcpProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("runner: mcp listen: %w", err)
	}
	p := &mcpProxy{r: r, url: "http://" + ln.Addr().String() + "/mcp", tok: map[string]*localTurn{}}
	// The bridge's /mcp is on the same port as its gRPC: an https bridge
	// is trusted as the runner's connection trusts it (runner.ca_file),
	// not by the system roots alone.
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = r.o.TLS.Clone()
	rp := &httputil.ReverseProxy{Rewrite: p.rewrite, Transport: tr, ErrorHandler: p.failed}
	p.srv, p.tr = &http.Server{Handler: p.gate(rp)}, tr
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

func (p *mcpProxy) close() {
	_ = p.srv.Close()
	p.tr.CloseIdleConnections()
}

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
			jsonError(w, http.StatusUnauthorized, "unknown or expired token")
			return
		case c == nil:
			jsonError(w, http.StatusServiceUnavailable, "the runner is not connected to the bridge; retry")
			return
		}
		base, err := url.Parse(c.base)
		if err != nil {
			jsonError(w, http.StatusInternalServerError, "the runner's bridge URL is bad")
			return
		}
		up := upstream{base: base, token: lt.bridgeToken()}
		next.ServeHTTP(w, req.WithContext(context.WithValue(req.Context(), upstreamKey{}, up)))
	})
}

// upstream is where gate sends a call: the bridge the runner is connected
// to, with the turn's token.
type upstream struct {
	base  *url.URL
	token string
}

type upstreamKey struct{}

// rewrite sends the call to the bridge's /mcp with the turn's token in
// place of the agent's local one; every other header (Mcp-Session-Id,
// Mcp-Protocol-Version, Accept) goes as it came.
func (p *mcpProxy) rewrite(pr *httputil.ProxyRequest) {
	up := pr.In.Context().Value(upstreamKey{}).(upstream)
	pr.SetURL(up.base)
	pr.Out.Header.Set("Authorization", "Bearer "+up.token)
}

// failed answers a call the bridge could not be reached for (refused, a
// certificate it does not trust) and logs why: the agent sees a 502 with
// the reason.
func (p *mcpProxy) failed(w http.ResponseWriter, req *http.Request, err error) {
	if req.Context().Err() != nil { // the agent gave up on the call: nobody to answer
		return
	}
	bridge := ""
	if up, ok := req.Context().Value(upstreamKey{}).(upstream); ok {
		bridge = up.base.String()
	}
	p.r.o.Log.Warn("runner: mcp call not forwarded", "url", bridge, "method", req.Method, "error", err)
	jsonError(w, http.StatusBadGateway, "runner: the bridge's /mcp: "+err.Error())
}

// jsonError answers the agent with status and {"error": msg}.
func jsonError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

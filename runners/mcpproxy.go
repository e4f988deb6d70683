package runners

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/roombridge/roombridge/agents"
)

// mcpProxy serves the agent tools on localhost to the runner's agents: it
// forwards each call to the bridge's /mcp with the turn's token, so the
// agent never holds the bridge's token and reaches it only through the
// runner, and sends a call again when a failover cut it (retrier).
type mcpProxy struct {
	r   *Runner
	url string
	srv *http.Server
	tr  *http.Transport
	mu  sync.Mutex
	tok map[string]*localTurn // local token → turn
	// sessions counts the MCP sessions the agent's clients began with a
	// local token (their handshakes, rpcCall.begins): a client that restarts
	// numbers its JSON-RPC ids from the start again, and the session
	// tells its calls apart from the last one's (callKey).
	sessions map[string]int
}

func newMCPProxy(r *Runner) (*mcpProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("runner: mcp listen: %w", err)
	}
	p := &mcpProxy{r: r, url: "http://" + ln.Addr().String() + "/mcp", tok: map[string]*localTurn{}, sessions: map[string]int{}}
	// The bridge's /mcp is on the same port as its gRPC: an https bridge
	// is trusted as the runner's connection trusts it (runner.ca_file),
	// not by the system roots alone.
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = r.o.TLS.Clone()
	rp := &httputil.ReverseProxy{Rewrite: p.rewrite, Transport: retrier{p: p, next: tr}, ErrorHandler: p.failed}
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
	delete(p.sessions, tok)
	p.mu.Unlock()
}

// session returns the number of the MCP session that a call with local
// token tok belongs to, after counting one more if the call begins one
// (initialize).
func (p *mcpProxy) session(tok string, begins bool) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if begins {
		p.sessions[tok]++
	}
	return p.sessions[tok]
}

// maxCallBody bounds a call the proxy keeps to send again (an MCP call is
// a small JSON-RPC message).
const maxCallBody = 4 << 20

// maxRetryPause caps the pause between two sends of a call to a bridge
// that keeps failing it while the runner's stream stays up.
const maxRetryPause = 5 * time.Second

// call is an agent's HTTP request to the proxy, kept to be sent again.
type call struct {
	lt    *localTurn
	local string // the local token it came with (lt's)
	path  string
	query string
	body  []byte
	// key is the call's idempotency key (callKey; "" for a notification).
	key string
	// again: the call is a JSON-RPC message, sent again on the runner's
	// current bridge when the bridge went away without answering it.
	again bool
}

type callCtxKey struct{}

// gate refuses calls without a live turn's local token and keeps the
// call's body, to send it again.
func (p *mcpProxy) gate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		tok, _ := strings.CutPrefix(req.Header.Get("Authorization"), "Bearer ")
		p.mu.Lock()
		lt := p.tok[tok]
		p.mu.Unlock()
		if lt == nil {
			jsonError(w, http.StatusUnauthorized, "unknown or expired token")
			return
		}
		body, err := io.ReadAll(io.LimitReader(req.Body, maxCallBody+1))
		switch {
		case err != nil:
			jsonError(w, http.StatusBadRequest, "runner: reading the call: "+err.Error())
			return
		case len(body) > maxCallBody:
			jsonError(w, http.StatusRequestEntityTooLarge, "runner: the call is larger than 4 MiB")
			return
		}
		c := &call{lt: lt, local: tok, path: req.URL.Path, query: req.URL.RawQuery, body: body}
		if m, ok := parseCall(body); ok && req.Method == http.MethodPost {
			c.key, c.again = m.key(tok, p.session(tok, m.begins())), true
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
		next.ServeHTTP(w, req.WithContext(context.WithValue(req.Context(), callCtxKey{}, c)))
	})
}

// rpcCall is a JSON-RPC message an agent sent.
type rpcCall struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
}

// parseCall parses body as one JSON-RPC message, and reports whether it is
// one (a batch or something else is sent once, as it came).
func parseCall(body []byte) (rpcCall, bool) {
	var m rpcCall
	if json.Unmarshal(body, &m) != nil || m.Method == "" {
		return rpcCall{}, false
	}
	return m, true
}

// begins reports whether m begins an MCP session: a client's handshake,
// initialize or (the stateless protocol, SEP-2575) server/discover.
func (m rpcCall) begins() bool { return m.Method == "initialize" || m.Method == "server/discover" }

// key is the idempotency key of JSON-RPC request m of the turn whose local
// token is local, sent in the turn's MCP session number session ("" for a
// notification: no key). The key is the digest of the local token, the
// session, the request's id, its method and the digest of its params.
// Stable: the proxy sends the same key with each send of the call, and an
// agent that sends the same message again itself in the same session (same
// id, same params) gets the same key. Unique: the local token is random per
// turn on the runner, and within one MCP session a JSON-RPC id is never
// reused (the MCP spec); a client that restarts within the turn begins a
// new session (its handshake) and may reuse its ids, even for the very same
// call, which is then a new one. The method and params tell apart an id
// reused by clients whose sessions overlap.
func (m rpcCall) key(local string, session int) string {
	if len(m.ID) == 0 || string(m.ID) == "null" {
		return ""
	}
	var params bytes.Buffer
	_ = json.Compact(&params, m.Params)
	ps := sha256.Sum256(params.Bytes())
	h := sha256.New()
	fmt.Fprintf(h, "roombridge-mcp-call\x00%s\x00%d\x00%s\x00%s\x00%x", local, session, m.ID, m.Method, ps)
	return hex.EncodeToString(h.Sum(nil))
}

// rewrite leaves the call to retrier, which addresses each send.
func (p *mcpProxy) rewrite(*httputil.ProxyRequest) {}

// retrier sends a call to the bridge the runner is attached to, with the
// turn's token (both read again for each send: a new leader gives the turn
// a new token), and sends a JSON-RPC call again when the bridge went away
// without answering it (no answer at all, an answer cut halfway, or
// 502/503/504: a follower, a fenced or stopping leader): once the runner has re-attached, on its
// current bridge, with the call's idempotency key, until the agent gives up
// the call or the turn ends. A keyed call's answer is read whole first
// (readWhole); every other header and answer, streamed, go as they came.
type retrier struct {
	p    *mcpProxy
	next http.RoundTripper
}

func (t retrier) RoundTrip(out *http.Request) (*http.Response, error) {
	ctx := out.Context()
	c := ctx.Value(callCtxKey{}).(*call)
	var on *rconn
	pause := t.p.r.o.Retry
	for sends := 1; ; sends++ {
		conn, token, err := c.lt.awaitAttached(ctx, on, pause)
		if err != nil {
			return nil, fmt.Errorf("waiting for the turn to be attached: %w", err)
		}
		if sends > 1 && !t.p.issued(c) {
			return nil, errors.New("the turn ended while its call waited to be sent again")
		}
		req, err := c.request(out, conn, token)
		if err != nil {
			return nil, err
		}
		resp, err := t.next.RoundTrip(req)
		if err == nil && c.key != "" && !unanswered(resp.StatusCode) {
			if err = readWhole(resp); err != nil {
				resp = nil // cut halfway: as good as no answer
			}
		}
		if !c.again || ctx.Err() != nil || err == nil && !unanswered(resp.StatusCode) {
			return resp, err
		}
		why := ""
		if err != nil {
			why = err.Error()
		} else {
			why = resp.Status
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
			_ = resp.Body.Close()
		}
		t.p.r.o.Log.Warn("runner: mcp call got no answer; sending it again", "url", conn.base, "sends", sends, "error", why)
		on, pause = conn, min(2*pause, maxRetryPause)
	}
}

// maxAnswerBody bounds the answer of a keyed call that the proxy reads
// whole (the bridge's /mcp answers a call with one JSON body, its
// JSONResponse mode; an MCP answer is a small JSON-RPC message). Past it,
// the rest is streamed as it comes.
const maxAnswerBody = 16 << 20

// readWhole reads resp's body whole before the proxy hands the answer on,
// so an answer cut halfway (the connection dropped mid-body) is an error
// here, and the call is sent again with its key, rather than half an
// answer the agent cannot use. On error the body is closed.
func readWhole(resp *http.Response) error {
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBody+1))
	if err != nil {
		_ = resp.Body.Close()
		return fmt.Errorf("reading the answer: %w", err)
	}
	if len(b) > maxAnswerBody {
		resp.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(b), resp.Body), resp.Body}
		return nil
	}
	_ = resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(b))
	return nil
}

// unanswered reports whether status says the bridge did not carry the call
// out: a gateway's or a bridge's that is not (or no longer) the leader.
func unanswered(status int) bool {
	return status == http.StatusBadGateway || status == http.StatusServiceUnavailable || status == http.StatusGatewayTimeout
}

// request is c addressed to conn's bridge, with the turn's token there and
// the call's key.
func (c *call) request(out *http.Request, conn *rconn, token string) (*http.Request, error) {
	base, err := url.Parse(conn.base)
	if err != nil {
		return nil, fmt.Errorf("the runner's bridge URL %q: %w", conn.base, err)
	}
	req := out.Clone(out.Context())
	u := *base
	u.Path, u.RawPath, u.RawQuery = strings.TrimSuffix(base.Path, "/")+c.path, "", c.query
	req.URL, req.Host = &u, ""
	req.Body, req.ContentLength, req.GetBody = http.NoBody, 0, nil
	if len(c.body) > 0 {
		req.Body, req.ContentLength = io.NopCloser(bytes.NewReader(c.body)), int64(len(c.body))
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Del(agents.MCPCallKeyHeader)
	if c.key != "" {
		req.Header.Set(agents.MCPCallKeyHeader, c.key)
	}
	return req, nil
}

// issued reports whether c's local token still opens the endpoint for its
// turn (the turn has not ended).
func (p *mcpProxy) issued(c *call) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.tok[c.local] == c.lt
}

// failed answers a call the bridge could not be reached for (refused, a
// certificate it does not trust) and logs why: the agent sees a 502 with
// the reason.
func (p *mcpProxy) failed(w http.ResponseWriter, req *http.Request, err error) {
	if req.Context().Err() != nil { // the agent gave up on the call: nobody to answer
		return
	}
	bridge := ""
	if c := p.r.current(); c != nil {
		bridge = c.base
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

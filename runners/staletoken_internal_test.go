package runners

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestResendWaitsForTheNewToken: the old leader cut a keyed call (it
// revoked the turn's token when its scheduler stopped: the token is dead
// everywhere); the runner attaches to the new leader, whose turn frame
// with the turn's new token comes a moment after the welcome. The resend
// must go with the new token, not be refused 401 for the old one.
func TestResendWaitsForTheNewToken(t *testing.T) {
	r, err := NewRunner(RunnerOptions{Name: "laptop", Retry: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer r.mcp.close()
	lt := &localTurn{r: r, req: "r1", number: 1, token: "old"}
	oldc := &rconn{}
	local := r.mcp.issue(lt)
	var sends atomic.Int32
	var newc *rconn
	bridge := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		n := sends.Add(1)
		if n == 1 { // the old leader: cut without an answer, then the runner re-attaches elsewhere
			r.mu.Lock()
			r.setCurrentLocked(newc)
			r.mu.Unlock()
			go func() { // the new leader's turn frame, a moment after the welcome
				time.Sleep(100 * time.Millisecond)
				lt.mu.Lock()
				lt.token = "new"
				lt.setOnLocked(newc)
				lt.mu.Unlock()
			}()
			panic(http.ErrAbortHandler)
		}
		if req.Header.Get("Authorization") != "Bearer new" {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = io.WriteString(w, `{"error":"unknown token"}`)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"jsonrpc":"2.0","id":3,"result":{}}`)
	}))
	defer bridge.Close()
	newc, oldc.base = &rconn{base: bridge.URL}, bridge.URL
	r.mu.Lock()
	r.setCurrentLocked(oldc)
	r.mu.Unlock()
	lt.mu.Lock()
	lt.setOnLocked(oldc)
	lt.mu.Unlock()
	body := `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"ask_user","arguments":{"text":"x"}}}`
	req, _ := http.NewRequest(http.MethodPost, r.mcp.url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+local)
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the call resent after the re-attach: HTTP %d %s after %d sends; want 200 (sent with the turn's new token)", resp.StatusCode, b, sends.Load())
	}
}

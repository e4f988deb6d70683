package httpapi_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/core/coretest"
	"github.com/roombridge/roombridge/httpapi"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/rooms"
)

// TestAuthRefusalsBounded: tokenless calls with a long path are audited at
// the webhook refusals' rate, each record keeping a short prefix of the
// path; the first record of the next window counts those suppressed.
func TestAuthRefusalsBounded(t *testing.T) {
	e := start(t, "", true, nil)
	long := "/v1/requests/" + strings.Repeat("x", 20<<10)
	for range 30 {
		if resp, _ := e.call("GET", long, "", "", nil, nil); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("tokenless GET: %d", resp.StatusCode)
		}
	}
	recs := e.auditRecords("auth_refused")
	if len(recs) != rooms.RefusalsPerWindow {
		t.Fatalf("%d auth_refused records after 30 refusals, want %d", len(recs), rooms.RefusalsPerWindow)
	}
	for _, r := range recs {
		if len(r.Detail) > httpapi.MaxPathAudited+100 {
			t.Fatalf("record of %d bytes: %.200q", len(r.Detail), r.Detail)
		}
	}
	e.clk.Advance(rooms.RefusalWindow)
	e.call("GET", long, "", "", nil, nil)
	recs = e.auditRecords("auth_refused")
	if len(recs) != rooms.RefusalsPerWindow+1 || !strings.Contains(recs[len(recs)-1].Detail, "and 25 more like it") {
		t.Fatalf("after the window: %d records, last %q", len(recs), recs[len(recs)-1].Detail)
	}
}

// TestStatusByKind: illegal transitions are 409 (cancel of an ended
// request, retry of one still queued), trailing data after the JSON body
// is 400, and none of them changes anything.
func TestStatusByKind(t *testing.T) {
	e := start(t, "", true, nil)
	var r requests.Request
	if resp := e.api("POST", "/v1/requests", `{"room":"main","text":"hello"}`, &r); resp.StatusCode != http.StatusCreated {
		t.Fatalf("create: %d", resp.StatusCode)
	}
	var eb errBody
	if resp := e.api("POST", "/v1/requests/"+r.ID.String()+"/retry", "", &eb); resp.StatusCode != http.StatusConflict ||
		!strings.Contains(eb.Error, "still approved") {
		t.Errorf("retry of a queued request: %d %q, want 409", resp.StatusCode, eb.Error)
	}
	if resp := e.api("POST", "/v1/requests/"+r.ID.String()+"/cancel", "", nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("cancel: %d", resp.StatusCode)
	}
	eb = errBody{}
	if resp := e.api("POST", "/v1/requests/"+r.ID.String()+"/cancel", "", &eb); resp.StatusCode != http.StatusConflict ||
		!strings.Contains(eb.Error, "already ended") {
		t.Errorf("cancel of a cancelled request: %d %q, want 409", resp.StatusCode, eb.Error)
	}
	for _, body := range []string{`{"room":"main","text":"a"} {"x":1}`, `{"room":"main","text":"a"}x`, `{"room":"main","text":"a"}{}`} {
		eb = errBody{}
		if resp := e.api("POST", "/v1/requests", body, &eb); resp.StatusCode != http.StatusBadRequest ||
			!strings.Contains(eb.Error, "malformed JSON") {
			t.Errorf("body %q: %d %q, want 400", body, resp.StatusCode, eb.Error)
		}
	}
	if resp := e.api("POST", "/v1/requests", "{\"room\":\"main\",\"text\":\"a\"}\n\n", nil); resp.StatusCode != http.StatusCreated {
		t.Errorf("a body with trailing white space: %d, want 201", resp.StatusCode)
	}
	var list httpapi.ListResult
	if e.api("GET", "/v1/requests", "", &list); list.Count != 2 {
		t.Errorf("%d requests, want 2 (the trailing-data bodies created some)", list.Count)
	}
}

// TestPagination: GET /v1/requests answers DefaultLimit requests and a
// cursor, pages follow without gaps or repeats, limit is bounded.
func TestPagination(t *testing.T) {
	e := start(t, "", true, nil)
	const n = 120
	for i := range n {
		agent := "coder"
		if i%3 == 0 {
			agent = "reviewer"
		}
		if resp := e.api("POST", "/v1/requests", fmt.Sprintf(`{"room":"main","agent":%q,"text":"ask %d"}`, agent, i), nil); resp.StatusCode != http.StatusCreated {
			t.Fatalf("create %d: %d", i, resp.StatusCode)
		}
	}
	var page httpapi.ListResult
	e.api("GET", "/v1/requests", "", &page)
	if page.Count != httpapi.DefaultLimit || page.Next == "" {
		t.Fatalf("first page: %d requests, next %q; want %d and a cursor", page.Count, page.Next, httpapi.DefaultLimit)
	}
	for _, q := range []struct {
		query string
		want  int
	}{{"limit=7", n}, {"limit=7&agent=reviewer", n / 3}, {"limit=11&state=approved", n}, {"limit=500", n}} {
		seen := map[requests.ID]bool{}
		var last requests.ID
		after := ""
		for pages := 0; ; pages++ {
			if pages > n {
				t.Fatalf("%s: no end", q.query)
			}
			var p httpapi.ListResult
			if resp := e.api("GET", "/v1/requests?"+q.query+after, "", &p); resp.StatusCode != http.StatusOK {
				t.Fatalf("%s: %d", q.query, resp.StatusCode)
			}
			for _, r := range p.Requests {
				if seen[r.ID] || !last.IsZero() && r.ID.Key() <= last.Key() {
					t.Fatalf("%s: %s repeated or out of order", q.query, r.ID)
				}
				seen[r.ID], last = true, r.ID
			}
			if p.Next == "" {
				break
			}
			after = "&after=" + p.Next
		}
		if len(seen) != q.want {
			t.Errorf("%s: %d requests over the pages, want %d", q.query, len(seen), q.want)
		}
	}
	var eb errBody
	for _, bad := range []string{"limit=501", "limit=-1", "after=yesterday"} {
		if resp := e.api("GET", "/v1/requests?"+bad, "", &eb); resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: %d %q, want 400", bad, resp.StatusCode, eb.Error)
		}
	}
}

// TestQueueLimit: an agent's queue holds requests.queue_limit requests;
// past it the API answers 429 with Retry-After and chat a clear refusal,
// and nothing is created; another agent's queue is not affected.
func TestQueueLimit(t *testing.T) {
	e := start(t, "requests: {queue_limit: 3}", true, nil)
	for i := range 3 {
		if resp := e.api("POST", "/v1/requests", fmt.Sprintf(`{"room":"main","text":"ask %d"}`, i), nil); resp.StatusCode != http.StatusCreated {
			t.Fatalf("create %d: %d", i, resp.StatusCode)
		}
	}
	var eb errBody
	resp := e.api("POST", "/v1/requests", `{"room":"main","text":"one too many"}`, &eb)
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" ||
		!strings.Contains(eb.Error, "requests.queue_limit") {
		t.Fatalf("over the limit: %d %q (Retry-After %q), want 429", resp.StatusCode, eb.Error, resp.Header.Get("Retry-After"))
	}
	ans := e.b.Router().Handle(t.Context(), chat.Event{Kind: chat.Ask, Surface: chat.Slack, Channel: "C1",
		User: "slack:UOWNER", Text: "coder one more"})
	if !ans.Error || !strings.Contains(ans.Text, "queue full: coder has 3 requests waiting") {
		t.Fatalf("chat over the limit: %+v", ans)
	}
	if resp := e.api("POST", "/v1/requests", `{"room":"main","agent":"reviewer","text":"x"}`, nil); resp.StatusCode != http.StatusCreated {
		t.Fatalf("another agent: %d", resp.StatusCode)
	}
	var list httpapi.ListResult
	if e.api("GET", "/v1/requests", "", &list); list.Count != 4 {
		t.Errorf("%d requests, want 4", list.Count)
	}
}

// TestIdempotencyKey: a retry with the same Idempotency-Key answers the
// first request (one request in the store); the key with another ask is a
// 409; after 24 h the key is forgotten.
func TestIdempotencyKey(t *testing.T) {
	e := start(t, "", true, nil)
	key := map[string]string{"Idempotency-Key": "client-7f3a"}
	var first, again requests.Request
	if resp, _ := e.call("POST", "/v1/requests", coretest.Token, `{"room":"main","text":"deploy"}`, key, &first); resp.StatusCode != http.StatusCreated {
		t.Fatalf("first: %d", resp.StatusCode)
	}
	for range 3 {
		resp, _ := e.call("POST", "/v1/requests", coretest.Token, `{"room":"main","text":"deploy"}`, key, &again)
		if resp.StatusCode != http.StatusCreated || again.ID != first.ID || resp.Header.Get("Idempotency-Replayed") != "true" {
			t.Fatalf("retry: %d %s, want 201 %s replayed", resp.StatusCode, again.ID, first.ID)
		}
	}
	var eb errBody
	if resp, _ := e.call("POST", "/v1/requests", coretest.Token, `{"room":"main","text":"something else"}`, key, &eb); resp.StatusCode != http.StatusConflict {
		t.Fatalf("same key, another ask: %d %q, want 409", resp.StatusCode, eb.Error)
	}
	var list httpapi.ListResult
	if e.api("GET", "/v1/requests", "", &list); list.Count != 1 {
		t.Fatalf("%d requests after retries, want 1", list.Count)
	}
	e.clk.Advance(httpapi.IdempotencyTTL + time.Minute)
	if resp, _ := e.call("POST", "/v1/requests", coretest.Token, `{"room":"main","text":"deploy"}`, key, &again); resp.StatusCode != http.StatusCreated || again.ID == first.ID {
		t.Fatalf("after 24 h: %d %s, want a new request", resp.StatusCode, again.ID)
	}
}

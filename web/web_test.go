package web_test

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/roombridge/roombridge/connectors/slack/slacktest"
)

// signIn uses link with a plain HTTP client and returns the session cookie.
func signIn(t *testing.T, link string) *http.Cookie {
	t.Helper()
	u, err := url.Parse(link)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client().PostForm(u.Scheme+"://"+u.Host+"/signin", url.Values{"t": {u.Query().Get("t")}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	for _, c := range resp.Cookies() {
		if c.Name == "roombridge_session" {
			if !c.HttpOnly || c.SameSite != http.SameSiteLaxMode {
				t.Errorf("session cookie %+v: want HttpOnly and SameSite=Lax", c)
			}
			return c
		}
	}
	t.Fatalf("sign-in with %s: %d, no session cookie", link, resp.StatusCode)
	return nil
}

// get fetches path as the holder of cookie.
func get(t *testing.T, base, path string, cookie *http.Cookie) (int, string, http.Header) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+path, nil)
	if cookie != nil {
		req.AddCookie(cookie)
	}
	resp, err := client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

func post(t *testing.T, base, path string, cookie *http.Cookie, form url.Values) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, base+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if cookie != nil {
		req.AddCookie(cookie)
	}
	resp, err := client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func csrfOf(t *testing.T, page string) string {
	t.Helper()
	m := csrfRE.FindStringSubmatch(page)
	if m == nil {
		t.Fatal("no CSRF token on the page")
	}
	return m[1]
}

// TestSignInLinkOnceAndForgedPosts: the link from chat signs in once; a
// POST without the CSRF token, or with another person's, is refused with
// 403 and audited; revoke ends the person's sessions.
func TestSignInLinkOnceAndForgedPosts(t *testing.T) {
	h := newHarness(t)
	base := h.bridge.URL
	h.mention(member, "echo hello")
	h.waitStore("a pending request", func() bool { return len(h.pending()) == 1 })
	id := h.pending()[0].ID.String()

	link := h.signInLink(owner)
	ownerCookie := signIn(t, link)
	u, _ := url.Parse(link)
	if code := post(t, base, "/signin", nil, url.Values{"t": {u.Query().Get("t")}}); code != http.StatusForbidden {
		t.Errorf("second use of a sign-in link: %d, want 403", code)
	}
	code, page, hdr := get(t, base, "/rooms/backend", ownerCookie)
	if code != http.StatusOK || !strings.Contains(page, "1 of 1") || !strings.Contains(page, ">Approve<") {
		t.Fatalf("owner's room page: %d, want the card 1 of 1 with Approve:\n%s", code, page)
	}
	if csp := hdr.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe-inline") {
		t.Errorf("CSP %q", csp)
	}
	ownerCSRF := csrfOf(t, page)

	memberCookie := signIn(t, h.signInLink(member))
	_, mpage, _ := get(t, base, "/rooms/backend", memberCookie)
	if strings.Contains(mpage, ">Approve<") || strings.Contains(mpage, "1 of 1") {
		t.Errorf("the member (no approver) sees the card's buttons:\n%s", mpage)
	}
	if code := post(t, base, "/approvals/"+id+"/approve", memberCookie, url.Values{}); code != http.StatusForbidden {
		t.Errorf("POST without CSRF token: %d, want 403", code)
	}
	if code := post(t, base, "/approvals/"+id+"/approve", memberCookie, url.Values{"csrf": {ownerCSRF}}); code != http.StatusForbidden {
		t.Errorf("POST with another person's CSRF token: %d, want 403", code)
	}
	if !h.audited("web_refused", "slack:"+member) {
		t.Error("forged POSTs are not audited")
	}
	if r, _ := h.svc().Get(context.Background(), h.pending()[0].ID); r.State.String() != "pending" {
		t.Errorf("after forged POSTs %s is %s", id, r.State)
	}
	if code := post(t, base, "/approvals/"+id+"/approve", memberCookie, url.Values{"csrf": {csrfOf(t, mpage)}}); code != http.StatusForbidden {
		t.Errorf("a member approving: %d, want 403", code)
	}

	// bridge revoke USER ends the member's sessions.
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/users/slack:"+member+"/revoke", nil)
	req.Header.Set("Authorization", "Bearer coretest-api-token")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("revoke: %v %v", resp, err)
	}
	resp.Body.Close()
	if code, _, _ := get(t, base, "/rooms/backend", memberCookie); code != http.StatusSeeOther {
		t.Errorf("the revoked member's session still works: %d", code)
	}
	if code, _, _ := get(t, base, "/rooms/backend", ownerCookie); code != http.StatusOK {
		t.Errorf("the owner's session ended with the member's: %d", code)
	}
}

// TestOpenLinks: with web.public_url, the thread parent and the approval
// card in Slack carry an "Open" link to the request's page; the session
// cookie of an https public URL is Secure.
func TestOpenLinks(t *testing.T) {
	h := newHarnessWeb(t, "{enabled: true, public_url: 'https://bridge.example.com/'}")
	h.mention(member, "echo hello")
	h.waitStore("a pending request", func() bool { return len(h.pending()) == 1 })
	page := "https://bridge.example.com/requests/" + h.pending()[0].ID.String()
	h.waitFake("the parent and the card with their Open links", func(s *slacktest.Server) bool {
		n := 0
		for _, m := range s.Messages() {
			if m.Channel == channel && strings.Contains(string(m.BlocksJSON), page) {
				n++
			}
		}
		return n >= 2
	})
	link := h.signInLink(owner)
	if !strings.HasPrefix(link, "https://bridge.example.com/signin?t=") {
		t.Fatalf("sign-in link %q, want one of the public URL", link)
	}
	tok := link[strings.Index(link, "?t=")+3:]
	resp, err := client().PostForm(h.bridge.URL+"/signin", url.Values{"t": {tok}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if len(resp.Cookies()) == 0 || !resp.Cookies()[0].Secure {
		t.Errorf("session cookie %v: want Secure with an https public URL", resp.Cookies())
	}
}

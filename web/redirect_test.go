package web_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// TestBackStaysOnSite: a form's "back" field is followed only when it is a
// clean path of this site; anything a browser could read as another site
// (WHATWG quirks: tabs and newlines stripped, "\" read as "/") or that is
// not a plain path falls back to the default page.
func TestBackStaysOnSite(t *testing.T) {
	h := newHarness(t)
	cookie := signIn(t, h.signInLink(owner))
	_, page, _ := get(t, h.bridge.URL, "/inbox", cookie)
	csrf := csrfOf(t, page)
	for _, tc := range []struct{ back, want string }{
		{"/ok/path?x=1", "/ok/path?x=1"},
		{"/rooms/backend", "/rooms/backend"},
		{"/rooms/a%20b", "/rooms/a%20b"},
		{"/rooms/100%25", "/rooms/100%25"}, // a room named "100%": decoded once it is no escape
		{"/rooms/a%252Fb", "/rooms/a%252Fb"},
		{"/\t/evil.example", "/"},
		{"/\r/evil.example", "/"},
		{"/\n/evil.example", "/"},
		{"\t//evil.example", "/"},
		{"/ok\x00", "/"},
		{"/ok\x7f", "/"},
		{"/\\evil.example", "/"},
		{"\\\\evil.example", "/"},
		{"/%2F/evil.example", "/"},
		{"/%2f/evil.example", "/"},
		{"%2F%2Fevil.example", "/"},
		{"/%5Cevil.example", "/"},
		{"/%09/evil.example", "/"},
		{"/%0A/evil.example", "/"},
		{"/%252F/evil.example", "/"},
		{"https://evil.example", "/"},
		{"https://evil.example/ok", "/"},
		{"//evil.example", "/"},
		{"///evil.example", "/"},
		{"javascript:alert(1)", "/"},
		{"ok/relative", "/"},
		{"", "/"},
		{"/%zz", "/"},
	} {
		form := url.Values{"csrf": {csrf}, "back": {tc.back}}
		req, _ := http.NewRequest(http.MethodPost, h.bridge.URL+"/approvals/A1/hide", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.AddCookie(cookie)
		resp, err := http.DefaultTransport.RoundTrip(req) // a client would refuse a bad Location itself
		if err != nil {
			t.Errorf("back=%q: %v", tc.back, err)
			continue
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != tc.want {
			t.Errorf("back=%q: %d Location %q, want 303 %q", tc.back, resp.StatusCode, resp.Header.Get("Location"), tc.want)
		}
	}
}

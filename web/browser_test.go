package web_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/roombridge/roombridge/connectors/slack/slacktest"
	"github.com/roombridge/roombridge/delegation"
	"github.com/roombridge/roombridge/requests"
)

// chromium finds Debian's chromium: missing, the browser tests fail in CI
// (CI=true) and skip elsewhere.
func chromium(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("chromium is not installed (apt-get install -y chromium)")
	}
	t.Skip("chromium is not installed")
	return ""
}

// browser starts a headless Chromium at a w×h viewport, with a fresh
// profile: chromedp makes a new user-data-dir for each allocator and removes
// it once the browser is gone (a t.TempDir raced Chromium's last writes).
func browser(t *testing.T, w, h int) context.Context {
	opts := []chromedp.ExecAllocatorOption{chromedp.ExecPath(chromium(t)), chromedp.Headless, chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.Flag("disable-quic", true), chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.WindowSize(w, h)}
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelB := chromedp.NewContext(actx)
	ctx, cancelT := context.WithTimeout(ctx, 90*time.Second)
	t.Cleanup(func() { cancelT(); cancelB(); cancelA() })
	if err := chromedp.Run(ctx, chromedp.EmulateViewport(int64(w), int64(h))); err != nil {
		t.Fatal(err)
	}
	return ctx
}

func run(t *testing.T, ctx context.Context, what string, actions ...chromedp.Action) {
	t.Helper()
	if err := chromedp.Run(ctx, actions...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// textOf waits for sel and returns its text.
func textOf(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	var s string
	run(t, ctx, "reading "+sel, chromedp.WaitVisible(sel, chromedp.ByQuery), chromedp.Text(sel, &s, chromedp.ByQuery))
	return s
}

// waitText waits until sel's text contains want.
func waitText(t *testing.T, ctx context.Context, sel, want string) {
	t.Helper()
	waitTrue(t, ctx, sel+" reading "+want,
		`(function(){var e=document.querySelector(`+quote(sel)+`);return !!e && e.textContent.indexOf(`+quote(want)+`)>=0})()`)
}

// waitTrue waits until js is true: the page updates itself through SSE,
// or a form's POST loads the next page (evaluations during that navigation
// fail and are tried again).
func waitTrue(t *testing.T, ctx context.Context, what, js string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var ok bool
		if err := chromedp.Run(ctx, chromedp.Evaluate(js, &ok)); err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			var body string
			_ = chromedp.Run(ctx, chromedp.Evaluate(`document.body.innerText`, &body))
			t.Fatalf("waiting for %s; the page reads:\n%s", what, body)
		}
		time.Sleep(50 * time.Millisecond) // the browser's state is polled: it has no notification to wait on here
	}
}

// waitGone waits until nothing matches sel.
func waitGone(t *testing.T, ctx context.Context, sel string) {
	t.Helper()
	waitTrue(t, ctx, sel+" gone", `document.querySelector(`+quote(sel)+`) === null`)
}

// click clicks the element sel matches at the moment it runs (the page's
// live regions are swapped in place, so a node found earlier may be gone).
func click(sel string) chromedp.Action {
	return chromedp.ActionFunc(func(ctx context.Context) error {
		if err := chromedp.WaitVisible(sel, chromedp.ByQuery).Do(ctx); err != nil {
			return err
		}
		var ok bool
		if err := chromedp.Evaluate(`(function(){var e=document.querySelector(`+quote(sel)+`);if(!e)return false;e.click();return true})()`, &ok).Do(ctx); err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("click: nothing matches %s", sel)
		}
		return nil
	})
}

func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", "\\'") + "'" }

// TestBrowser walks the web room in a real browser, at a phone's and a
// desktop's viewport, against the bridge with the real Slack connector on
// a fake Slack.
func TestBrowser(t *testing.T) {
	for _, vp := range []struct {
		name string
		w, h int
	}{{"phone", 390, 844}, {"desktop", 1280, 800}} {
		t.Run(vp.name, func(t *testing.T) { browse(t, vp.name, vp.w, vp.h) })
	}
}

func browse(t *testing.T, name string, w, hgt int) {
	h := newHarness(t)
	ctx := browser(t, w, hgt) // closed before the bridge: its live stream ends first
	del := h.bridge.Delegation()
	// The owner's request starts a background task; the member asks twice
	// (both wait for the owner's approval).
	h.mention(owner, "background tests sleep 60; yield")
	h.waitStore("a running task", func() bool {
		ts, _ := del.Running(context.Background(), "backend")
		return len(ts) == 1 && ts[0].State == delegation.TaskRunning
	})
	h.mention(member, "echo one")
	h.mention(member, "echo two")
	h.waitStore("two pending requests", func() bool { return len(h.pending()) == 2 })
	first, second := h.pending()[0].ID.String(), h.pending()[1].ID.String()

	run(t, ctx, "opening the link", chromedp.Navigate(h.signInLink(owner)),
		click(`form[action="/signin"] button`), chromedp.WaitVisible(".card", chromedp.ByQuery))
	if got := textOf(t, ctx, ".card .count"); got != "1 of 2" {
		t.Fatalf("card count %q, want 1 of 2", got)
	}
	if got := textOf(t, ctx, ".card h2"); !strings.Contains(got, first) {
		t.Errorf("first card %q, want %s's", got, first)
	}
	waitText(t, ctx, "#strip", "tests")
	run(t, ctx, "waiting for the live stream", chromedp.WaitVisible(`body[data-connected="1"]`, chromedp.ByQuery))
	screenshot(t, ctx, name)

	// "1 of 2": Next shows the second card, Previous the first again.
	run(t, ctx, "the next card", click(`.card .cardnav a[rel="next"]`))
	waitText(t, ctx, ".card .count", "2 of 2")
	waitText(t, ctx, ".card h2", second)
	run(t, ctx, "the previous card", click(`.card .cardnav a[rel="prev"]`))
	waitText(t, ctx, ".card .count", "1 of 2")
	waitText(t, ctx, ".card h2", first)
	run(t, ctx, "the live stream again", chromedp.WaitVisible(`body[data-connected="1"]`, chromedp.ByQuery))

	// Approve: the Slack card is updated, the next card shows.
	run(t, ctx, "approving", click(`.card form[action$="/approve"] button`))
	waitText(t, ctx, ".card .count", "1 of 1")
	waitText(t, ctx, ".card h2", second)
	h.waitFake("the Slack card of "+first+" updated", func(s *slacktest.Server) bool {
		for _, m := range s.Messages() {
			if len(m.Updates) > 0 && strings.Contains(m.Text+string(m.BlocksJSON), first) &&
				strings.Contains(m.Text+string(m.BlocksJSON), "approved by") {
				return true
			}
		}
		return false
	})

	// Answered in Slack: the web card goes without a reload.
	h.mention(owner, "approve "+second)
	waitGone(t, ctx, ".card")

	// A new ask shows its card live; ✕ hides it, a pointer stays; it is in
	// the Inbox.
	h.mention(member, "echo three")
	waitText(t, ctx, ".card .count", "1 of 1")
	third := h.pending()[0].ID.String()
	waitText(t, ctx, ".card h2", third)
	run(t, ctx, "hiding", click(`.card form.hide button`))
	waitText(t, ctx, ".pointer", "1 waiting in the Inbox")
	run(t, ctx, "the inbox", click(`.pointer a`), chromedp.WaitVisible(".card", chromedp.ByQuery))
	waitText(t, ctx, ".card h2", third)
	run(t, ctx, "back", chromedp.NavigateBack(), chromedp.WaitVisible("#strip", chromedp.ByQuery))

	// ■ stops the task.
	run(t, ctx, "stopping", click(`#strip button[aria-label^="Stop task"]`))
	waitText(t, ctx, "#strip", "stopped — incomplete")

	// A reload keeps everything.
	run(t, ctx, "reloading", chromedp.Reload(), chromedp.WaitVisible("#strip", chromedp.ByQuery))
	waitText(t, ctx, "#strip", "stopped — incomplete")
	waitText(t, ctx, ".pointer", "1 waiting in the Inbox")
	var cards int
	run(t, ctx, "counting cards", chromedp.Evaluate(`document.querySelectorAll(".card").length`, &cards))
	if cards != 0 {
		t.Errorf("after the reload %d cards show, want the hidden one to stay hidden", cards)
	}

	// The member (no approver, not the task's requester) sees no buttons.
	run(t, ctx, "signing in as the member", network.ClearBrowserCookies(), chromedp.Navigate(h.signInLink(member)),
		click(`form[action="/signin"] button`), chromedp.WaitVisible("#requests", chromedp.ByQuery))
	var buttons int
	run(t, ctx, "counting buttons", chromedp.Evaluate(
		`document.querySelectorAll('.card, form[action*="/approve"], form[action*="/deny"], #strip button').length`, &buttons))
	if buttons != 0 {
		t.Errorf("the member sees %d approval or task buttons", buttons)
	}
}

// screenshot saves the page: under $WEB_SCREENSHOTS (docs/ when refreshing
// the README's pictures), else in the test's temporary folder.
func screenshot(t *testing.T, ctx context.Context, name string) {
	dir := os.Getenv("WEB_SCREENSHOTS")
	if dir == "" {
		dir = t.TempDir()
	}
	var png []byte
	run(t, ctx, "screenshot", chromedp.FullScreenshot(&png, 100))
	if err := os.WriteFile(filepath.Join(dir, "web-"+name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestBrowserLiveAnswer: the demo agent streams its answer over 3 s; the
// request page shows it growing, word by word (no reload, no store write per
// word), and, when the request ends, the stored result, which equals the
// last live text.
func TestBrowserLiveAnswer(t *testing.T) {
	h := newHarness(t)
	ctx := browser(t, 1280, 800)
	link := h.signInLink(owner)
	base, _, _ := strings.Cut(link, "/signin")
	run(t, ctx, "signing in", chromedp.Navigate(link), click(`form[action="/signin"] button`),
		chromedp.WaitVisible("#requests", chromedp.ByQuery))

	words := "one two three four five six seven eight nine ten eleven twelve"
	h.mention(owner, "stream 3s "+words)
	var id string
	h.waitStore("the streaming request", func() bool {
		list, _ := h.svc().List(context.Background(), requests.Filter{})
		for _, r := range list {
			if strings.Contains(r.Ask, "stream 3s") {
				id = r.ID.String()
			}
		}
		return id != ""
	})
	// The page records every live text it shows.
	run(t, ctx, "the request page", chromedp.Navigate(base+"/requests/"+id),
		chromedp.WaitVisible("#request", chromedp.ByQuery),
		chromedp.Evaluate(`window.seen = []; new MutationObserver(function () {
			var e = document.getElementById("live-text");
			if (e && !e.parentNode.hidden && e.textContent !== window.seen[window.seen.length-1]) { window.seen.push(e.textContent); }
		}).observe(document.body, {subtree: true, childList: true, characterData: true, attributes: true}); true`, nil))
	waitTrue(t, ctx, "part of the answer, live", `(function(){var e=document.getElementById("live-text");
		return !!e && !e.parentNode.hidden && e.textContent.length > 0 && e.textContent !== `+quote(words)+`})()`)
	waitTrue(t, ctx, "the result", `document.getElementById("result") !== null && document.getElementById("live") === null`)

	rid, err := requests.ParseID(id)
	if err != nil {
		t.Fatal(err)
	}
	r, err := h.svc().Get(context.Background(), rid)
	if err != nil {
		t.Fatal(err)
	}
	if r.State != requests.Done || r.Result != words {
		t.Fatalf("request %s %q, want done with %q", r.State, r.Result, words)
	}
	var seen []string
	var shown string
	run(t, ctx, "reading the texts", chromedp.Evaluate(`window.seen`, &seen),
		chromedp.Evaluate(`document.getElementById("result").textContent`, &shown)) // the region may be swapped again meanwhile
	if len(seen) < 2 || seen[len(seen)-1] != r.Result || shown != r.Result {
		t.Fatalf("live texts %q, result shown %q: want a growing text ending in the stored result %q", seen, shown, r.Result)
	}
	for i, s := range seen {
		if !strings.HasPrefix(r.Result, s) || (i > 0 && len(s) <= len(seen[i-1])) {
			t.Fatalf("live text %d %q does not grow toward %q (all: %q)", i, s, r.Result, seen)
		}
	}
}

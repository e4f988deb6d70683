package web_test

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/roombridge/roombridge/agents"
	"github.com/roombridge/roombridge/agents/process"
	"github.com/roombridge/roombridge/runners"
)

// runnerConfig adds a room lab (the owner only) whose agent remote runs on
// the runner laptop.
var runnerConfig = strings.Replace(config, "agents:\n", `  - {name: lab, channels: {slack: C0999}, agents: [remote], members: [slack:UOWNER]}
agents:
  remote: {kind: runner, runner: laptop}
`, 1) + "runners: {grace: 30s, heartbeat: 1s}\n"

// startLaptop registers the runner laptop and runs it in-process against
// h's bridge until the returned stop.
func startLaptop(t *testing.T, h *harness) (stop func()) {
	t.Helper()
	return runLaptop(t, h, addLaptop(t, h))
}

// addLaptop registers the runner laptop and gives its token.
func addLaptop(t *testing.T, h *harness) string {
	t.Helper()
	tok, err := runners.Add(context.Background(), h.bridge.DB, time.Now(), "laptop")
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// runLaptop runs the runner laptop (hosting remote) in-process against h's
// bridge until the returned stop.
func runLaptop(t *testing.T, h *harness, tok string) (stop func()) {
	t.Helper()
	r, err := runners.NewRunner(runners.RunnerOptions{Name: "laptop", URLs: []string{h.bridge.URL}, Token: tok,
		Retry: 20 * time.Millisecond, Agents: map[string]agents.Runtime{
			"remote": &process.Runtime{Kind: process.Exec, Command: []string{"sh", "-c", `read turn; echo '{"type":"final","text":"ok"}'`}}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = r.Run(ctx); close(done) }()
	stop = func() { cancel(); <-done }
	t.Cleanup(stop)
	return stop
}

// TestBrowserRoomRunners: the room page lists the runner of its agent,
// connected, then disconnected with its last contact once it stops.
func TestBrowserRoomRunners(t *testing.T) {
	h := newHarnessConfig(t, runnerConfig)
	stop := startLaptop(t, h)
	ctx := browser(t, 1280, 800)
	link := h.signInLink(owner)
	base, _, _ := strings.Cut(link, "/signin")
	run(t, ctx, "signing in", chromedp.Navigate(link), click(`form[action="/signin"] button`),
		chromedp.WaitVisible("#requests", chromedp.ByQuery))
	row := `#runners tr[data-runner="laptop"]`
	roomState(t, ctx, base+"/rooms/lab", row, "connected")
	if got := textOf(t, ctx, row); !strings.Contains(got, "remote") || !strings.HasSuffix(strings.TrimSpace(textOf(t, ctx, row+" .contact")), "Z") {
		t.Fatalf("runner row %q, want its agent remote and a last contact in UTC", got)
	}
	stop()
	roomState(t, ctx, base+"/rooms/lab", row, "disconnected", "away")
	if contact := textOf(t, ctx, row+" .contact"); !strings.HasSuffix(strings.TrimSpace(contact), "Z") {
		t.Fatalf("stopped runner's last contact %q, want a time in UTC", contact)
	}
	run(t, ctx, "the backend room", chromedp.Navigate(base+"/rooms/backend"), chromedp.WaitVisible("#requests", chromedp.ByQuery))
	var n int
	run(t, ctx, "counting runner sections", chromedp.Evaluate(`document.querySelectorAll("#runners").length`, &n))
	if n != 0 {
		t.Fatalf("backend (no runner-hosted agent) shows %d runner sections, want none", n)
	}
}

// TestRoomRunnersMembersOnly: a member of the room sees its runners; a
// person who may not ask in it sees neither the room nor its runners, and
// a room without runner-hosted agents has no runners section.
func TestRoomRunnersMembersOnly(t *testing.T) {
	h := newHarnessConfig(t, runnerConfig)
	startLaptop(t, h)
	base := h.bridge.URL
	ownerC, memberC := signIn(t, h.signInLink(owner)), signIn(t, h.signInLink(member))
	code, body, _ := get(t, base, "/rooms/lab", ownerC)
	if code != http.StatusOK || !strings.Contains(body, `data-runner="laptop"`) || !strings.Contains(body, "remote") {
		t.Fatalf("owner's lab page %d, want it to list runner laptop with agent remote:\n%s", code, body)
	}
	if code, body, _ := get(t, base, "/rooms/lab", memberC); code != http.StatusForbidden || strings.Contains(body, "laptop") {
		t.Fatalf("non-member's lab page %d, want 403 without the runner:\n%s", code, body)
	}
	for _, c := range []*http.Cookie{ownerC, memberC} {
		if code, body, _ := get(t, base, "/rooms/backend", c); code != http.StatusOK || strings.Contains(body, `id="runners"`) {
			t.Fatalf("backend page %d, want 200 without a runners section:\n%s", code, body)
		}
	}
}

// roomState reloads page until the runner row shows one of states.
func roomState(t *testing.T, ctx context.Context, page, row string, states ...string) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for {
		run(t, ctx, "loading "+page, chromedp.Navigate(page), chromedp.WaitVisible(row, chromedp.ByQuery))
		st := textOf(t, ctx, row+" .state")
		if slices.Contains(states, st) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("runner row shows %q, want one of %q", st, states)
		}
	}
}

// TestBrowserRoomRunnersLive: the room's runners section redraws by itself
// (no reload) when its runner connects, drops and connects again, and
// lists only the room's agents of the runner (laptop also hosts ops's
// agent remote2, which lab's page does not show).
func TestBrowserRoomRunnersLive(t *testing.T) {
	cfg := strings.Replace(runnerConfig, "agents:\n", "  - {name: ops, channels: {slack: C0888}, agents: [remote2], members: [slack:UOWNER]}\nagents:\n  remote2: {kind: runner, runner: laptop}\n", 1)
	h := newHarnessConfig(t, cfg)
	tok := addLaptop(t, h)
	ctx := browser(t, 1280, 800)
	link := h.signInLink(owner)
	base, _, _ := strings.Cut(link, "/signin")
	row := `#runners tr[data-runner="laptop"]`
	run(t, ctx, "signing in", chromedp.Navigate(link), click(`form[action="/signin"] button`),
		chromedp.WaitVisible("#requests", chromedp.ByQuery), chromedp.Navigate(base+"/rooms/lab"), chromedp.WaitVisible(row, chromedp.ByQuery))
	waitTrue(t, ctx, "the page's live stream open", `document.body.dataset.connected === "1"`)
	run(t, ctx, "marking the page", chromedp.Evaluate(`window.notReloaded = true`, nil))
	state := func(want string) {
		t.Helper()
		waitTrue(t, ctx, "runner laptop "+want,
			`(function(){var e=document.querySelector(`+quote(row+" .state")+`);return !!e && e.textContent===`+quote(want)+`})()`)
	}
	state("never connected")
	stop := runLaptop(t, h, tok)
	state("connected")
	if got := textOf(t, ctx, row+" td:nth-child(2)"); got != "remote" {
		t.Fatalf("lab's runner row lists agents %q, want only lab's remote (not ops's remote2)", got)
	}
	stop()
	state("disconnected")
	runLaptop(t, h, tok)
	state("connected")
	var same bool
	run(t, ctx, "checking the page was not reloaded", chromedp.Evaluate(`window.notReloaded === true`, &same))
	if !same {
		t.Fatal("the page was reloaded; want the section redrawn in place")
	}
}

package web_test

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/connectors/slack"
	"github.com/roombridge/roombridge/connectors/slack/slacktest"
	"github.com/roombridge/roombridge/core/coretest"
	"github.com/roombridge/roombridge/internal/testbin"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store"
)

// bridgeBin is the bridge binary: its demo-agent is the tests' agent.
var bridgeBin string

func TestMain(m *testing.M) { testbin.Main(m.Run, &bridgeBin) }

// Identities of the tests: an owner, a member (no approver), the channel.
const (
	channel = "C0123"
	owner   = "UOWNER"
	member  = "U1"
	waitFor = 60 * time.Second
)

const config = `
owner: acme
owners: [slack:UOWNER]
data_dir: %DIR%
slack: {mode: socket, bot_token: xoxb-test, app_token: xapp-test}
web: {enabled: true}
rooms:
  - {name: backend, channels: {slack: C0123}, agents: [coder], members: [slack:U1, slack:UOWNER], approvers: [slack:UOWNER]}
agents:
  coder: {kind: exec, command: [%BIN%, demo-agent], workdir: %DIR%}
`

// harness is a whole bridge with the real Slack connector on a fake Slack,
// and the web room on its HTTP server.
type harness struct {
	t      testing.TB
	fake   *slacktest.Server
	bridge *coretest.Bridge
	events atomic.Int64
}

func newHarness(t testing.TB) *harness { return newHarnessWeb(t, "{enabled: true}") }

// newHarnessWeb starts a harness whose config's web section is web.
func newHarnessWeb(t testing.TB, web string) *harness {
	t.Helper()
	return newHarnessConfig(t, strings.Replace(config, "web: {enabled: true}", "web: "+web, 1))
}

// newHarnessConfig starts a harness of the config cfg ("%BIN%" in it: the
// bridge binary).
func newHarnessConfig(t testing.TB, cfg string) *harness {
	t.Helper()
	h := &harness{t: t, fake: slacktest.NewServer()}
	t.Cleanup(h.fake.Close)
	dir := t.TempDir()
	conn, err := slack.New(slack.Options{Mode: slack.ModeSocket, BotToken: slacktest.DefaultBotToken,
		AppToken: slacktest.DefaultAppToken, APIURL: h.fake.APIURL(), PingInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	cfg = strings.ReplaceAll(cfg, "%BIN%", fmt.Sprintf("%q", bridgeBin))
	h.bridge = coretest.Start(t, coretest.Options{Config: cfg, Dir: dir,
		Connectors: func() []chat.Connector { return []chat.Connector{conn} }})
	h.waitFake("a socket mode connection", func(s *slacktest.Server) bool { return s.Connections() > 0 })
	return h
}

func (h *harness) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	h.t.Cleanup(cancel)
	return ctx
}

func (h *harness) waitFake(what string, cond func(*slacktest.Server) bool) {
	h.t.Helper()
	if err := h.fake.WaitFor(h.ctx(), cond); err != nil {
		h.t.Fatalf("waiting for %s: %v", what, err)
	}
}

// waitStore waits for cond, checked after every change of requests,
// approvals or the outbox (and at least every 100 ms: tasks).
func (h *harness) waitStore(what string, cond func() bool) {
	h.t.Helper()
	ctx := h.ctx()
	wake, unsub := h.bridge.DB.Subscribe(store.TopicOutbox)
	defer unsub()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			h.t.Fatalf("waiting for %s: %v", what, ctx.Err())
		case <-wake:
		case <-tick.C:
		}
	}
}

// mention sends "@bridge text" from user in the room's channel.
func (h *harness) mention(user, text string) {
	h.t.Helper()
	raw := "<@" + slacktest.BotUserID + "> " + text
	ts, err := h.fake.AddUserMessage(channel, user, raw, "")
	if err != nil {
		h.t.Fatal(err)
	}
	id, err := h.fake.PushEventsAPI(h.ctx(), slacktest.AppMentionEvent(fmt.Sprintf("Ev%06d", h.events.Add(1)), channel, user, raw, ts, ""))
	if err != nil {
		h.t.Fatal(err)
	}
	if _, err := h.fake.WaitAck(h.ctx(), id); err != nil {
		h.t.Fatal(err)
	}
}

var linkRE = regexp.MustCompile(`https?://[^\s>|]+/signin\?t=[A-Za-z0-9_-]+`)

// signInLink has user type "web" and returns the link the fake Slack's DM
// to them carries.
func (h *harness) signInLink(user string) string {
	h.t.Helper()
	before := len(h.dms(user))
	h.mention(user, "web")
	var link string
	h.waitFake("the sign-in DM to "+user, func(s *slacktest.Server) bool {
		dms := h.dms(user)
		if len(dms) > before {
			link = linkRE.FindString(dms[len(dms)-1])
		}
		return link != ""
	})
	return link
}

func (h *harness) dms(user string) []string {
	var out []string
	for _, m := range h.fake.Messages() {
		if m.Channel == "D"+user {
			out = append(out, m.Text+" "+string(m.BlocksJSON))
		}
	}
	return out
}

func (h *harness) svc() *requests.Service { return h.bridge.Requests() }

// pending lists the pending requests, in ID order.
func (h *harness) pending() []*requests.Request {
	list, err := h.svc().List(context.Background(), requests.Filter{State: requests.Pending})
	if err != nil {
		h.t.Fatal(err)
	}
	return list
}

// audited reports whether a record of action by actor is in the audit log.
func (h *harness) audited(action, actor string) bool {
	found := false
	_ = audit.Each(context.Background(), h.bridge.DB, audit.Query{}, func(r *audit.Record) error {
		if r.Action == action && r.Actor == actor && r.Surface == "web" {
			found = true
		}
		return nil
	})
	return found
}

// client is an HTTP client that does not follow redirects.
func client() *http.Client {
	return &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

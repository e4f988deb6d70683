package feishu_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/connectors/feishu"
	"github.com/roombridge/roombridge/connectors/feishu/feishutest"
	"github.com/roombridge/roombridge/requests"
)

// Ack budget of these tests, and how far past it an answer may come on a
// loaded 2-core machine under -race.
const (
	budget = 300 * time.Millisecond
	margin = 700 * time.Millisecond
)

// stuckCore holds the events that match at the core until release is
// closed (or the handler's time runs out).
func stuckCore(release <-chan struct{}, match func(chat.Event) bool) func(chat.Handler) chat.Handler {
	return func(core chat.Handler) chat.Handler {
		return chat.HandlerFunc(func(ctx context.Context, ev chat.Event) chat.Response {
			if match(ev) {
				select {
				case <-release:
				case <-ctx.Done():
				}
			}
			return core.Handle(ctx, ev)
		})
	}
}

// stuckHarness is a harness whose core holds the events that match until
// the returned release is called (at the latest when the test ends, before
// the harness stops: its workers drain).
func stuckHarness(t *testing.T, mode string, match func(chat.Event) bool, tweak func(*feishu.Options)) (*harness, func()) {
	ch := make(chan struct{})
	release := sync.OnceFunc(func() { close(ch) })
	h := newHarness(t, setup{mode: mode, handler: stuckCore(ch, match), conn: func(o *feishu.Options) {
		o.AckBudget = budget
		if tweak != nil {
			tweak(o)
		}
	}})
	t.Cleanup(release)
	return h, release
}

// redeliver delivers again, as Feishu re-pushes it, the event first
// delivered as body (in frame, over the long connection), and returns the
// answer's status and the new frame's message_id ("" in callback mode).
func (h *harness) redeliver(body []byte, frame string) (status int, again string) {
	h.t.Helper()
	if h.s.mode == feishu.ModeCallback {
		code, _ := h.post(body, time.Now())
		return code, ""
	}
	again, err := h.fake.Redeliver(h.ctx(), frame)
	if err != nil {
		h.t.Fatal(err)
	}
	h.waitFake("the answer to "+again, func() bool { return len(h.fake.Responses(again)) > 0 })
	return h.fake.Responses(again)[0].StatusCode, again
}

// redeliverUntilOK re-pushes the event first delivered as body (in frame)
// until it is answered 200, as Feishu does with an event answered with an
// error (a short budget runs out on a loaded machine too, or the queue is
// still full).
func (h *harness) redeliverUntilOK(body []byte, frame string) {
	h.t.Helper()
	h.waitUntil("a re-push answered 200", func() bool {
		code, again := h.redeliver(body, frame)
		frame = again
		return code == http.StatusOK
	})
}

// deliverUntilOK delivers body and, if it is answered with an error,
// pushes it again until it is answered 200.
func (h *harness) deliverUntilOK(body []byte) {
	h.t.Helper()
	if code, frame, _ := h.send(body); code != http.StatusOK {
		h.redeliverUntilOK(body, frame)
	}
}

func hasText(s string) func(chat.Event) bool {
	return func(ev chat.Event) bool { return strings.Contains(ev.Text, s) }
}

// A message the core has not stored when the ack budget runs out is
// answered with an error at the budget (an acknowledged event is never
// pushed again: a crash then would lose it), and that is logged; its
// handling goes on, and Feishu's re-push of the same event_id is answered
// 200 and makes no second request.
func TestStuckMessageIsAnsweredWithAnErrorAtTheBudget(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			h, release := stuckHarness(t, mode, hasText("stuck"), nil)
			id := h.eventID()
			body := h.askEventID(id, owner, "coder echo stuck")
			code, frame, took := h.send(body)
			if code == http.StatusOK {
				t.Fatal("the stuck message was acknowledged before the core stored it")
			}
			if took < budget || took > budget+margin {
				t.Errorf("answered after %s with a %s budget, want within %s of it", took, budget, margin)
			}
			if logs := h.logs.String(); !strings.Contains(logs, "ack budget ran out") ||
				!strings.Contains(logs, "event_id="+id+" kind=ask") {
				t.Errorf("the budget run out was not logged:\n%s", logs)
			}
			if n := len(h.requests()); n != 0 {
				t.Fatalf("%d requests while the core is stuck", n)
			}
			release()
			h.waitStore("the stuck message's request", func() bool { return len(h.requests()) == 1 })
			h.redeliverUntilOK(body, frame)
			h.waitStore("the request to end and its effects to be delivered", h.settled(1))
			id0 := h.requests()[0].ID.String()
			if ps := h.parents(id0); len(ps) != 1 {
				t.Errorf("%d root cards for %s, want 1", len(ps), id0)
			}
		})
	}
}

// A refusal that comes after the budget ran out is told once: the late
// answer tells it, and the re-push of the event (refused again) does not
// tell it a second time (no second send, not only one deduped by Feishu).
func TestLateAnswerIsToldOnce(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			h, release := stuckHarness(t, mode, hasText("stuck"), nil)
			const unbound = "oc_unbound"
			msg := h.fake.AddUserMessage(unbound, member, "@roombridge stuck", "")
			body := feishutest.MessageEvent{EventID: h.eventID(), Token: vtoken, AppID: h.appID, SenderOpenID: member,
				ChatID: unbound, MessageID: msg, Text: "@_user_1 stuck",
				Mentions: []feishutest.Mention{{Key: "@_user_1", OpenID: h.fake.BotOpenID()}}}.JSON()
			code, frame, _ := h.send(body)
			if code == http.StatusOK {
				t.Fatal("the stuck message was acknowledged before the core answered")
			}
			release()
			notices := func() []feishutest.Message {
				var out []feishutest.Message
				for _, m := range h.fake.Messages() {
					if m.ParentID == msg {
						out = append(out, m)
					}
				}
				return out
			}
			h.waitFake("the late refusal notice", func() bool { return len(notices()) > 0 })
			h.redeliverUntilOK(body, frame) // refused again: not told again
			h.bridge.Stop()                 // waits for the notices under way
			ns := notices()
			if len(ns) != 1 || !strings.Contains(texts(ns[0].Content), "not bound") {
				t.Fatalf("notices %+v: want one saying the chat is not bound", ns)
			}
			if n := h.fake.Sends(ns[0].UUID); n != 1 {
				t.Errorf("the notice was sent %d times, want once", n)
			}
		})
	}
}

// A click the core has not answered when the ack budget runs out is
// acknowledged within the budget (Feishu wants its answer within 3 s, and a
// re-push would only repeat the click) with a toast that it is under way,
// and logged; its decision lands once the core gets to it.
func TestStuckClickIsAcknowledgedAtTheBudget(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			h, release := stuckHarness(t, mode, func(ev chat.Event) bool { return ev.Kind == chat.Click }, nil)
			h.deliverUntilOK(h.askEvent(member, "coder echo decide me"))
			rs := h.requests()
			if len(rs) != 1 || rs[0].State != requests.Pending {
				t.Fatalf("requests %+v: want one pending", rs)
			}
			var dm feishutest.Message
			h.waitFake("the approval card in the approver's chat", func() bool {
				for _, m := range h.approvalCards(rs[0].ID.String()) {
					if m.ReceiveID == approver {
						dm = m
						return true
					}
				}
				return false
			})
			id := h.eventID()
			start := time.Now()
			ans := h.click(feishutest.CardAction{EventID: id, Token: vtoken, AppID: h.appID, OperatorOpenID: approver,
				Value: button(t, dm.Content, "approve"), MessageID: dm.ID, ChatID: dm.ChatID}.JSON())
			if took := time.Since(start); took > budget+margin {
				t.Errorf("the click answered after %s with a %s budget", took, budget)
			}
			if ans.Toast == nil || ans.Toast.Type != "info" {
				t.Errorf("the stuck click answered %+v, want the toast that it is under way", ans)
			}
			if logs := h.logs.String(); !strings.Contains(logs, "ack budget ran out") ||
				!strings.Contains(logs, "event_id="+id+" kind=click") {
				t.Errorf("the budget run out was not logged:\n%s", logs)
			}
			release()
			h.waitStore("the decision to land", func() bool {
				r, err := h.svc.Get(h.ctx(), rs[0].ID)
				return err == nil && r.State != requests.Pending
			})
		})
	}
}

// With the queue full (one event, held at the core), a further event is
// refused: answered with an error (not dropped, nor left to wait), so
// Feishu pushes it again; once there is room its re-push is handled.
func TestFullQueueAnswersWithAnError(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			h, release := stuckHarness(t, mode, hasText("stuck"), func(o *feishu.Options) { o.Workers, o.Queue = 1, 1 })
			if code, _, _ := h.send(h.askEvent(owner, "coder echo stuck")); code == http.StatusOK {
				t.Fatal("the stuck message was acknowledged before the core stored it")
			}
			id := h.eventID()
			body := h.askEventID(id, owner, "coder echo second")
			code, frame, _ := h.send(body)
			if code == http.StatusOK {
				t.Errorf("with the queue full: answered %d, want an error", code)
			}
			if logs := h.logs.String(); !strings.Contains(logs, "inbound queue full") || !strings.Contains(logs, "event_id="+id+" kind=ask queue=1") {
				t.Errorf("the full queue was not logged for %s:\n%s", id, logs)
			}
			release()
			h.waitStore("the stuck message's request", func() bool { return len(h.requests()) == 1 })
			h.redeliverUntilOK(body, frame) // the worker may not have finished the stuck event yet
			h.waitStore("both requests to end", h.settled(2))
		})
	}
}

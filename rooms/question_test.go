package rooms_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roombridge/roombridge/agents"
	"github.com/roombridge/roombridge/agents/demo"
	"github.com/roombridge/roombridge/agents/process"
	"github.com/roombridge/roombridge/approvals"
	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/clock"
	"github.com/roombridge/roombridge/config"
	"github.com/roombridge/roombridge/connectors/console"
	"github.com/roombridge/roombridge/delegation"
	"github.com/roombridge/roombridge/directory"
	"github.com/roombridge/roombridge/httpapi"
	"github.com/roombridge/roombridge/internal/syncbuf"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/rooms"
	"github.com/roombridge/roombridge/store/bolt"
	"github.com/roombridge/roombridge/threads"
	"github.com/roombridge/roombridge/ttl"
)

// The test binary doubles as the demo agent (`bridge demo-agent`) when
// ROOMS_TEST_HELPER=demo.
const helperEnv = "ROOMS_TEST_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "demo" {
		os.Exit(demo.Main(os.Stdin, os.Stdout))
	}
	os.Exit(m.Run())
}

// Users of the question tests' room: alice is an owner, bob a member,
// mallory neither.
const (
	alice   = "console:alice"
	bob     = "console:bob"
	mallory = "console:mallory"
	apiTok  = "test-token"
)

// syncBuffer is the console's output, read while the outbox writes it.
type syncBuffer = syncbuf.Buffer

// qenv is the whole core on a real bolt file with a fake clock: requests,
// threads delivered to a console room, approvals, delegation, the scheduler
// running the demo agent as coder and reviewer, the sweeper, the router and
// the HTTP API.
type qenv struct {
	t      *testing.T
	ctx    context.Context
	db     *bolt.DB
	clk    *clock.Fake
	svc    *requests.Service
	appr   *approvals.Service
	router *rooms.Router
	sweep  *ttl.Sweeper
	api    *httptest.Server
	out    *syncBuffer
	log    string
}

func newQEnv(t *testing.T) *qenv {
	t.Helper()
	dir := t.TempDir()
	db, err := bolt.Open(filepath.Join(dir, "bridge.db"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	log := slog.New(slog.DiscardHandler)
	clk := clock.NewFake(time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC))
	rs := []config.Room{{Name: "main", Console: true, Agents: []string{"coder", "reviewer"}, Members: []string{bob}}}
	svc := requests.NewService(db, clk, "acme", []string{alice})
	roomDir := directory.New(rs, []string{alice}, chat.Console)
	th := threads.New(roomDir)
	svc.AddObserver("threads", th.Observe)
	appr := approvals.New(approvals.Options{Requests: svc, Rooms: roomDir, TTL: time.Hour, Threads: th})
	svc.AddObserver(approvals.ObserverName, appr.Observe)
	del := delegation.New(delegation.Options{Requests: svc, Agents: []string{"coder", "reviewer"}, Workdir: dir, Threads: th})
	svc.AddObserver("delegation", del.Observe)
	sw, err := ttl.New(ttl.Options{Clock: clk}, appr, del)
	if err != nil {
		t.Fatal(err)
	}
	router := rooms.New(svc, appr, roomDir, nil, log)
	e := &qenv{t: t, ctx: ctx, db: db, clk: clk, svc: svc, appr: appr, router: router, sweep: sw,
		out: &syncBuffer{}, log: filepath.Join(dir, "demo.log")}
	e.api = httptest.NewServer(httpapi.New(httpapi.Options{Service: svc, Router: router, Token: apiTok, Log: log}))
	rt := func() *process.Runtime {
		return &process.Runtime{Command: []string{os.Args[0]}, Env: []string{helperEnv + "=demo",
			"GORACE=" + strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"), "DEMO_AGENT_LOG=" + e.log},
			Grace: 2 * time.Second, Workdir: t.TempDir()}
	}
	s := agents.NewScheduler(svc, th, log, agents.Agent{Name: "coder", Runtime: rt()}, agents.Agent{Name: "reviewer", Runtime: rt()})
	s.Approver, s.Delegator = appr, del
	deliver := threads.NewDeliverer(db, clk, log, console.New(strings.NewReader(""), e.out, "main", "alice"))
	var wg sync.WaitGroup
	for _, run := range []func(context.Context) error{s.Run, deliver.Run} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = run(ctx)
		}()
	}
	t.Cleanup(func() {
		e.api.Close()
		cancel()
		wg.Wait()
		del.Wait()
		_ = db.Close()
	})
	return e
}

// waitFor polls cond (store reads) with a short tick until it holds, for
// up to 30 s.
func (e *qenv) waitFor(what string, cond func() bool) {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			data, _ := os.ReadFile(e.log)
			e.t.Fatalf("not %s within 30s\nconsole:\n%s\ndemo log:\n%s", what, e.out, data)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (e *qenv) ask(agent, text string) *requests.Request {
	e.t.Helper()
	r, err := e.svc.Create(e.ctx, requests.Ask{Agent: agent, Room: "main", Surface: chat.Console, User: alice, Text: text})
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

func (e *qenv) get(id requests.ID) *requests.Request {
	e.t.Helper()
	r, err := e.svc.Get(e.ctx, id)
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

// question waits until one question is open in the thread of request
// thread, and returns it.
func (e *qenv) question(thread requests.ID) *approvals.Approval {
	e.t.Helper()
	var q *approvals.Approval
	e.waitFor("a question open in the thread of "+thread.String(), func() bool {
		qs, err := e.appr.OpenQuestions(e.ctx, thread)
		if err == nil && len(qs) == 1 {
			q = qs[0]
		}
		return q != nil
	})
	return q
}

// delegated returns the request delegated by ra.
func (e *qenv) delegated(ra requests.ID) *requests.Request {
	e.t.Helper()
	var rb *requests.Request
	e.waitFor("a request delegated by "+ra.String(), func() bool {
		all, err := e.svc.List(e.ctx, requests.Filter{})
		if err != nil {
			e.t.Fatal(err)
		}
		for _, r := range all {
			if r.DelegatedBy == ra {
				rb = r
			}
		}
		return rb != nil
	})
	return rb
}

func (e *qenv) waitDone(id requests.ID) *requests.Request {
	e.t.Helper()
	e.waitFor(id.String()+" done", func() bool { return e.get(id).State == requests.Done })
	return e.get(id)
}

// reply is a console reply in the thread of request thread.
func (e *qenv) reply(thread requests.ID, id, user, text string) chat.Response {
	return e.router.Handle(e.ctx, chat.Event{Kind: chat.Reply, Surface: chat.Console, ID: id, Channel: "main", User: user, Text: text,
		Thread: &chat.ThreadRef{Surface: chat.Console, Channel: "main", ID: thread.String()}})
}

func (e *qenv) audit() []audit.Record {
	e.t.Helper()
	recs, err := audit.List(e.ctx, e.db, audit.Query{}, 0)
	if err != nil {
		e.t.Fatal(err)
	}
	return recs
}

func countAudit(recs []audit.Record, action, actor string) int {
	n := 0
	for _, r := range recs {
		if r.Action == action && (actor == "" || r.Actor == actor) {
			n++
		}
	}
	return n
}

// post calls the HTTP API and decodes its JSON answer into out.
func (e *qenv) post(path, body string, out any) int {
	e.t.Helper()
	req, err := http.NewRequest(http.MethodPost, e.api.URL+path, strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+apiTok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		e.t.Fatal(err)
	}
	return resp.StatusCode
}

// TestDelegatedQuestionAnsweredInRootThread: coder (RA) asks reviewer (RB);
// RB's agent asks a person a question (ask_user). It shows in RB's thread
// and in RA's, labelled "reviewer asks: …", and in the room's inbox
// under RA; a reply by a non-member in RA's thread is refused and audited;
// a member's reply there answers it; RB's turn gets the answer, and RA gets
// RB's answer.
func TestDelegatedQuestionAnsweredInRootThread(t *testing.T) {
	e := newQEnv(t)
	ra := e.ask("coder", "ask reviewer question which region?")
	rb := e.delegated(ra.ID)
	q := e.question(ra.ID)
	if q.ID != rb.ID.String()+".q1" || q.RequestID != rb.ID || q.Root != ra.ID {
		t.Fatalf("question %+v", q)
	}
	label := "reviewer (" + rb.ID.Short() + ") asks: which region?"
	for _, thread := range []requests.ID{ra.ID, rb.ID} {
		line := "   " + thread.String() + " | " + label
		e.waitFor("the question shown in the thread of "+thread.String(), func() bool { return strings.Contains(e.out.String(), line) })
	}

	var inbox approvals.Inbox
	req, _ := http.NewRequest(http.MethodGet, e.api.URL+"/v1/rooms/main/inbox", nil)
	req.Header.Set("Authorization", "Bearer "+apiTok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.NewDecoder(resp.Body).Decode(&inbox); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if inbox.Count != 1 || inbox.Items[0].Approval.ID != q.ID || inbox.Items[0].Approval.Kind != approvals.KindQuestion ||
		inbox.Items[0].Approval.Root != ra.ID || inbox.Items[0].Asking.Label != "reviewer ("+rb.ID.Short()+")" {
		t.Fatalf("inbox %+v", inbox)
	}

	// mallory is no member: refused, audited once, the question stays open.
	r := e.reply(ra.ID, "ev1", mallory, "us-east")
	if !r.Error || !strings.Contains(r.Text, mallory+" may not answer "+q.ID) {
		t.Fatalf("mallory's reply: %+v", r)
	}
	recs := e.audit()
	if countAudit(recs, "answer_refused", mallory) != 1 || countAudit(recs, "reply_refused", mallory) != 0 {
		t.Fatalf("audit of the refusal: %+v", recs)
	}
	if qs, _ := e.appr.OpenQuestions(e.ctx, ra.ID); len(qs) != 1 {
		t.Fatal("a refused reply settled the question")
	}

	// bob's reply in RA's thread answers it.
	if r := e.reply(ra.ID, "ev2", bob, "eu-west"); r.Error || r.Text != q.ID+" answered; reviewer ("+rb.ID.Short()+") gets your answer" {
		t.Fatalf("bob's reply: %+v", r)
	}
	got := e.waitDone(ra.ID)
	if want := "got answer " + rb.ID.String() + ": answer: eu-west"; got.Result != want {
		t.Fatalf("RA's result %q, want %q", got.Result, want)
	}
	if want := "   " + rb.ID.String() + " | answer: eu-west"; !strings.Contains(e.out.String(), want) {
		t.Errorf("RB's thread lacks %q:\n%s", want, e.out)
	}
	recs = e.audit()
	if countAudit(recs, "question_answered", bob) != 1 || countAudit(recs, "reply", "") != 0 {
		t.Fatalf("audit: %d answers by bob, %d follow-ups", countAudit(recs, "question_answered", bob), countAudit(recs, "reply", ""))
	}
	if in, _ := e.appr.Inbox(e.ctx, "main"); in.Count != 0 {
		t.Fatalf("inbox after the answer: %+v", in)
	}
}

// TestQuestionAnsweredByAPIAndExpired: the API answers a question (an
// unknown ID is a 404, a second answer a 409 naming who answered and when);
// an unanswered question expires through the sweeper (fake clock), and the
// agent is told so — never an answer.
func TestQuestionAnsweredByAPIAndExpired(t *testing.T) {
	e := newQEnv(t)
	ra := e.ask("reviewer", "question pick a name?")
	q := e.question(ra.ID)
	var errBody map[string]string
	if c := e.post("/v1/questions/"+ra.ID.Short()+".q9/answer", `{"text":"blue"}`, &errBody); c != http.StatusNotFound ||
		!strings.Contains(errBody["error"], "no question "+ra.ID.String()+".q9") {
		t.Fatalf("unknown question: %d %v", c, errBody)
	}
	var answered approvals.Approval
	if c := e.post("/v1/questions/"+q.ID+"/answer", `{"text":"blue"}`, &answered); c != http.StatusOK ||
		answered.State != approvals.Answered || answered.Answer != "blue" || answered.DecidedBy != httpapi.APIActor {
		t.Fatalf("API answer: %d %+v", c, answered)
	}
	if c := e.post("/v1/questions/"+q.ID+"/answer", `{"text":"red"}`, &errBody); c != http.StatusConflict ||
		errBody["error"] != q.ID+" was already answered by "+httpapi.APIActor+" at 10:00 UTC" {
		t.Fatalf("second answer: %d %v", c, errBody)
	}
	if c := e.post("/v1/questions/"+q.ID+"/answer", `{"text":"  "}`, &errBody); c != http.StatusBadRequest {
		t.Fatalf("empty answer: %d %v", c, errBody)
	}
	if got := e.waitDone(ra.ID); got.Result != "answer: blue" {
		t.Fatalf("result %q", got.Result)
	}

	rc := e.ask("reviewer", "question still there?")
	q2 := e.question(rc.ID)
	e.clk.Advance(time.Hour)
	res, err := e.sweep.SweepOnce(e.ctx)
	if err != nil || res.Expired != 1 {
		t.Fatalf("sweep: %+v, %v", res, err)
	}
	if got := e.waitDone(rc.ID); got.Result != "answer: no answer: expired (nobody answered in time)" {
		t.Fatalf("result after expiry %q", got.Result)
	}
	recs := e.audit()
	n := 0
	for _, r := range recs {
		if r.RequestID == rc.ID.String() && r.Action == "question_answered" {
			n++
		}
	}
	if n != 0 {
		t.Fatal("an expiry was recorded as an answer")
	}
	if c := e.post("/v1/questions/"+q2.ID+"/answer", `{"text":"late"}`, &errBody); c != http.StatusConflict ||
		!strings.Contains(errBody["error"], "expired at") {
		t.Fatalf("answer after expiry: %d %v", c, errBody)
	}
	if line := fmt.Sprintf("   %s | status: expired after 1 h unanswered — the agent was told: no answer", rc.ID); !waitOut(e, line) {
		t.Errorf("the question's copy does not say it expired:\n%s", e.out)
	}
}

// waitOut waits (up to 10 s) until the console shows line.
func waitOut(e *qenv, line string) bool {
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(e.out.String(), line) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}

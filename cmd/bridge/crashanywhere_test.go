package main

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/roombridge/roombridge/connectors/slack/slacktest"
	"github.com/roombridge/roombridge/internal/failpoint"
	"github.com/roombridge/roombridge/requests"
)

// Environment variables of TestCrashAnywhere.
const (
	// crashSeedEnv sets the seed (a failing run logs its seed).
	crashSeedEnv = "ROOMBRIDGE_CRASH_SEED"
	// crashKillsEnv sets how many times the bridge is killed (default
	// crashKillsCI); the workload grows with it (one round of jobs per 10
	// kills).
	crashKillsEnv = "ROOMBRIDGE_CRASH_KILLS"
	crashKillsCI  = 10
)

// crashSecret is the fake Slack's signing secret in TestCrashAnywhere.
const crashSecret = "crash-signing-secret"

// crashFailpoints are the failpoints a life may arm (internal/failpoint).
var crashFailpoints = []string{failpoint.TurnStarted, failpoint.TaskEnded, failpoint.RequestEnded}

// crashKind is what a job of the crash workload does.
type crashKind int

const (
	crashOwner          crashKind = iota // an owner's ask: runs at once (with a tool: a safe point to resume after)
	crashApprove                         // a member's ask, approved by a click on its card
	crashDeny                            // a member's ask, denied by a click on its card
	crashExpire                          // a member's ask in the quick room: nobody decides, the sweeper expires it
	crashCancel                          // an owner's long ask, cancelled through the API once it runs
	crashRetry                           // an owner's ask that fails, retried through the API
	crashDelegate                        // A asks B; B starts a background task and yields; its end wakes B; B's answer wakes A
	crashDelegateCancel                  // the same, A cancelled while B waits on its task (B and the task stop), then A retried
	crashStream                          // an owner's ask whose answer is streamed over 4 s (a live message, often killed mid-stream)
)

var crashKindNames = [...]string{"owner", "approve", "deny", "expire", "cancel", "retry", "delegate", "delegate+cancel+retry", "stream"}

func (k crashKind) String() string { return crashKindNames[k] }

// crashJob is one piece of the workload, driven idempotently: each pass
// reads the store (through the API) and does the next step if it is not
// done yet, so a pass after a restart picks up where the kill left it.
type crashJob struct {
	kind    crashKind
	tag     string // unique in the run, in the ask: the request is found by its ask
	channel string
	ask     string // the request's ask, without the agent's name
	event   []byte // the app_mention, built once: a re-send is Slack's retry (same event_id)
	gate    string // crashDelegateCancel: B's task waits for this file
	release int    // the life from which it is sent

	acked bool   // the bridge acknowledged event (200) and the request was not seen yet
	click []byte // the card click, built once (one trigger_id: re-sent, it is Slack's retry)
}

// crashRun is the state of one TestCrashAnywhere run.
type crashRun struct {
	// interrupted counts the live messages a restart closed (checkStreamed).
	interrupted int
	t           *testing.T
	rng         *rand.Rand
	fake        *slacktest.Server
	data        string
	agentLog    string
	jobs        []*crashJob
	base        string
	tok         string

	// Figures, logged at the end.
	sent, resent, lostAfterAck, clicks, cancels, retries int
}

// TestCrashAnywhere (issue 9): a scripted workload on a fake Slack (owner
// and member asks, approvals approved, denied and expired, cancels, a retry,
// delegations whose delegate runs a background task, one cancelled and
// retried) runs while the real bridge is SIGKILLed at random points — after
// a random delay, or at a failpoint's Nth hit — and started again on the same
// data dir, many times. The workload is driven idempotently across restarts:
// each pass reads the store and does what is not done yet; platform events
// are sent again after each restart (deduped by their event ID). At each
// kill the store is checked offline: request IDs consecutive, each request's
// audit trail an unbroken chain ending in its state. After a last clean
// start lets everything settle (waits on conditions, with deadlines): every
// request is terminal and where its job puts it, none lost or doubled; no
// thread parent was posted twice in the fake Slack; every background task's
// result reached the request that started it (a turn's input, or recorded
// as arriving after that request ended); the audit log has exactly one
// record per transition.
//
// Events are sent again after a kill even when the bridge acknowledged
// them (200), as Slack does only when it got no answer: an acknowledged
// event that is not stored after the kill fails the test (the connector
// acknowledges once the core stored it), and the rest goes on. A turn cut
// after one of its calls (ask_agent, background_run) is resumed with its
// ask again, and the demo agent, which keeps no memory across processes,
// makes the call again: the bridge must answer it from the cut turn's
// record, not delegate (or start a task) twice.
//
// ROOMBRIDGE_CRASH_SEED sets the seed (logged: a failing run is replayed
// with it; the kill schedule and the workload follow from it, the timing
// of the processes does not, so a replay hits the same points only
// roughly). ROOMBRIDGE_CRASH_KILLS sets the number of kills (default 10;
// the workload grows with it).
func TestCrashAnywhere(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(crashSeedEnv); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("%s=%q: %v", crashSeedEnv, s, err)
		}
	}
	kills := crashKillsCI
	if s := os.Getenv(crashKillsEnv); s != "" {
		var err error
		if kills, err = strconv.Atoi(s); err != nil || kills < 1 {
			t.Fatalf("%s=%q: want a number from 1", crashKillsEnv, s)
		}
	}
	t.Logf("seed %d (replay: %s=%d), %d kills", seed, crashSeedEnv, seed, kills)
	started := time.Now()

	fake := slacktest.NewServer()
	t.Cleanup(fake.Close)
	dir := t.TempDir()
	c := &crashRun{t: t, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), fake: fake,
		data: filepath.Join(dir, "data"), agentLog: filepath.Join(dir, "agents.log")}
	cfg := filepath.Join(dir, "bridge.yaml")
	writeFile(t, cfg, crashConfig(c.data, fake.APIURL()))
	bg, gated := filepath.Join(dir, "bg.sh"), filepath.Join(dir, "gated.sh")
	writeFile(t, bg, "sleep 0.3\necho \"$1-ok\"\n")
	writeFile(t, gated, "while [ ! -e \"$1\" ]; do sleep 0.05; done\necho \"$2-ok\"\n")
	c.jobs = c.workload(max(1, kills/10), kills, dir, bg, gated)
	t.Cleanup(func() { // no task left waiting
		for _, j := range c.jobs {
			if j.gate != "" {
				_ = os.WriteFile(j.gate, nil, 0o644)
			}
		}
	})

	// The kill schedule, drawn before anything that depends on timing
	// draws from the seeded source: each life is killed after a random
	// delay, or (half of them) at a random failpoint's first, second or
	// third hit, if it comes within a second more.
	type crashLife struct {
		failpoint string
		delay     time.Duration
	}
	lives := make([]crashLife, kills)
	for i := range lives {
		if c.rng.IntN(2) == 0 {
			lives[i].failpoint = fmt.Sprintf("%s@%d", crashFailpoints[c.rng.IntN(len(crashFailpoints))], 1+c.rng.IntN(3))
			lives[i].delay = time.Second
		}
		lives[i].delay += time.Duration(c.rng.Int64N(int64(2500 * time.Millisecond)))
	}

	env := []string{"DEMO_AGENT_LOG=" + c.agentLog}
	fired := map[string]int{}
	for life, l := range lives {
		lifeEnv, fp, delay := env, l.failpoint, l.delay
		if fp != "" {
			lifeEnv = append(env[:len(env):len(env)], failpoint.EnvVar+"="+fp)
		}
		p := c.start(lifeEnv)
		how := c.live(p, life, delay)
		<-p.done
		if ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Fatalf("life %d: the bridge ended by itself (%v), not killed:\n%s", life, p.cmd.ProcessState, p.Stderr())
		}
		if fp != "" && strings.Contains(p.Stderr(), "failpoint "+fp+": killing") {
			how = "at failpoint " + fp
			fired[fp[:strings.IndexByte(fp, '@')]]++
		}
		n := c.checkStore(fmt.Sprintf("after kill %d (%s)", life+1, how))
		t.Logf("kill %d: %s; %d requests in the store", life+1, how, n)
	}

	// The last start: no more kills; everything settles.
	p := c.start(env)
	settleStart := time.Now()
	deadline := settleStart.Add(90*time.Second + time.Duration(len(c.jobs))*time.Second)
	first := true
	for {
		c.pass(kills, first)
		first = false
		if c.settled() {
			break
		}
		if time.Now().After(deadline) {
			c.dump()
			t.Fatalf("not settled %v after the last start", time.Since(settleStart).Round(time.Second))
		}
		select {
		case <-p.done:
			t.Fatalf("the bridge exited in its last life:\n%s", p.Stderr())
		case <-time.After(50 * time.Millisecond): // a polling tick
		}
	}
	settle := time.Since(settleStart)
	stopBridge(t, p, syscall.SIGTERM)
	if code := waitExit(t, p, 30*time.Second); code != 0 {
		t.Fatalf("the last life stopped with exit %d:\n%s", code, p.Stderr())
	}
	n := c.checkStore("at the end")
	c.checkEnd()
	t.Logf("live messages closed as interrupted by a restart: %d", c.interrupted)
	t.Logf("%d kills (failpoints fired: %v), %d jobs, %d requests; events sent %d, re-sent %d (Slack's retries), "+
		"acknowledged but lost by a kill %d; clicks %d, cancels %d, retries %d; settled %v after the last start; %v in all",
		kills, fired, len(c.jobs), n, c.sent, c.resent, c.lostAfterAck, c.clicks, c.cancels, c.retries,
		settle.Round(time.Millisecond), time.Since(started).Round(time.Millisecond))
}

// crashConfig: six rooms on six Slack channels (posts into one channel are
// paced at one a second), each with both agents, member U1 and approver
// UOWNER (an owner); the quick room's approvals expire after a second, and
// the sweeper comes every second.
func crashConfig(data, apiURL string) string {
	var rooms strings.Builder
	for i := range 6 {
		fmt.Fprintf(&rooms, "  - {name: r%d, slack_channel: C%d, agents: [coder, reviewer], members: [slack:U1], approvers: [slack:UOWNER]}\n", i, i)
	}
	return fmt.Sprintf(`owner: acme
owners: [slack:UOWNER]
data_dir: %s
http: {addr: "127.0.0.1:0"}
slack: {mode: events, bot_token: %s, app_token: %s, signing_secret: %s, api_url: %q}
approvals: {ttl: 1h, sweep: "@every 1s"}
rooms:
%s  - {name: quick, slack_channel: CQ, agents: [coder], members: [slack:U1], approval_ttl: 1s}
agents:
  coder: {kind: exec, command: [%q, demo-agent]}
  reviewer: {kind: exec, command: [%q, demo-agent]}
`, data, slacktest.DefaultBotToken, slacktest.DefaultAppToken, crashSecret, apiURL, rooms.String(), bridgeBin, bridgeBin)
}

// workload builds rounds rounds of jobs in a seeded random order, released
// over the first two thirds of the lives.
func (c *crashRun) workload(rounds, lives int, dir, bg, gated string) []*crashJob {
	kinds := []crashKind{crashOwner, crashOwner, crashOwner, crashOwner, crashApprove, crashApprove, crashDeny,
		crashExpire, crashCancel, crashRetry, crashDelegate, crashDelegate, crashDelegateCancel, crashStream, crashStream}
	var jobs []*crashJob
	for range rounds {
		for _, k := range kinds {
			jobs = append(jobs, &crashJob{kind: k, tag: fmt.Sprintf("j%d", len(jobs)+1)})
		}
	}
	c.rng.Shuffle(len(jobs), func(i, j int) { jobs[i], jobs[j] = jobs[j], jobs[i] })
	spread := max(1, lives*2/3)
	for i, j := range jobs {
		j.release = i * spread / len(jobs)
		j.channel = fmt.Sprintf("C%d", i%6)
		user := "UOWNER"
		switch j.kind {
		case crashOwner:
			j.ask = fmt.Sprintf("say %s; tool t%s 150ms; echo %s-done", j.tag, j.tag, j.tag)
		case crashApprove, crashDeny:
			user, j.ask = "U1", fmt.Sprintf("echo %s-done", j.tag)
		case crashExpire:
			user, j.channel, j.ask = "U1", "CQ", fmt.Sprintf("echo %s-done", j.tag)
		case crashCancel:
			j.ask = fmt.Sprintf("say %s; sleep 60s; echo %s-never", j.tag, j.tag)
		case crashRetry:
			j.ask = fmt.Sprintf("fail %s-boom", j.tag)
		case crashStream:
			j.ask = fmt.Sprintf("stream 4s %s; tool t%s 150ms", streamedAnswer(j.tag), j.tag)
		case crashDelegate:
			j.ask = fmt.Sprintf("ask reviewer background %s sh %s %s| yield on %s", j.tag, bg, j.tag, j.tag)
		case crashDelegateCancel:
			j.gate = filepath.Join(dir, "gate-"+j.tag)
			j.ask = fmt.Sprintf("ask reviewer background %s sh %s %s %s| yield on %s", j.tag, gated, j.gate, j.tag, j.tag)
		}
		raw := "<@" + slacktest.BotUserID + "> coder " + j.ask
		ts, err := c.fake.AddUserMessage(j.channel, user, raw, "")
		if err != nil {
			c.t.Fatal(err)
		}
		j.event = slacktest.AppMentionEvent("Ev"+strings.ToUpper(j.tag), j.channel, user, raw, ts, "")
	}
	return jobs
}

// start starts a life of the bridge and waits for its API (which a
// failpoint may beat: then the life is over already).
func (c *crashRun) start(env []string) *proc {
	c.t.Helper()
	if err := os.Remove(filepath.Join(c.data, addrFile)); err != nil && !os.IsNotExist(err) {
		c.t.Fatal(err)
	}
	p := startBridge(c.t, filepath.Dir(c.data), env, "run", "--config", filepath.Join(filepath.Dir(c.data), "bridge.yaml"))
	c.base, c.tok, _ = p.tryAPI(c.data)
	return p
}

// live drives the workload until the bridge dies at a failpoint or delay
// has passed (then it is killed), and says how it ended.
func (c *crashRun) live(p *proc, life int, delay time.Duration) string {
	if c.base == "" {
		return "at start"
	}
	kill := time.NewTimer(delay)
	defer kill.Stop()
	for first := true; ; first = false {
		c.pass(life, first)
		select {
		case <-p.done:
			return "died" // at its failpoint (or by itself: the caller fails)
		case <-kill.C:
			_ = p.cmd.Process.Signal(syscall.SIGKILL)
			return fmt.Sprintf("SIGKILL after %v", delay.Round(time.Millisecond))
		case <-time.After(50 * time.Millisecond): // a polling tick
		}
	}
}

// list reads all requests through the API.
func (c *crashRun) list() ([]*requests.Request, bool) {
	var out struct {
		Requests []*requests.Request `json:"requests"`
	}
	code, err := apiCall(http.MethodGet, c.base+"/v1/requests", c.tok, nil, &out)
	return out.Requests, err == nil && code == http.StatusOK
}

// pass does the next step of every released job.
func (c *crashRun) pass(life int, first bool) {
	reqs, ok := c.list()
	if !ok {
		return
	}
	for _, j := range c.jobs {
		if j.release <= life {
			c.drive(j, reqs, first)
		}
	}
}

// drive does job j's next step; first: the first pass of a life.
func (c *crashRun) drive(j *crashJob, reqs []*requests.Request, first bool) {
	root := askOf(reqs, j.ask)
	if root == nil {
		if first && j.acked {
			// Acknowledged before the kill, gone after it: Slack would
			// not send it again.
			c.lostAfterAck++
			c.t.Errorf("%s (%s): its event %s was acknowledged (200), then lost by a kill (the connector acknowledges "+
				"only once the core has stored an event)", j.tag, j.kind, "Ev"+strings.ToUpper(j.tag))
		}
		code := c.slackPost("/slack/events", "application/json", j.event)
		c.sent++
		j.acked = code == http.StatusOK
		return
	}
	j.acked = false
	if first && c.rng.IntN(3) == 0 {
		c.slackPost("/slack/events", "application/json", j.event) // Slack's retry: deduped
		c.resent++
	}
	switch j.kind {
	case crashApprove, crashDeny:
		if root.State == requests.Pending {
			c.clickCard(j, root)
		}
	case crashCancel:
		if root.State == requests.Running && !root.CancelRequested {
			c.post("/v1/requests/" + root.ID.String() + "/cancel")
			c.cancels++
		}
	case crashRetry:
		if root.State.Terminal() {
			c.retry(reqs, root)
		}
	case crashDelegateCancel:
		if root.State.Terminal() {
			if err := os.WriteFile(j.gate, nil, 0o644); err != nil {
				c.t.Fatal(err)
			}
			c.retry(reqs, root)
			return
		}
		rbs := delegatedBy(reqs, root.ID)
		if root.State == requests.Running && !root.CancelRequested && len(rbs) > 0 &&
			rbs[0].State == requests.Running && strings.HasPrefix(rbs[0].Activity, "waiting") {
			c.post("/v1/requests/" + root.ID.String() + "/cancel")
			c.cancels++
		}
	}
}

// retry retries ended request r through the API unless it was (a check
// and an act, safe as the driver is the only one to retry), and approves
// the retry (the API's holder is no owner: its asks wait for approval).
func (c *crashRun) retry(reqs []*requests.Request, r *requests.Request) {
	switch again := retryOf(reqs, r.ID); {
	case again == nil:
		c.post("/v1/requests/" + r.ID.String() + "/retry")
		c.retries++
	case again.State == requests.Pending:
		c.post("/v1/approvals/" + again.ID.String() + "/approve")
	}
}

// clickCard clicks the button of request r's approval card (once it is
// posted) that job j's kind asks for.
func (c *crashRun) clickCard(j *crashJob, r *requests.Request) {
	if j.click == nil {
		rx := regexp.MustCompile(`"block_id":"(approval:` + regexp.QuoteMeta(r.ID.String()) + `:\d+)"`)
		for _, m := range c.fake.Messages() {
			if sub := rx.FindSubmatch(m.BlocksJSON); m.Channel == j.channel && sub != nil {
				action := "approve"
				if j.kind == crashDeny {
					action = "deny"
				}
				j.click = slacktest.BlockActionsPayload("UOWNER", m.Channel, m.TS, m.ThreadTS, string(sub[1]), action, r.ID.String())
				break
			}
		}
		if j.click == nil {
			return // the card is not posted yet
		}
	}
	c.slackPost("/slack/interactivity", "application/x-www-form-urlencoded",
		[]byte(slacktest.InteractivityForm(j.click).Encode()))
	c.clicks++
}

// slackPost sends a signed webhook to the bridge and returns its status (0
// if the bridge did not answer).
func (c *crashRun) slackPost(path, contentType string, body []byte) int {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+path, bytes.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Content-Type", contentType)
	slacktest.SignRequest(req, body, crashSecret, time.Now())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// post POSTs an API call (its answer does not matter: the next pass reads
// the store).
func (c *crashRun) post(path string) {
	_, _ = apiCall(http.MethodPost, c.base+path, c.tok, nil, nil)
}

// settled: every job has got where it goes, every request is terminal, the
// outbox is empty.
func (c *crashRun) settled() bool {
	reqs, ok := c.list()
	if !ok {
		return false
	}
	for _, r := range reqs {
		if !r.State.Terminal() {
			return false
		}
	}
	for _, j := range c.jobs {
		root := askOf(reqs, j.ask)
		if root == nil {
			return false
		}
		if (j.kind == crashRetry || j.kind == crashDelegateCancel) && retryOf(reqs, root.ID) == nil {
			return false
		}
	}
	return scrapeMetrics(c.t, c.base)[`roombridge_outbox_depth{surface="slack"}`] == 0
}

// dump logs every job's requests (when the run did not settle).
func (c *crashRun) dump() {
	reqs, _ := c.list()
	for _, r := range reqs {
		c.t.Logf("%s %s %s cancel=%v activity=%q ask=%q retry_of=%s delegated_by=%s result=%q", r.ID, r.Agent, r.State,
			r.CancelRequested, r.Activity, r.Ask, r.RetryOf, r.DelegatedBy, r.Result)
	}
	c.t.Logf("outbox depth: %v", scrapeMetrics(c.t, c.base)[`roombridge_outbox_depth{surface="slack"}`])
}

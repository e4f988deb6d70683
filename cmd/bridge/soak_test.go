package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	bbolt "go.etcd.io/bbolt"

	"github.com/roombridge/roombridge/connectors/slack/slacktest"
	"github.com/roombridge/roombridge/internal/testbin"
	"github.com/roombridge/roombridge/requests"
)

// soakEnv sets TestSoak's duration (a Go duration; default soakCI).
const (
	soakEnv = "ROOMBRIDGE_SOAK"
	soakCI  = 60 * time.Second
)

// Tolerances of TestSoak: how much the mean of the last quarter of the
// samples may exceed the mean of the second quarter (the first is warm-up).
// Traffic is closed-loop (one request in flight per client), so a bridge
// that frees what each request used is flat: what moves is the work in
// flight at the sampling instant. Each agent turn in flight holds a few
// goroutines (its process' pipes and calls) and fds (stdin, stdout,
// stderr; a background task its output pipe), each outbox delivery one
// goroutine: the absolute slacks cover two turns and a task more than the
// second quarter's mean. Memory: the anonymous RSS (RssAnon: the Go
// runtime's heap, stacks and metadata; VmRSS also counts the bolt file's
// mapped pages, which grow with the data written, and is reported, not
// checked) and the Go heap in use may grow 30% (plus 4 MiB for the heap:
// the garbage collector's target follows the live heap, and a sample may
// come just before a collection), while a leak of a few KiB a request over
// hundreds of requests does not fit. Threads are created for blocking
// syscalls and never end, so they may only creep a little.
const (
	soakGoroutineRatio = 1.2
	soakGoroutineSlack = 10
	soakFDSlack        = 10
	soakThreadSlack    = 10
	soakMemRatio       = 1.3
	soakHeapSlack      = 4 << 20
	soakOutboxSlack    = 20
	// soakStorePerRequest bounds the bolt file's bytes per request made
	// (a request, its audit trail, its thread's refs and the outbox
	// entries of its effects, deleted once sent, plus bolt's free pages and
	// its doubling as it grows).
	soakStorePerRequest = 64 << 10
	// soakKeysPerRequest bounds any bucket's keys per request in the store
	// (the audit log keeps about five records a request).
	soakKeysPerRequest = 12
	// soakInFlight bounds the keys of soakInFlightBuckets once the traffic
	// has stopped (a graceful stop leaves at most the turns in flight
	// running, to be resumed).
	soakInFlight = 5
)

// soakInFlightBuckets are the store's buckets that hold work in flight
// only: queues, markers and indexes of open things, undelivered effects.
// Their keys must not pile up with the requests made.
var soakInFlightBuckets = []string{"agent_calls", "agent_inbox", "agent_parked", "agent_queue", "agent_running", "agent_turns", "agent_woken",
	"approvals_inbox", "approvals_open", "delegation_open", "delegation_tasks_listed", "delegation_tasks_open",
	"mcp_tokens", "outbox", "outbox_coalesce", "thread_waiting"}

// soakSample is one sample of the bridge process.
type soakSample struct {
	at         time.Duration
	rssKiB     float64 // VmRSS
	anonKiB    float64 // RssAnon
	heap       float64 // go_memstats_heap_inuse_bytes
	fds        float64
	threads    float64
	goroutines float64
	outbox     float64 // effects not yet delivered, all surfaces
	dbBytes    int64
	requests   int // asks made so far (not counting delegated requests)
}

// TestSoak sends steady traffic through the console (stdin) and a fake
// Slack (Socket Mode) for ROOMBRIDGE_SOAK (default a minute): owner asks,
// background tasks and delegations on the console; owner asks and member
// asks approved or denied by a click on their card on Slack, some events
// delivered twice. Every second it samples the bridge's RSS (all, and
// anonymous), open fds and threads (/proc/<pid>/status, /proc/<pid>/fd),
// goroutines, Go heap and outbox depth (GET /metrics) and the size of its
// store. At the end the last quarter's means must stay within the
// tolerances above of the second quarter's, the store file within
// soakStorePerRequest bytes a request, and, counted once the bridge has
// stopped, no bucket of the store beyond soakKeysPerRequest keys a request,
// and those that hold work in flight only (soakInFlightBuckets) nearly
// empty.
//
// The bridge (and its demo agents) are a build without the race detector:
// the race runtime's own memory grows with the goroutines and
// synchronization a long run creates (tens of MiB in half an hour, with a
// flat Go heap), which a leak check must not count; the other tests run
// the race build.
func TestSoak(t *testing.T) {
	dur := soakCI
	if s := os.Getenv(soakEnv); s != "" {
		var err error
		if dur, err = time.ParseDuration(s); err != nil || dur < 8*time.Second {
			t.Fatalf("%s=%q: want a duration of 8s or more", soakEnv, s)
		}
	}
	bin, cleanup, err := testbin.Build()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cleanup)
	fake := slacktest.NewServer()
	t.Cleanup(fake.Close)
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	writeFile(t, filepath.Join(dir, "bridge.yaml"), fmt.Sprintf(`owner: acme
owners: [console:alice, slack:UOWNER]
data_dir: %s
http: {addr: "127.0.0.1:0"}
console: {user: alice}
slack: {mode: socket, bot_token: %s, app_token: %s, signing_secret: soak-secret, api_url: %q}
rooms:
  - {name: console, console: true, agents: [coder, reviewer]}
  - {name: s1, slack_channel: C1, agents: [coder], members: [slack:U1], approvers: [slack:UOWNER]}
  - {name: s2, slack_channel: C2, agents: [coder], members: [slack:U1], approvers: [slack:UOWNER]}
agents:
  coder: {kind: exec, command: [%q, demo-agent]}
  reviewer: {kind: exec, command: [%q, demo-agent]}
`, data, slacktest.DefaultBotToken, slacktest.DefaultAppToken, fake.APIURL(), bin, bin))
	p := startBinary(t, bin, dir, nil, "run", "--config", filepath.Join(dir, "bridge.yaml"))
	base, tok := p.api(data)
	ctx, cancel := context.WithTimeout(context.Background(), dur+time.Minute)
	defer cancel()
	if err := fake.WaitFor(ctx, func(s *slacktest.Server) bool { return s.Connections() > 0 }); err != nil {
		t.Fatalf("waiting for Socket Mode: %v", err)
	}

	s := &soak{t: t, ctx: ctx, p: p, fake: fake, base: base, tok: tok}
	var samples []soakSample
	start := time.Now()
	next := start
	for time.Since(start) < dur {
		s.console()
		s.slack()
		if time.Now().After(next) {
			samples = append(samples, s.sample(p.cmd.Process.Pid, filepath.Join(data, "bridge.db"), time.Since(start)))
			if n := len(samples); n%60 == 0 {
				t.Logf("sample %d: %s", n, samples[n-1])
			}
			next = next.Add(time.Second)
		}
		select {
		case <-p.done:
			t.Fatalf("the bridge exited:\n%s", p.Stderr())
		case <-time.After(20 * time.Millisecond): // a polling tick
		}
	}
	stopBridge(t, p, syscall.SIGTERM)
	if code := waitExit(t, p, 30*time.Second); code != 0 {
		t.Fatalf("the bridge stopped with exit %d:\n%s", code, p.Stderr())
	}

	census := storeCensus(t, filepath.Join(data, "bridge.db"))
	var names []string
	for name := range census {
		names = append(names, name)
	}
	slices.Sort(names)
	var line strings.Builder
	for _, name := range names {
		fmt.Fprintf(&line, " %s=%d", name, census[name])
	}
	t.Logf("store census (keys per bucket) after %d asks:%s", s.cn+s.sn, line.String())
	for _, name := range names {
		switch n := census[name]; {
		case slices.Contains(soakInFlightBuckets, name) && n > soakInFlight:
			t.Errorf("store bucket %s holds %d keys after the traffic stopped, want at most %d (it holds work in flight only)", name, n, soakInFlight)
		case float64(n) > soakKeysPerRequest*float64(max(census["requests"], 1)):
			t.Errorf("store bucket %s holds %d keys for %d requests, over %d a request", name, n, census["requests"], soakKeysPerRequest)
		}
	}

	q := len(samples) / 4
	second, last := samples[q:2*q], samples[len(samples)-q:]
	t.Logf("%v: %d console and %d Slack asks done (%d approved, %d denied, %d events sent twice); %d samples",
		dur, s.consoleDone, s.slackDone, s.approved, s.denied, s.redelivered, len(samples))
	t.Logf("first sample:  %s", samples[0])
	t.Logf("second quarter mean: %s", mean(second))
	t.Logf("last quarter mean:   %s", mean(last))
	t.Logf("last sample:   %s", samples[len(samples)-1])
	m2, m4 := mean(second), mean(last)
	check := func(what string, got, limit float64) {
		t.Helper()
		if got > limit {
			t.Errorf("%s grew: last quarter's mean %.1f, over %.1f (second quarter's mean %s)", what, got, limit, m2)
		}
	}
	check("goroutines", m4.goroutines, m2.goroutines*soakGoroutineRatio+soakGoroutineSlack)
	check("open fds", m4.fds, m2.fds+soakFDSlack)
	check("threads", m4.threads, m2.threads+soakThreadSlack)
	check("anonymous RSS (KiB)", m4.anonKiB, m2.anonKiB*soakMemRatio)
	check("Go heap in use (bytes)", m4.heap, m2.heap*soakMemRatio+soakHeapSlack)
	check("outbox depth", m4.outbox, m2.outbox+soakOutboxSlack)
	end := samples[len(samples)-1]
	check("store size per request (bytes)", float64(end.dbBytes)/float64(max(end.requests, 1)), soakStorePerRequest)
	if s.consoleDone < 10 || s.slackDone < 2 {
		t.Errorf("too little traffic went through: %d console and %d Slack asks", s.consoleDone, s.slackDone)
	}
}

func (s soakSample) String() string {
	return fmt.Sprintf("at %v: RSS %.0f KiB (anonymous %.0f), Go heap %.1f MiB, %.0f fds, %.0f threads, %.0f goroutines, outbox %.0f, store %d KiB, %d asks",
		s.at.Round(time.Second), s.rssKiB, s.anonKiB, s.heap/(1<<20), s.fds, s.threads, s.goroutines, s.outbox, s.dbBytes>>10, s.requests)
}

// mean averages samples (at, dbBytes and requests: the last one's).
func mean(ss []soakSample) soakSample {
	var m soakSample
	for _, s := range ss {
		m.rssKiB += s.rssKiB / float64(len(ss))
		m.anonKiB += s.anonKiB / float64(len(ss))
		m.heap += s.heap / float64(len(ss))
		m.fds += s.fds / float64(len(ss))
		m.threads += s.threads / float64(len(ss))
		m.goroutines += s.goroutines / float64(len(ss))
		m.outbox += s.outbox / float64(len(ss))
	}
	last := ss[len(ss)-1]
	m.at, m.dbBytes, m.requests = last.at, last.dbBytes, last.requests
	return m
}

// soak is TestSoak's traffic: a console client and a Slack client, each
// with one ask in flight, driven a step per tick.
type soak struct {
	t         *testing.T
	ctx       context.Context
	p         *proc
	fake      *slacktest.Server
	base, tok string

	// The console client.
	cn       int
	cID      requests.ID
	cFrom    int    // stdout lines before the ask
	cWant    string // the final answer's start
	cWaiting bool

	// The Slack client.
	sn       int
	sTag     string
	sID      requests.ID
	sMember  bool
	sClicked bool
	sNext    time.Time
	sScanned int

	consoleDone, slackDone, approved, denied, redelivered int
}

var askLine = regexp.MustCompile(`^\* (R\d{8}-\d+) → \w+ \((\w+)\)`)

// console: the next console ask once the last has ended: mostly quick
// asks, every fifth a background task, every tenth a delegation.
func (s *soak) console() {
	t := s.t
	switch {
	case !s.cWaiting:
		s.cn++
		s.cFrom = len(s.p.Lines())
		switch {
		case s.cn%10 == 0:
			s.p.send(fmt.Sprintf("@coder ask reviewer echo d%d", s.cn))
			s.cWant = "got answer "
		case s.cn%5 == 0:
			s.p.send(fmt.Sprintf("@coder background b%d true; yield on b%d", s.cn, s.cn))
			s.cWant = "got task_result "
		default:
			s.p.send(fmt.Sprintf("@coder say s%d; echo c%d", s.cn, s.cn))
			s.cWant = fmt.Sprintf("c%d", s.cn)
		}
		s.cWaiting, s.cID = true, requests.ID{}
	case s.cID.IsZero():
		lines := s.p.Lines()
		for _, l := range lines[s.cFrom:] {
			if m := askLine.FindStringSubmatch(l); m != nil {
				id, err := requests.ParseID(m[1])
				if err != nil {
					t.Fatal(err)
				}
				s.cID = id
				return
			}
			if strings.HasPrefix(l, "! ") {
				t.Fatalf("console ask %d refused: %s", s.cn, l)
			}
		}
	default:
		r, ok := s.get(s.cID)
		if !ok || !r.State.Terminal() {
			return
		}
		if r.State != requests.Done || !strings.HasPrefix(r.Result, s.cWant) {
			t.Fatalf("console ask %d: %s %s %q, want done with %q...", s.cn, r.ID, r.State, r.Result, s.cWant)
		}
		s.consoleDone++
		s.cWaiting = false
	}
}

// slack: the next Slack ask once the last has ended and five seconds
// have passed since it was made (Slack allows ~50 message edits a minute
// for the whole app, and each request edits its parent a few times):
// by a member (approved by a click, every third denied) or, every third
// ask, by an owner; every fifth event Slack delivers twice.
func (s *soak) slack() {
	t := s.t
	switch {
	case s.sTag == "":
		if time.Now().Before(s.sNext) {
			return
		}
		s.sn++
		s.sTag, s.sID, s.sClicked, s.sNext = fmt.Sprintf("k%d", s.sn), requests.ID{}, false, time.Now().Add(5*time.Second)
		channel, user := fmt.Sprintf("C%d", 1+s.sn%2), "U1"
		s.sMember = s.sn%3 != 0
		if !s.sMember {
			user = "UOWNER"
		}
		raw := fmt.Sprintf("<@%s> coder echo %s-done", slacktest.BotUserID, s.sTag)
		ts, err := s.fake.AddUserMessage(channel, user, raw, "")
		if err != nil {
			t.Fatal(err)
		}
		env := s.push(s.fake.PushEventsAPI, slacktest.AppMentionEvent("EvK"+strconv.Itoa(s.sn), channel, user, raw, ts, ""))
		if s.sn%5 == 0 {
			if _, err := s.fake.Redeliver(s.ctx, env); err != nil {
				t.Fatal(err)
			}
			s.redelivered++
		}
	case s.sID.IsZero():
		// Its thread parent names it, and its card shows the ask.
		msgs := s.fake.Messages()
		rx := regexp.MustCompile(`^(R\d{8}-\d+) · `)
		for _, m := range msgs[s.sScanned:] {
			if sub := rx.FindStringSubmatch(m.Text); sub != nil && m.ThreadTS == "" && strings.Contains(string(m.BlocksJSON), "echo "+s.sTag+"-done") {
				id, err := requests.ParseID(sub[1])
				if err != nil {
					t.Fatal(err)
				}
				s.sID = id
				return
			}
		}
	default:
		r, ok := s.get(s.sID)
		if !ok {
			return
		}
		deny := s.sn%9 == 1
		if r.State == requests.Pending && !s.sClicked {
			rx := regexp.MustCompile(`"block_id":"(approval:` + regexp.QuoteMeta(r.ID.String()) + `:\d+)"`)
			for _, m := range s.fake.Messages()[s.sScanned:] {
				if sub := rx.FindSubmatch(m.BlocksJSON); sub != nil {
					action := "approve"
					if deny {
						action = "deny"
					}
					s.push(s.fake.PushInteractive, slacktest.BlockActionsPayload("UOWNER", m.Channel, m.TS, m.ThreadTS, string(sub[1]), action, r.ID.String()))
					s.sClicked = true
					break
				}
			}
		}
		if !r.State.Terminal() {
			return
		}
		switch {
		case deny && s.sMember && r.State == requests.Cancelled:
			s.denied++
		case r.State == requests.Done && r.Result == s.sTag+"-done":
			if s.sMember {
				s.approved++
			}
		default:
			t.Fatalf("Slack ask %s: %s %s %q", s.sTag, r.ID, r.State, r.Result)
		}
		s.slackDone++
		s.sTag = ""
		// Later lookups need not read what this ask's thread posted so
		// far: a new ask's parent comes after its event.
		s.sScanned = len(s.fake.Messages())
	}
}

// push delivers a Socket Mode envelope and waits for its ack.
func (s *soak) push(fn func(context.Context, []byte) (string, error), payload []byte) string {
	env, err := fn(s.ctx, payload)
	if err != nil {
		s.t.Fatal(err)
	}
	if _, err := s.fake.WaitAck(s.ctx, env); err != nil {
		s.t.Fatal(err)
	}
	return env
}

func (s *soak) get(id requests.ID) (*requests.Request, bool) {
	var r requests.Request
	code, err := apiCall(http.MethodGet, s.base+"/v1/requests/"+id.String(), s.tok, nil, &r)
	return &r, err == nil && code == http.StatusOK
}

// sample reads the bridge process' figures.
func (s *soak) sample(pid int, db string, at time.Duration) soakSample {
	t := s.t
	out := soakSample{at: at, requests: s.cn + s.sn}
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		fields := strings.Fields(v)
		if len(fields) == 0 {
			continue
		}
		switch k {
		case "VmRSS":
			out.rssKiB, _ = strconv.ParseFloat(fields[0], 64)
		case "RssAnon":
			out.anonKiB, _ = strconv.ParseFloat(fields[0], 64)
		case "Threads":
			out.threads, _ = strconv.ParseFloat(fields[0], 64)
		}
	}
	f.Close()
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	out.fds = float64(len(fds))
	m := scrapeMetrics(t, s.base)
	out.goroutines, out.heap = m["go_goroutines"], m["go_memstats_heap_inuse_bytes"]
	for k, v := range m {
		if strings.HasPrefix(k, "roombridge_outbox_depth{") {
			out.outbox += v
		}
	}
	if fi, err := os.Stat(db); err == nil {
		out.dbBytes = fi.Size()
	}
	return out
}

// storeCensus counts the keys of each bucket of the bolt file at path (of a
// bridge that has stopped).
func storeCensus(t *testing.T, path string) map[string]int {
	t.Helper()
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	out := map[string]int{}
	err = db.View(func(tx *bbolt.Tx) error {
		return tx.ForEach(func(name []byte, b *bbolt.Bucket) error {
			out[string(name)] = b.Stats().KeyN
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

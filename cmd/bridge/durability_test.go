package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/requests"
)

// Environment variables of TestDurability.
const (
	// durabilityEnv sets the number of creations of the long run (8 kills);
	// unset, the test runs durabilityCI creations and durabilityCIKills kills.
	durabilityEnv      = "ROOMBRIDGE_DURABILITY"
	durabilitySeedEnv  = "ROOMBRIDGE_DURABILITY_SEED"
	durabilityCI       = 200
	durabilityCIKills  = 2
	durabilityLongKill = 8
	durabilityClients  = 16
)

// durabilityAgents are the agents the creations go to, in turn.
var durabilityAgents = []string{"a1", "a2", "a3", "a4"}

// durabilityRun is the state of one TestDurability run: the clients' view
// (what was acknowledged) that the store is checked against at the end.
type durabilityRun struct {
	t     *testing.T
	token string
	base  atomic.Pointer[string] // the live bridge's API (a new port each life)
	n     int

	// next is the next creation to make; none from limit on is started
	// (the kill schedule keeps the stream from running past a kill).
	gate        sync.Mutex
	more        *sync.Cond
	next, limit int

	acked    atomic.Int64
	inFlight atomic.Int64 // creations started, not acknowledged yet
	replayed atomic.Int64
	retries  atomic.Int64

	mu  sync.Mutex
	ids []string // ids[i]: the ID acknowledged (201) for creation i
}

// durabilityAsk is creation i's ask: the agent's first directive keeps its
// turn running (so agents do not dominate the run: one turn per agent and
// life, the other requests stay queued), the key makes the ask unique.
func durabilityAsk(i int) string { return fmt.Sprintf("sleep 1h; echo %s", durabilityKey(i)) }

func durabilityKey(i int) string { return "dur-" + strconv.Itoa(i) }

// TestDurability (issue 14's durability run): 16 clients create requests
// through POST /v1/requests, each with its own Idempotency-Key, retrying
// with the same key on connection errors, 503 and 429 as a real client
// does, while the real bridge is SIGKILLed at random moments of the stream
// and started again on the same data dir. At the end, offline: every
// acknowledged (201) creation is in the store under the ID it was
// acknowledged with (no loss), no key made two requests (no duplicates),
// request IDs are consecutive per day counter (no gaps), and the audit log
// has exactly one create record per request, none for anything else.
//
// The agents' turns sleep (see durabilityAsk): the run measures the store
// and the API under kills, not agent processes. ROOMBRIDGE_DURABILITY=N
// runs N creations with 8 kills; unset, 200 creations with 2 kills.
// ROOMBRIDGE_DURABILITY_SEED replays a kill schedule (roughly: the timing
// of the processes does not follow the seed).
func TestDurability(t *testing.T) {
	n, kills := durabilityCI, durabilityCIKills
	if s := os.Getenv(durabilityEnv); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil || n < 1 {
			t.Fatalf("%s=%q: want a number from 1", durabilityEnv, s)
		}
		kills = durabilityLongKill
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(durabilitySeedEnv); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("%s=%q: %v", durabilitySeedEnv, s, err)
		}
	}
	if n < 25*kills {
		t.Fatalf("%s=%d: want at least %d creations for %d kills", durabilityEnv, n, 25*kills, kills)
	}
	t.Logf("seed %d (replay: %s=%d), %d creations, %d clients, %d kills", seed, durabilitySeedEnv, seed, n, durabilityClients, kills)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	started := time.Now()

	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	cfg := filepath.Join(dir, "bridge.yaml")
	writeFile(t, cfg, durabilityConfig(data, max(n, 1000)))

	// The kill schedule: 5% to 95% of the stream cut into one segment per
	// kill, each kill at a random number of acknowledged creations in its
	// segment, then after a random delay of up to 20 ms.
	at := make([]int, kills)
	seg := max(1, n*9/10/kills)
	for i := range at {
		at[i] = n/20 + i*seg + rng.IntN(seg)
	}

	p := startBridge(t, dir, nil, "run", "--config", cfg)
	base, tok := p.api(data)
	d := &durabilityRun{t: t, token: tok, n: n, ids: make([]string, n)}
	d.more = sync.NewCond(&d.gate)
	t.Cleanup(d.stop) // a failed run starts no more creations
	d.base.Store(&base)
	var wg sync.WaitGroup
	for range durabilityClients {
		wg.Add(1)
		go func() { defer wg.Done(); d.client() }()
	}
	clientsDone := make(chan struct{})
	go func() { wg.Wait(); close(clientsDone) }()

	for k, threshold := range at {
		// Each life acknowledges at least one creation before its kill;
		// the clients go on past its threshold (creations are in flight
		// when it comes), up to a segment more.
		threshold = max(threshold, int(d.acked.Load())+1)
		d.setLimit(threshold + seg)
		if !d.waitAcked(int64(threshold), clientsDone) {
			t.Fatalf("kill %d: %d acknowledged, the clients ended or 2 minutes passed before %d", k+1, d.acked.Load(), threshold)
		}
		time.Sleep(time.Duration(rng.Int64N(int64(20 * time.Millisecond)))) // a random moment, not a state
		d.kill(p, k+1)
		p = startBridge(t, dir, nil, "run", "--config", cfg)
		base, _ := p.api(data)
		d.base.Store(&base)
	}
	d.setLimit(n)
	select {
	case <-clientsDone:
	case <-time.After(5*time.Minute + time.Duration(n)*50*time.Millisecond):
		t.Fatalf("the clients did not finish: %d of %d acknowledged", d.acked.Load(), n)
	}
	stream := time.Since(started)
	d.kill(p, 0) // the store is read offline
	lost, dups, gaps, audits := d.check(data)
	t.Logf("durability: %d creations, %d clients, %d kills: %d acknowledged (%d replayed by key, %d retries), "+
		"%d lost, %d duplicated, %d gaps, audit exact: %v; stream %v, wall %v",
		n, durabilityClients, kills, d.acked.Load(), d.replayed.Load(), d.retries.Load(), lost, dups, gaps, audits,
		stream.Round(time.Millisecond), time.Since(started).Round(time.Millisecond))
}

// durabilityConfig is the bridge's configuration: one console room with
// four demo agents, a queue limit above the stream.
func durabilityConfig(data string, queue int) string {
	var agents strings.Builder
	for _, a := range durabilityAgents {
		fmt.Fprintf(&agents, "  %s: {kind: exec, command: [%q, demo-agent]}\n", a, bridgeBin)
	}
	return fmt.Sprintf(`owner: acme
owners: [console:alice]
data_dir: %s
http: {addr: "127.0.0.1:0"}
console: {user: alice}
requests: {queue_limit: %d}
rooms:
  - {name: main, console: true, agents: [%s]}
agents:
%s`, data, queue, strings.Join(durabilityAgents, ", "), agents.String())
}

// waitAcked waits (up to 2 minutes) until at least n creations are
// acknowledged; false if the clients ended first or time ran out.
func (d *durabilityRun) waitAcked(n int64, done <-chan struct{}) bool {
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(2 * time.Minute)
	for d.acked.Load() < n {
		select {
		case <-done:
			return d.acked.Load() >= n
		case <-deadline:
			return false
		case <-tick.C:
		}
	}
	return true
}

// setLimit lets the clients start the creations before limit (at most n).
func (d *durabilityRun) setLimit(limit int) {
	d.gate.Lock()
	d.limit = min(limit, d.n)
	d.gate.Unlock()
	d.more.Broadcast()
}

// stop ends the stream: no creation is started after it.
func (d *durabilityRun) stop() {
	d.gate.Lock()
	d.next = d.n
	d.gate.Unlock()
	d.more.Broadcast()
}

// take returns the next creation to make, waiting until the limit allows
// it; false once all are taken.
func (d *durabilityRun) take() (int, bool) {
	d.gate.Lock()
	defer d.gate.Unlock()
	for d.next >= d.limit && d.next < d.n {
		d.more.Wait()
	}
	if d.next >= d.n {
		return 0, false
	}
	d.next++
	return d.next - 1, true
}

// kill SIGKILLs the bridge and waits for its end (life 0: the last one).
func (d *durabilityRun) kill(p *proc, life int) {
	d.t.Helper()
	cut := d.inFlight.Load()
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
	if ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		d.t.Fatalf("life %d: the bridge ended by itself (%v), not killed:\n%s", life, p.cmd.ProcessState, p.Stderr())
	}
	if life > 0 {
		d.t.Logf("kill %d at %d acknowledged, %d in flight", life, d.acked.Load(), cut)
	}
}

// client makes creations until none is left, each until it is
// acknowledged.
func (d *durabilityRun) client() {
	hc := &http.Client{Timeout: 10 * time.Second}
	for {
		i, ok := d.take()
		if !ok {
			return
		}
		if !d.create(hc, i) {
			return
		}
	}
}

// create makes creation i, retrying with its key until a 201; false on an
// answer a client cannot retry (the test has failed).
func (d *durabilityRun) create(hc *http.Client, i int) bool {
	body, _ := json.Marshal(map[string]string{"room": "main", "agent": durabilityAgents[i%len(durabilityAgents)], "text": durabilityAsk(i)})
	deadline := time.Now().Add(2 * time.Minute)
	d.inFlight.Add(1)
	defer d.inFlight.Add(-1)
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			d.retries.Add(1)
			if time.Now().After(deadline) {
				d.t.Errorf("creation %d: not acknowledged within 2 minutes of retries", i)
				return false
			}
			time.Sleep(time.Duration(10+rand.IntN(40)) * time.Millisecond) // a client's backoff
		}
		req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, *d.base.Load()+"/v1/requests", bytes.NewReader(body))
		if err != nil {
			d.t.Error(err)
			return false
		}
		req.Header.Set("Authorization", "Bearer "+d.token)
		req.Header.Set("Idempotency-Key", durabilityKey(i))
		resp, err := hc.Do(req)
		if err != nil {
			continue // the bridge is down (or was killed mid-answer)
		}
		var r requests.Request
		derr := json.NewDecoder(resp.Body).Decode(&r)
		resp.Body.Close()
		switch {
		case resp.StatusCode == http.StatusCreated && derr == nil:
			if resp.Header.Get("Idempotency-Replayed") == "true" {
				d.replayed.Add(1)
			}
			d.mu.Lock()
			d.ids[i] = r.ID.String()
			d.mu.Unlock()
			d.acked.Add(1)
			return true
		case resp.StatusCode == http.StatusCreated, resp.StatusCode == http.StatusServiceUnavailable,
			resp.StatusCode == http.StatusTooManyRequests:
			continue // cut mid-body, or told to come back
		default:
			d.t.Errorf("creation %d: POST /v1/requests answered %d", i, resp.StatusCode)
			return false
		}
	}
}

// check reads the dead bridge's store and counts what was lost (an
// acknowledged creation not stored under its ID), duplicated (a key with
// more than one request) and the gaps in the IDs; audits is whether every
// request has exactly one create record and no other request has one.
func (d *durabilityRun) check(data string) (lost, dups, gaps int, audits bool) {
	t := d.t
	st := openStore(t, data)
	defer st.close()
	ctx := context.Background()
	all, err := st.svc.List(ctx, requests.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	byAsk := map[string][]*requests.Request{}
	byID := map[string]*requests.Request{}
	perDay := map[string][]int{}
	for _, r := range all {
		byAsk[r.Ask] = append(byAsk[r.Ask], r)
		byID[r.ID.String()] = r
		day := r.ID.String()[:9]
		perDay[day] = append(perDay[day], r.ID.Seq())
	}
	for i, id := range d.ids {
		if r := byID[id]; id == "" || r == nil || r.Ask != durabilityAsk(i) {
			lost++
			t.Errorf("creation %d (%s): acknowledged as %q, not in the store with its ask", i, durabilityKey(i), id)
		}
		if rs := byAsk[durabilityAsk(i)]; len(rs) > 1 {
			dups += len(rs) - 1
			t.Errorf("creation %d (%s): %d requests %v, want 1", i, durabilityKey(i), len(rs), ids(rs))
		}
		delete(byAsk, durabilityAsk(i))
	}
	for ask, rs := range byAsk {
		t.Errorf("requests %v (%q) belong to no creation", ids(rs), ask)
	}
	for day, seqs := range perDay {
		slices.Sort(seqs)
		for j, s := range seqs {
			if s != j+1 {
				gaps++
				t.Errorf("IDs of %s: seq %d at position %d (not consecutive from 1)", day, s, j+1)
				break
			}
		}
	}
	return lost, dups, gaps, d.checkAudit(st, byID)
}

// checkAudit checks that every request has exactly one create record in
// the audit log and an unbroken chain of transitions ending in its state.
func (d *durabilityRun) checkAudit(st *offlineStore, byID map[string]*requests.Request) bool {
	t := d.t
	recs, err := audit.List(context.Background(), st.db, audit.Query{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	creates := map[string]int{}
	for _, rec := range recs {
		if rec.Action == "create" {
			creates[rec.RequestID]++
		}
	}
	exact := true
	for id, r := range byID {
		if creates[id] != 1 {
			exact = false
			t.Errorf("%s: %d create records in the audit log, want 1", id, creates[id])
		}
		delete(creates, id)
		auditTrail(t, st.db, r)
	}
	for id, c := range creates {
		exact = false
		t.Errorf("%d create records for %q, which is not in the store", c, id)
	}
	return exact
}

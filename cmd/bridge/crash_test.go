package main

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/clock"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store"
	"github.com/roombridge/roombridge/store/bolt"
)

func testConfig(dir string) string {
	return fmt.Sprintf(`owner: acme
owners: [console:alice]
data_dir: %s
http: {addr: "127.0.0.1:0"}
console: {user: alice}
rooms:
  - {name: main, console: true, agents: [coder, reviewer]}
agents:
  coder: {kind: exec, command: [%q, demo-agent]}
  reviewer: {kind: exec, command: [%q, demo-agent]}
`, filepath.Join(dir, "data"), bridgeBin, bridgeBin)
}

// TestCrashSafety SIGKILLs the bridge in the middle of a stream of
// creations, then reopens its store: no ID is duplicated or missing, no
// request is half-written, and each request's audit trail has exactly one
// record per applied transition.
func TestCrashSafety(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "bridge.yaml")
	writeFile(t, cfg, testConfig(dir))
	p := startBridge(t, dir, nil, "run", "--config", cfg)
	base, token := p.api(filepath.Join(dir, "data"))

	var created atomic.Int64
	killed := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-killed:
					return
				default:
				}
				agent := []string{"coder", "reviewer"}[i%2]
				var r requests.Request
				code, _ := apiCall(http.MethodPost, base+"/v1/requests", token,
					map[string]string{"room": "main", "agent": agent, "text": "echo ok"}, &r)
				if code == http.StatusCreated {
					if created.Add(1) == 60 {
						_ = p.cmd.Process.Signal(syscall.SIGKILL)
						close(killed)
					}
				}
			}
		}()
	}
	wg.Wait()
	<-p.done

	db, err := bolt.Open(filepath.Join(dir, "data", "bridge.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	svc := requests.NewService(db, clock.Real{}, "acme", nil)
	ctx := context.Background()
	all, err := svc.List(ctx, requests.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(all)) < created.Load() {
		t.Fatalf("store has %d requests, but %d creations were acknowledged", len(all), created.Load())
	}
	for i, r := range all {
		if r.ID.Seq() != i+1 {
			t.Fatalf("request %d has ID %s: IDs are not consecutive and unique", i, r.ID)
		}
		if r.Agent == "" || r.Ask != "echo ok" || r.State == 0 || r.Version == 0 {
			t.Fatalf("half-written request: %+v", r)
		}
		auditTrail(t, db, r)
	}
	t.Logf("%d requests acknowledged before the kill, %d in the store", created.Load(), len(all))
}

// auditTrail returns request r's audit records, failing the test unless
// the records of its state are a chain create → ... → r's state: exactly
// one record per applied transition, none missing, none doubled. (Records
// of a rendezvous r waits on carry the rendezvous' states; records of its
// tasks carry none.)
func auditTrail(t *testing.T, db store.Store, r *requests.Request) []audit.Record {
	t.Helper()
	recs, err := audit.List(context.Background(), db, audit.Query{RequestID: r.ID.String()}, 0)
	if err != nil {
		t.Fatal(err)
	}
	var transitions []audit.Record
	for _, rec := range recs {
		if rec.Action == "session" || rec.Action == "interrupted" || rec.Action == "rendezvous" || rec.From == "" && rec.To == "" {
			continue
		}
		transitions = append(transitions, rec)
	}
	if len(transitions) == 0 || transitions[0].Action != "create" {
		t.Fatalf("%s: audit trail does not start with its creation: %+v", r.ID, recs)
	}
	state := transitions[0].To
	for _, rec := range transitions[1:] {
		if rec.From != state {
			t.Fatalf("%s: audit record %q goes from %s, but the request was %s: %+v", r.ID, rec.Action, rec.From, state, recs)
		}
		state = rec.To
	}
	if state != r.State.String() {
		t.Fatalf("%s: audit trail ends in %s, the request is %s", r.ID, state, r.State)
	}
	return recs
}

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/roombridge/roombridge/core"
	"github.com/roombridge/roombridge/internal/testbin"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store"
	"github.com/roombridge/roombridge/store/etcd"
	"github.com/roombridge/roombridge/store/etcd/etcdtest"
	"github.com/roombridge/roombridge/store/migrate"
)

var (
	oldBinOnce    sync.Once
	oldBin        string
	oldBinErr     error
	oldBinCleanup = func() {} // TestMain removes the build
)

// oldBridge is this bridge built to know store format 1 only
// (core.maxFormat): the binary of the release before, for rolling upgrades.
func oldBridge(t *testing.T) string {
	t.Helper()
	oldBinOnce.Do(func() {
		var cleanup func()
		oldBin, cleanup, oldBinErr = testbin.Build("-race", "-ldflags=-X github.com/roombridge/roombridge/core.maxFormat=1")
		if oldBinErr == nil {
			oldBinCleanup = cleanup
		}
	})
	if oldBinErr != nil {
		t.Fatal(oldBinErr)
	}
	return oldBin
}

// startHAWith starts one bridge of an HA group with binary bin.
func startHAWith(t *testing.T, srv *etcdtest.Server, bin string) *haBridge {
	t.Helper()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "bridge.yaml")
	writeFile(t, cfg, haConfig(dir, srv.Endpoint()))
	b := &haBridge{t: t, p: startBinary(t, bin, dir, nil, "run", "--config", cfg), data: filepath.Join(dir, "data")}
	b.base, b.token = b.p.api(b.data)
	return b
}

// readyDetail is /readyz's detail of b.
func (b *haBridge) readyDetail() (d struct {
	Instance       core.Instance `json:"instance"`
	Leader         core.Instance `json:"leader"`
	StoreFormat    int           `json:"store_format"`
	NotCampaigning string        `json:"not_campaigning"`
}) {
	b.t.Helper()
	var body struct {
		Detail json.RawMessage `json:"detail"`
	}
	call(b.t, http.MethodGet, b.base+"/readyz", "", nil, &body)
	if err := json.Unmarshal(body.Detail, &d); err != nil {
		b.t.Errorf("/readyz detail %s: %v", body.Detail, err)
	}
	return d
}

// TestRollingUpgrade: an HA group on one etcd goes from a binary of format 1
// to one of format 2. The old binary leads and works; a new one joins as a
// follower (it leaves the store alone); the old leader stops, the new one
// leads, migrates (once) and finishes the old leader's request; an old
// binary started then refuses to lead, says why, and stays a follower even
// when the new leader dies; a second new binary takes over. No request is
// lost or duplicated, no thread parent posted twice.
func TestRollingUpgrade(t *testing.T) {
	srv := etcdtest.Start(t)
	old := oldBridge(t)
	a := startHAWith(t, srv, old)
	waitLeader(t, []*haBridge{a}, 20*time.Second)
	r1 := a.create("echo one")
	a.waitRequest(r1.ID, "done", 20*time.Second, func(r requests.Request) bool { return r.State == requests.Done })
	r2 := a.create("say started; tool work 3s; echo finished")
	a.p.waitLine(0, regexp.QuoteMeta(r2.ID.String()+" | started"))

	// What format 1 wrote for every inbound event: its dedupe key and a
	// timer; more than one etcd Txn of the migration deletes.
	seedFormat1Dedupe(t, srv, 300)

	b := startHAWith(t, srv, bridgeBin)
	if d := b.readyDetail(); d.Leader.Format != 1 || d.Instance.Format != 2 || d.Leader.Name == d.Instance.Name {
		t.Errorf("the new follower's /readyz: %+v; want the old leader (format 1) and itself (format 2)", d)
	}
	if err := a.p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-a.p.done
	waitLeader(t, []*haBridge{b}, 10*time.Second)
	done := b.waitRequest(r2.ID, "done", 30*time.Second, func(r requests.Request) bool { return r.State.Terminal() })
	if done.State != requests.Done || done.Result != "finished" {
		t.Fatalf("the old leader's request on the new one: %s %q, want done, finished", done.State, done.Result)
	}
	if d := b.readyDetail(); d.StoreFormat != 2 {
		t.Errorf("the new leader's store format: %d, want 2 (%+v)", d.StoreFormat, d)
	}
	r3 := b.create("echo three")

	c := startHAWith(t, srv, old)
	refusal := "this instance may not lead"
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(c.p.Stderr(), refusal); {
		select {
		case <-c.p.done:
			t.Fatalf("the old binary exited:\n%s", c.p.Stderr())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("the old binary did not refuse to lead within 30s:\n%s", c.p.Stderr())
		}
	}
	if !strings.Contains(c.p.Stderr(), "the store is in format 2, newer than this binary knows (format 1)") {
		t.Errorf("the old binary does not say why it does not lead:\n%s", c.p.Stderr())
	}
	if d := c.readyDetail(); !strings.Contains(d.NotCampaigning, "format 2") {
		t.Errorf("the old binary's /readyz: %+v; want why it does not campaign", d)
	}
	// The new leader dies: the old binary still does not lead.
	if err := b.p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-b.p.done
	deadline := time.Now().Add(haLeaseTTL + 2*time.Second)
	for time.Now().Before(deadline) {
		if c.ready() {
			t.Fatal("the old binary leads a store of format 2")
		}
		time.Sleep(50 * time.Millisecond)
	}
	d := startHAWith(t, srv, bridgeBin)
	waitLeader(t, []*haBridge{c, d}, 20*time.Second)
	d.waitRequest(r3.ID, "done", 20*time.Second, func(r requests.Request) bool { return r.State == requests.Done })

	var list struct{ Requests []requests.Request }
	call(t, http.MethodGet, d.base+"/v1/requests", d.token, nil, &list)
	if len(list.Requests) != 3 {
		t.Errorf("requests after the upgrade: %+v; want r1, r2, r3 once each", list.Requests)
	}
	all := []*haBridge{a, b, c, d}
	for _, id := range []requests.ID{r1.ID, r2.ID, r3.ID} {
		if n := countLines(all, "== "+id.String()+" ·"); n != 1 {
			t.Errorf("thread parent of %s posted %d times, want once", id, n)
		}
		if n := countLines(all, id.String()+" | final:"); n != 1 {
			t.Errorf("final answer of %s posted %d times, want once", id, n)
		}
	}
	migrated := 0
	req, _ := http.NewRequest(http.MethodGet, d.base+"/v1/audit?format=jsonl", nil)
	req.Header.Set("Authorization", "Bearer "+d.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	for dec.More() {
		var rec struct{ Action, From, To, Detail string }
		if err := dec.Decode(&rec); err != nil {
			t.Fatal(err)
		}
		if rec.Action == migrate.Action {
			migrated++
			if !strings.Contains(rec.Detail, `"dedupe_timers":300`) {
				t.Errorf("the migration's audit record %q, want 300 dedupe timers deleted", rec.Detail)
			}
		}
	}
	if migrated != 1 {
		t.Errorf("%d store_migrated records, want 1", migrated)
	}
}

// seedFormat1Dedupe writes n dedupe keys into the HA group's store as a
// format 1 binary did: the key, and its timer in the expiry index.
func seedFormat1Dedupe(t *testing.T, srv *etcdtest.Server, n int) {
	t.Helper()
	st, err := etcd.New(srv.Client(t), etcd.Options{Prefix: "/rb/store"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Now()
	for i := 0; i < n; i += 50 {
		err := st.Update(context.Background(), func(tx store.Tx) error {
			for j := i; j < min(i+50, n); j++ {
				key := fmt.Sprintf("ask:slack:Ev%05d", j)
				if err := store.Remember(tx, key, nil, now, time.Hour); err != nil {
					return err
				}
				if err := store.AddTimer(tx, "dedupe", now.Add(time.Hour), key); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

package approvals_test

import (
	"context"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roombridge/roombridge/approvals"
	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/clock"
	"github.com/roombridge/roombridge/config"
	"github.com/roombridge/roombridge/directory"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store"
	"github.com/roombridge/roombridge/store/bolt"
	"github.com/roombridge/roombridge/store/etcd"
	"github.com/roombridge/roombridge/threads"
	"github.com/roombridge/roombridge/ttl"
)

// counting is the bolt store, recording the most distinct keys one Update
// wrote (what an etcd Txn of that Update holds) and their bytes.
type counting struct {
	*bolt.DB
	maxKeys, maxBytes int
}

type countingTx struct {
	store.Tx
	keys map[string]int
}

func (c *countingTx) Put(bucket, key string, v []byte) error {
	c.keys[bucket+"/"+key] = len(bucket) + len(key) + len(v)
	return c.Tx.Put(bucket, key, v)
}

func (c *countingTx) Delete(bucket, key string) error {
	c.keys[bucket+"/"+key] = len(bucket) + len(key)
	return c.Tx.Delete(bucket, key)
}

func (c *counting) Update(ctx context.Context, fn func(store.Tx) error) error {
	return c.DB.Update(ctx, func(tx store.Tx) error {
		ct := &countingTx{Tx: tx, keys: map[string]int{}}
		if err := fn(ct); err != nil {
			return err
		}
		size := 0
		for _, n := range ct.keys {
			size += n
		}
		c.maxKeys, c.maxBytes = max(c.maxKeys, len(ct.keys)), max(c.maxBytes, size)
		return nil
	})
}

// etcdSized is the counting store with etcd's default bound on the keys
// one transaction writes (store/etcd's MaxWrites).
type etcdSized struct{ *counting }

func (etcdSized) MaxWrites() int { return etcd.DefaultMaxTxnOps - 1 }

// A sweep batch of MaxBatch expiries, of approvals with cards on two
// surfaces and long texts, fits one etcd Txn (127 writes, 1 MiB) on a
// store bounded like etcd; on bolt, which bounds nothing, batches are 16.
// The sweep expires them all with their cards and audit records.
func TestSweepBatchFitsOneEtcdTxn(t *testing.T) {
	for _, c := range []struct {
		name  string
		etcd  bool
		batch int
	}{{"etcd", true, 4}, {"bolt", false, 16}} {
		t.Run(c.name, func(t *testing.T) {
			db, err := bolt.Open(filepath.Join(t.TempDir(), "bridge.db"))
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			cs := &counting{DB: db}
			var st store.Store = cs
			if c.etcd {
				st = etcdSized{cs}
			}
			expireBatches(t, st, cs, c.batch)
		})
	}
}

// expireBatches creates 3 batches and one more of approvals on st (cs
// counting its writes) and sweeps them at once, checking that appr's
// batches are of batch expiries and fit an etcd Txn where st is bounded
// like etcd.
func expireBatches(t *testing.T, st store.Store, cs *counting, batch int) {
	clk := clock.NewFake(t0)
	rs := []config.Room{{Name: "backend", SlackChannel: "C1", FeishuChat: "oc_1", Agents: []string{"coder"},
		Approvers: []string{"slack:UAPPROVER", "feishu:ou_approver"}}}
	roomDir := directory.New(rs, nil, chat.Slack, chat.Feishu)
	svc := requests.NewService(st, clk, "acme", nil)
	th := threads.New(roomDir)
	svc.AddObserver("threads", th.Observe)
	appr := approvals.New(approvals.Options{Requests: svc, Rooms: roomDir, TTL: time.Hour, Threads: th})
	svc.AddObserver(approvals.ObserverName, appr.Observe)
	if appr.MaxBatch() != batch {
		t.Fatalf("MaxBatch = %d, want %d", appr.MaxBatch(), batch)
	}
	ctx := context.Background()
	n := 3*batch + 1
	long := strings.Repeat("x", 2000)
	for i := range n {
		if _, err := svc.Create(ctx, requests.Ask{Agent: "coder", Room: "backend", Surface: chat.Slack,
			User: "slack:U" + strconv.Itoa(i), Text: "deploy " + strconv.Itoa(i) + long}); err != nil {
			t.Fatal(err)
		}
	}
	sw, err := ttl.New(ttl.Options{Clock: clk, Parallel: 1}, appr)
	if err != nil {
		t.Fatal(err)
	}
	cs.maxKeys, cs.maxBytes = 0, 0
	clk.Advance(2 * time.Hour)
	res, err := sw.SweepOnce(ctx)
	if err != nil || res.Expired != n {
		t.Fatalf("sweep: %+v, %v; want %d expired", res, err, n)
	}
	t.Logf("largest batch: %d keys, %d bytes", cs.maxKeys, cs.maxBytes)
	if _, bounded := st.(etcdSized); bounded && (cs.maxKeys > 127 || cs.maxBytes > 1<<20) {
		t.Errorf("a batch wrote %d keys, %d bytes: over an etcd Txn (127 writes, 1 MiB)", cs.maxKeys, cs.maxBytes)
	}
	if perExpiry := 13; cs.maxKeys < batch*perExpiry {
		t.Errorf("the largest batch wrote %d keys: fewer than %d expiries of %d", cs.maxKeys, batch, perExpiry)
	}
	rs2, err := svc.List(ctx, requests.Filter{State: requests.Expired})
	if err != nil || len(rs2) != n {
		t.Errorf("%d expired requests (%v), want %d", len(rs2), err, n)
	}
}

// sweepServices are the requests and approvals services (with threads) on
// st, with benchRooms and a one-hour TTL, on a fake clock at t0.
func sweepServices(st store.Store) (*clock.Fake, *requests.Service, *approvals.Service) {
	clk := clock.NewFake(t0)
	roomDir := directory.New(benchRooms(), nil, chat.Slack)
	svc := requests.NewService(st, clk, "acme", nil)
	th := threads.New(roomDir)
	svc.AddObserver("threads", th.Observe)
	appr := approvals.New(approvals.Options{Requests: svc, Rooms: roomDir, TTL: time.Hour, Threads: th})
	svc.AddObserver(approvals.ObserverName, appr.Observe)
	return clk, svc, appr
}

// interleaving is the bolt store that, once armed, runs between before the
// next Update: what other writers commit between a sweep batch's read
// (where its expiries are prepared) and its write.
type interleaving struct {
	*bolt.DB
	mu      sync.Mutex
	between func()
}

func (s *interleaving) Update(ctx context.Context, fn func(store.Tx) error) error {
	s.mu.Lock()
	f := s.between
	s.between = nil
	s.mu.Unlock()
	if f != nil {
		f()
	}
	return s.DB.Update(ctx, fn)
}

// An approval decided, and a request edited, after the sweep prepared their
// expiries but before it wrote them: the decided one is not expired (the
// approve stands, alone in the audit log), the edited request expires with
// the edit kept, the untouched one expires as prepared.
func TestSweepRechecksWhatChangedSinceItsRead(t *testing.T) {
	db, err := bolt.Open(filepath.Join(t.TempDir(), "bridge.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	is := &interleaving{DB: db}
	clk, svc, appr := sweepServices(is)
	ctx := context.Background()
	var rs []*requests.Request
	for i := range 3 {
		r, err := svc.Create(ctx, requests.Ask{Agent: "coder", Room: "backend", Surface: chat.Slack,
			User: "slack:U" + strconv.Itoa(i), Text: "deploy " + strconv.Itoa(i)})
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
	}
	decided, edited, untouched := rs[0], rs[1], rs[2]
	sw, err := ttl.New(ttl.Options{Clock: clk, Parallel: 1, Batch: 3}, appr)
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(2 * time.Hour)
	is.between = func() {
		// The approver clicked just in time; the commit lands now.
		clk.Set(t0.Add(30 * time.Minute))
		if _, err := appr.Decide(ctx, decided.ID.String(), approvals.Approve, "slack:UAPPROVER", chat.Slack); err != nil {
			t.Error(err)
		}
		clk.Set(t0.Add(2 * time.Hour))
		if err := db.Update(ctx, func(tx store.Tx) error {
			_, err := svc.UpdateTx(tx, edited.ID, "", "", "", func(r *requests.Request) { r.Activity = "edited meanwhile" })
			return err
		}); err != nil {
			t.Error(err)
		}
	}
	res, err := sw.SweepOnce(ctx)
	if err != nil || res.Expired != 2 || res.Skipped != 1 {
		t.Fatalf("sweep: %+v, %v; want 2 expired, 1 skipped", res, err)
	}
	get := func(id requests.ID) *requests.Request {
		r, err := svc.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := get(decided.ID); r.State != requests.Approved {
		t.Errorf("decided meanwhile: %s, want approved", r.State)
	}
	if recs, err := audit.List(ctx, db, audit.Query{RequestID: decided.ID.String()}, 0); err != nil || count(recs, "expire") != 0 || count(recs, "approve") != 1 {
		t.Errorf("decided meanwhile: audit %+v (%v)", recs, err)
	}
	if r := get(edited.ID); r.State != requests.Expired || r.Activity != "edited meanwhile" {
		t.Errorf("edited meanwhile: %s, activity %q; want expired with the edit", r.State, r.Activity)
	}
	if r := get(untouched.ID); r.State != requests.Expired || r.Version != untouched.Version+1 {
		t.Errorf("untouched: %s v%d, want expired v%d", r.State, r.Version, untouched.Version+1)
	}
}

// readCounting is the bolt store, recording the most sweep batches reading
// at once (Views that read an approval).
type readCounting struct {
	*bolt.DB
	mu            sync.Mutex
	reading, most int
}

type readCountingTx struct {
	store.Tx
	rc      *readCounting
	counted bool
}

func (x *readCountingTx) Get(bucket, key string) ([]byte, error) {
	if bucket == "approvals" && !x.counted {
		x.counted = true
		x.rc.mu.Lock()
		x.rc.reading++
		x.rc.most = max(x.rc.most, x.rc.reading)
		x.rc.mu.Unlock()
	}
	return x.Tx.Get(bucket, key)
}

func (r *readCounting) View(ctx context.Context, fn func(store.Tx) error) error {
	x := &readCountingTx{rc: r}
	err := r.DB.View(ctx, func(tx store.Tx) error {
		x.Tx = tx
		return fn(x)
	})
	if x.counted {
		r.mu.Lock()
		r.reading--
		r.mu.Unlock()
	}
	return err
}

// On bolt, whose single writer runs in this process, the sweep's batches
// read one fewer at a time than there are processors (at least one), many
// as there are in flight, and all of them expire.
func TestSweepReadsLeaveTheWriterAProcessor(t *testing.T) {
	db, err := bolt.Open(filepath.Join(t.TempDir(), "bridge.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rc := &readCounting{DB: db}
	clk, svc, appr := sweepServices(rc)
	ctx := context.Background()
	const n = 64
	for i := range n {
		if _, err := svc.Create(ctx, requests.Ask{Agent: "coder", Room: "backend", Surface: chat.Slack,
			User: "slack:U" + strconv.Itoa(i), Text: "deploy " + strconv.Itoa(i)}); err != nil {
			t.Fatal(err)
		}
	}
	sw, err := ttl.New(ttl.Options{Clock: clk, Parallel: 32, Batch: 1}, appr)
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(2 * time.Hour)
	if res, err := sw.SweepOnce(ctx); err != nil || res.Expired != n {
		t.Fatalf("sweep: %+v, %v; want %d expired", res, err, n)
	}
	if limit := max(1, runtime.GOMAXPROCS(0)-1); rc.most < 1 || rc.most > limit {
		t.Errorf("%d batches read at once, want 1 to %d", rc.most, limit)
	}
}

package election_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/roombridge/roombridge/election"
	"github.com/roombridge/roombridge/store"
	"github.com/roombridge/roombridge/store/etcd"
	"github.com/roombridge/roombridge/store/etcd/etcdtest"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

const electionPrefix = "/test/leader"

// event is a term start or end reported by a candidate's leader work.
type event struct {
	start bool
	key   string
	rev   int64
}

// candidate is one in-process instance: a Leadership and a store it fences.
type candidate struct {
	name   string
	l      *election.Leadership
	st     *etcd.Store
	events chan event
	cancel context.CancelFunc
	done   chan error
}

func startCandidate(t *testing.T, srv *etcdtest.Server, name string, ttl time.Duration) *candidate {
	t.Helper()
	cli := srv.Client(t)
	l, err := election.New(election.Options{Client: cli, Prefix: electionPrefix, TTL: ttl, Name: name})
	if err != nil {
		t.Fatal(err)
	}
	st, err := etcd.New(cli, etcd.Options{Prefix: "/test/store", Fence: l})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &candidate{name: name, l: l, st: st, events: make(chan event, 16), cancel: cancel, done: make(chan error, 1)}
	go func() {
		c.done <- l.Run(ctx, func(ctx context.Context) error {
			key, rev, _ := l.Term()
			c.events <- event{true, key, rev}
			<-ctx.Done()
			c.events <- event{false, key, rev}
			return nil
		})
	}()
	t.Cleanup(func() {
		c.stop(t)
		_ = st.Close()
	})
	return c
}

// stop shuts the candidate down (a graceful shutdown: resign and revoke).
func (c *candidate) stop(t *testing.T) {
	c.cancel()
	select {
	case err := <-c.done:
		if err != nil {
			t.Errorf("%s: Run: %v", c.name, err)
		}
		c.done <- err // keep it for a second stop
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: Run did not return within 10s of shutdown", c.name)
	}
}

// next waits for c's next term event.
func (c *candidate) next(t *testing.T, within time.Duration) event {
	t.Helper()
	select {
	case ev := <-c.events:
		return ev
	case <-time.After(within):
		t.Fatalf("%s: no term event within %v", c.name, within)
		return event{}
	}
}

func (c *candidate) write(key string) error {
	return c.st.Update(context.Background(), func(tx store.Tx) error {
		return tx.Put("w", key, []byte(c.name))
	})
}

// TestHandover: the first candidate leads, the second waits; a graceful
// shutdown of the leader hands over at once (resign + revoke, no TTL wait).
func TestHandover(t *testing.T) {
	srv := etcdtest.Start(t)
	a := startCandidate(t, srv, "a", 5*time.Second)
	ev := a.next(t, 10*time.Second)
	if !ev.start || !a.l.Leading() {
		t.Fatalf("a: %+v, leading %v; want a term start", ev, a.l.Leading())
	}
	if err := a.write("1"); err != nil {
		t.Fatalf("leader's write: %v", err)
	}
	b := startCandidate(t, srv, "b", 5*time.Second)
	select {
	case ev := <-b.events:
		t.Fatalf("b leads while a leads: %+v", ev)
	case <-time.After(200 * time.Millisecond): // b is campaigning by now
	}
	if err := b.write("2"); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("follower's write: %v, want ErrFenced", err)
	}
	start := time.Now()
	a.stop(t)
	ev = b.next(t, 2*time.Second)
	took := time.Since(start)
	if !ev.start || ev.rev <= 0 {
		t.Fatalf("b: %+v", ev)
	}
	if took > time.Second {
		t.Errorf("graceful handover took %v; want well under the 5s TTL", took)
	}
	t.Logf("graceful handover: %v", took)
	if err := b.write("3"); err != nil {
		t.Fatalf("new leader's write: %v", err)
	}
	if a.l.Leading() {
		t.Error("a still reports leading after shutdown")
	}
}

// TestFenceEndsTerm: the leader's key disappears behind its back (its session
// still alive) and another instance leads. The old leader's next write is
// refused by the fence, and that refusal ends its term at once.
func TestFenceEndsTerm(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	a := startCandidate(t, srv, "a", 2*time.Second)
	evA := a.next(t, 10*time.Second)
	b := startCandidate(t, srv, "b", 2*time.Second)
	time.Sleep(100 * time.Millisecond) // let b campaign; b waits either way
	if _, err := cli.Delete(context.Background(), evA.key); err != nil {
		t.Fatal(err)
	}
	evB := b.next(t, 5*time.Second)
	if !evB.start || evB.rev <= evA.rev {
		t.Fatalf("b: %+v; want a term newer than a's %d", evB, evA.rev)
	}
	if !a.l.Leading() {
		t.Fatal("precondition: a should not know yet that it lost (its session is alive)")
	}
	if err := a.write("stale"); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("old leader's write: %v, want ErrFenced", err)
	}
	if ev := a.next(t, time.Second); ev.start || ev.rev != evA.rev {
		t.Fatalf("a: %+v; want the end of term %d right after the refused write", ev, evA.rev)
	}
	if a.l.Leading() {
		t.Error("a reports leading after a fenced write")
	}
	if err := b.write("fresh"); err != nil {
		t.Fatalf("new leader's write: %v", err)
	}
	resp, err := cli.Get(context.Background(), "/test/store/w/stale")
	if err != nil || len(resp.Kvs) != 0 {
		t.Errorf("the stale write landed: %v %v", resp, err)
	}
}

// leaseOf returns the lease that holds key.
func leaseOf(t *testing.T, cli *clientv3.Client, key string) clientv3.LeaseID {
	t.Helper()
	resp, err := cli.Get(context.Background(), key)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("get %s: %v %v", key, resp, err)
	}
	return clientv3.LeaseID(resp.Kvs[0].Lease)
}

// TestSessionLossEndsTerm: the leader's lease is revoked (as when it expires);
// the leader's work is cancelled, it campaigns again with a new session, and
// the waiting candidate leads.
func TestSessionLossEndsTerm(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	a := startCandidate(t, srv, "a", 2*time.Second)
	evA := a.next(t, 10*time.Second)
	b := startCandidate(t, srv, "b", 2*time.Second)
	waitKeys(t, cli, electionPrefix+"/", 2) // b campaigns: its key waits behind a's
	if _, err := cli.Revoke(context.Background(), leaseOf(t, cli, evA.key)); err != nil {
		t.Fatal(err)
	}
	if ev := a.next(t, 5*time.Second); ev.start {
		t.Fatalf("a: %+v; want its term to end", ev)
	}
	if ev := b.next(t, 5*time.Second); !ev.start {
		t.Fatalf("b: %+v; want a term start", ev)
	}
	if err := a.write("stale"); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("old leader's write: %v, want ErrFenced", err)
	}
}

// TestNoPhantomLeader: a waiting candidate's own session ends while it waits
// in Campaign. It must not later believe it leads with that dead session: it
// starts over with a new one and leads only with a live key.
func TestNoPhantomLeader(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	a := startCandidate(t, srv, "a", 2*time.Second)
	evA := a.next(t, 10*time.Second)
	b := startCandidate(t, srv, "b", 2*time.Second)
	var bKey string
	deadline := time.Now().Add(5 * time.Second)
	for bKey == "" && time.Now().Before(deadline) {
		resp, err := cli.Get(context.Background(), electionPrefix+"/", clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range resp.Kvs {
			if string(kv.Key) != evA.key {
				bKey = string(kv.Key)
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	if bKey == "" {
		t.Fatal("b never campaigned")
	}
	if _, err := cli.Revoke(context.Background(), leaseOf(t, cli, bKey)); err != nil {
		t.Fatal(err)
	}
	// b campaigns again with a new session: wait for its new key.
	deadline = time.Now().Add(5 * time.Second)
	for {
		resp, err := cli.Get(context.Background(), electionPrefix+"/", clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) == 2 && string(resp.Kvs[0].Key) != bKey && string(resp.Kvs[1].Key) != bKey {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("b did not campaign again with a new session: keys %v", resp.Kvs)
		}
		time.Sleep(10 * time.Millisecond)
	}
	a.stop(t)
	ev := b.next(t, 5*time.Second)
	if !ev.start || ev.key == bKey {
		t.Fatalf("b: %+v; want a term under a new key (not the revoked %s)", ev, bKey)
	}
	if err := b.write("ok"); err != nil {
		t.Fatalf("b's write: %v", err)
	}
}

// TestEtcdOutage: while etcd is down the leader's term ends (its session
// cannot be kept alive); when etcd is back, an instance leads again without
// being restarted.
func TestEtcdOutage(t *testing.T) {
	srv := etcdtest.Start(t)
	a := startCandidate(t, srv, "a", time.Second)
	if ev := a.next(t, 10*time.Second); !ev.start {
		t.Fatalf("a: %+v", ev)
	}
	srv.Stop()
	start := time.Now()
	if ev := a.next(t, 10*time.Second); ev.start {
		t.Fatalf("a: %+v; want its term to end while etcd is down", ev)
	}
	t.Logf("term ended %v after etcd stopped (TTL 1s)", time.Since(start).Round(time.Millisecond))
	if a.l.Leading() {
		t.Error("a reports leading while etcd is down")
	}
	start = time.Now()
	srv.Restart()
	t.Logf("etcd restarted in %v", time.Since(start).Round(time.Millisecond))
	defer func() { t.Logf("leading again %v after the restart began", time.Since(start).Round(time.Millisecond)) }()
	if ev := a.next(t, 20*time.Second); !ev.start {
		t.Fatalf("a: %+v; want a new term after etcd is back", ev)
	}
	if err := a.write("after"); err != nil {
		t.Fatalf("write after recovery: %v", err)
	}
}

// TestMain runs the child processes of TestPausedLeaderIsFenced and
// BenchmarkFailover when asked to.
func TestMain(m *testing.M) {
	if ep := os.Getenv("ELECTION_TEST_CHILD"); ep != "" {
		os.Exit(child(ep))
	}
	if ep := os.Getenv("ELECTION_BENCH_CHILD"); ep != "" {
		os.Exit(benchChild(ep))
	}
	os.Exit(m.Run())
}

// child leads and writes a counter through the fenced store as fast as it
// can, reporting on stdout: "lead <rev>", "refused", "end".
func child(endpoint string) int {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	defer cli.Close()
	l, err := election.New(election.Options{Client: cli, Prefix: electionPrefix, TTL: time.Second, Name: "child"})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	st, err := etcd.New(cli, etcd.Options{Prefix: "/test/store", Fence: l})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_ = l.Run(ctx, func(ctx context.Context) error {
		_, rev, _ := l.Term()
		fmt.Println("lead", rev)
		// The worst case: work that writes without watching its context
		// (here: until its first refusal). Only the fence stops it.
		for i := 0; ; i++ {
			err := st.Update(context.Background(), func(tx store.Tx) error {
				return tx.Put("w", fmt.Sprintf("%08d", i), nil)
			})
			if errors.Is(err, store.ErrFenced) {
				fmt.Println("refused")
				break
			}
		}
		<-ctx.Done()
		fmt.Println("end")
		cancel() // one term is all the test needs
		return nil
	})
	return 0
}

// TestPausedLeaderIsFenced: a leader process writing in a loop is paused
// (SIGSTOP) past its lease; another instance leads; the old one is resumed
// (SIGCONT). None of its writes lands after the new term began, and it steps
// down.
func TestPausedLeaderIsFenced(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "ELECTION_TEST_CHILD="+srv.Endpoint())
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var seen []string
	waitLine := func(prefix string) string {
		t.Helper()
		timeout := time.After(20 * time.Second)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("child exited before %q", prefix)
				}
				seen = append(seen, l)
				if strings.HasPrefix(l, prefix) {
					return l
				}
			case <-timeout:
				t.Fatalf("child: no %q within 20s", prefix)
			}
		}
	}
	oldRev, _ := strconv.ParseInt(strings.TrimPrefix(waitLine("lead "), "lead "), 10, 64)
	// The child's term ends when its election key is deleted (lease expiry):
	// watch for that revision.
	keys, err := cli.Get(context.Background(), electionPrefix+"/", clientv3.WithPrefix())
	if err != nil || len(keys.Kvs) != 1 || keys.Kvs[0].CreateRevision != oldRev {
		t.Fatalf("election keys: %v %v; want the child's alone", keys, err)
	}
	wctx, wcancel := context.WithCancel(context.Background())
	defer wcancel()
	deleted := cli.Watch(wctx, string(keys.Kvs[0].Key), clientv3.WithRev(oldRev), clientv3.WithFilterPut())
	b := startCandidate(t, srv, "b", 5*time.Second)
	// Pause the child once it has written while leading.
	waitKeys(t, cli, "/test/store/w/", 1)
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	ev := b.next(t, 10*time.Second)
	if !ev.start || ev.rev <= oldRev {
		t.Fatalf("b: %+v", ev)
	}
	t.Logf("b leads %v after the pause (child TTL 1s)", time.Since(paused).Round(time.Millisecond))
	var endRev int64
	select {
	case wr := <-deleted:
		if len(wr.Events) == 0 {
			t.Fatalf("watch: %v", wr.Err())
		}
		endRev = wr.Events[0].Kv.ModRevision
	case <-time.After(5 * time.Second):
		t.Fatal("no deletion of the child's election key seen")
	}
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	waitLine("end")
	if !slices.Contains(seen, "refused") {
		t.Errorf("child output %q: want a write refused by the fence before the end of its term", seen)
	}
	resp, err := cli.Get(context.Background(), "/test/store/w/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		t.Fatal("the child wrote nothing while it led")
	}
	for _, kv := range resp.Kvs {
		if kv.ModRevision > endRev {
			t.Errorf("the paused leader's write %s landed at revision %d, after its term ended at %d", kv.Key, kv.ModRevision, endRev)
		}
	}
	t.Logf("child wrote %d keys while leading; none after the new term", len(resp.Kvs))
	if err := b.write("new"); err != nil {
		t.Fatalf("new leader's write: %v", err)
	}
}

// waitKeys waits until at least n keys exist under prefix.
func waitKeys(t *testing.T, cli *clientv3.Client, prefix string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := cli.Get(context.Background(), prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err == nil && resp.Count >= int64(n) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("fewer than %d keys under %s within 10s (err %v)", n, prefix, err)
		}
		time.Sleep(5 * time.Millisecond) // polling etcd for the condition
	}
}

// TestOutageIsNotFenced: etcd goes away under the leader (as during an etcd
// leader election or a quorum loss): its term ends with its session, but
// nothing says another instance leads, so its writes are refused as "store
// unavailable, retry" (store.ErrUnavailable), not as "fenced". Once etcd is
// back, it leads again.
func TestOutageIsNotFenced(t *testing.T) {
	srv := etcdtest.Start(t)
	a := startCandidate(t, srv, "a", 2*time.Second)
	if ev := a.next(t, 10*time.Second); !ev.start {
		t.Fatalf("a: %+v; want a term start", ev)
	}
	srv.Stop()
	if ev := a.next(t, 10*time.Second); ev.start {
		t.Fatalf("a: %+v; want its term to end", ev)
	}
	err := a.write("during the outage")
	if !errors.Is(err, store.ErrUnavailable) || errors.Is(err, store.ErrFenced) {
		t.Fatalf("write during the outage: %v; want store.ErrUnavailable, not ErrFenced", err)
	}
	srv.Restart()
	if ev := a.next(t, 20*time.Second); !ev.start {
		t.Fatalf("a: %+v; want a new term once etcd is back", ev)
	}
}

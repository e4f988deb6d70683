package etcd_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roombridge/roombridge/store"
	"github.com/roombridge/roombridge/store/etcd"
	"github.com/roombridge/roombridge/store/etcd/etcdtest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// backupOf writes n values of size bytes, each by its own Update (as a
// bridge writes them), under prefix and returns the prefix's backup.
func backupOf(t *testing.T, cli *clientv3.Client, prefix string, n, size int) []byte {
	t.Helper()
	ctx := context.Background()
	src := open(t, cli, etcd.Options{Prefix: prefix})
	if err := src.Update(ctx, func(tx store.Tx) error { return store.WriteFormat(tx, 2) }); err != nil {
		t.Fatal(err)
	}
	v := []byte(strings.Repeat("x", size))
	for i := range n {
		if err := src.Update(ctx, func(tx store.Tx) error { return tx.Put("audit", fmt.Sprintf("k%04d", i), v) }); err != nil {
			t.Fatal(err)
		}
	}
	var buf bytes.Buffer
	if _, err := store.Backup(ctx, src, time.Now(), &buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestRestoreWithinATxn: a restore into a fenced etcd prefix (the ops a
// fenced Txn has, less what the restore adds: its mark, the format, an
// audit record in Finish) of values whose batches of keys would be over
// etcd's bytes a Txn: every batch fits, by keys and by bytes.
func TestRestoreWithinATxn(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	fence := newFence(t, cli)
	for name, c := range map[string]struct{ n, size int }{
		"many keys":  {400, 10},
		"big values": {300, 9 << 10},
	} {
		t.Run(name, func(t *testing.T) {
			backup := backupOf(t, cli, "/src/"+strings.ReplaceAll(name, " ", "-"), c.n, c.size)
			dst := open(t, cli, etcd.Options{Prefix: "/dst/" + strings.ReplaceAll(name, " ", "-"), Fence: fence})
			info, err := store.Restore(context.Background(), dst, bytes.NewReader(backup), store.RestoreOptions{
				Finish: func(tx store.Tx, _ store.BackupInfo) error {
					for _, k := range []string{"seq", "record", "index"} { // as audit.Append writes
						if err := tx.Put("restore", k, []byte("x")); err != nil {
							return err
						}
					}
					return nil
				}})
			if err != nil || info.Records != c.n+1 {
				t.Fatalf("Restore: %+v, %v; want %d keys", info, err, c.n+1)
			}
		})
	}
}

// gated is a store whose first Update waits until release is closed: the
// moment between a restore's check that its target is empty and its first
// batch.
type gated struct {
	*etcd.Store
	once             sync.Once
	reached, release chan struct{}
}

func (g *gated) Update(ctx context.Context, fn func(store.Tx) error) error {
	g.once.Do(func() { close(g.reached); <-g.release })
	return g.Store.Update(ctx, fn)
}

// TestRestoreRefusesATargetWrittenMeanwhile: a bridge that begins leading
// on the prefix after the restore found it empty (it stamps its format) is
// noticed by the restore's first batch: nothing of the backup is written,
// the bridge's keys stay as they are.
func TestRestoreRefusesATargetWrittenMeanwhile(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	ctx := context.Background()
	backup := backupOf(t, cli, "/src", 10, 10)
	g := &gated{Store: open(t, cli, etcd.Options{Prefix: "/dst"}), reached: make(chan struct{}), release: make(chan struct{})}
	done := make(chan error, 1)
	go func() {
		_, err := store.Restore(ctx, g, bytes.NewReader(backup), store.RestoreOptions{})
		done <- err
	}()
	<-g.reached
	leader := open(t, cli, etcd.Options{Prefix: "/dst"})
	if err := leader.Update(ctx, func(tx store.Tx) error {
		if err := store.WriteFormat(tx, 2); err != nil {
			return err
		}
		return tx.Put("requests", "R-leader", []byte("the leader's"))
	}); err != nil {
		t.Fatal(err)
	}
	close(g.release)
	err := <-done
	if err == nil || !strings.Contains(err.Error(), "no longer empty") {
		t.Fatalf("Restore over a store a bridge began writing: %v; want a refusal", err)
	}
	resp, err := cli.Get(ctx, "/dst/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, kv := range resp.Kvs {
		keys = append(keys, string(kv.Key))
	}
	if len(keys) != 2 {
		t.Errorf("keys under the prefix: %v; want the bridge's two only", keys)
	}
}

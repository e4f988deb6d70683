package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/roombridge/roombridge/store"
	"github.com/roombridge/roombridge/store/etcd"
	"github.com/roombridge/roombridge/store/etcd/etcdtest"
)

// A read of Options.Absent is taken as missing without a round trip; a key
// that was there after all (written behind the store's back, as by a
// redelivered event) is never missed: the Txn's compare fails, nothing is
// written, and the Update runs again reading it from etcd. That holds for
// an Update that writes nothing, and for more guesses than one Txn can
// compare.
func TestGuessedMissingKeyIsChecked(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	s := open(t, cli, etcd.Options{Prefix: "/ab", Absent: []string{"seen"}, MaxTxnOps: 8})
	ctx := context.Background()
	// read runs an Update reading keys of "seen", writing out if set.
	read := func(out string, keys ...string) (found []string, runs int) {
		t.Helper()
		err := s.Update(ctx, func(tx store.Tx) error {
			runs++
			found = nil
			for _, k := range keys {
				v, err := tx.Get("seen", k)
				switch {
				case err == nil:
					found = append(found, k+"="+string(v))
				case !errors.Is(err, store.ErrNotFound):
					return err
				}
			}
			if out == "" {
				return nil
			}
			return tx.Put("out", out, []byte(fmt.Sprint(found)))
		})
		if err != nil {
			t.Fatal(err)
		}
		return found, runs
	}
	if found, runs := read("a", "e1"); len(found) != 0 || runs != 1 {
		t.Fatalf("missing key: found %v in %d runs, want none in 1", found, runs)
	}
	if _, err := cli.Put(ctx, "/ab/seen/e2", "x"); err != nil {
		t.Fatal(err)
	}
	if found, runs := read("b", "e2"); fmt.Sprint(found) != "[e2=x]" || runs != 2 {
		t.Fatalf("key written behind the store's back: found %v in %d runs, want [e2=x] in 2", found, runs)
	}
	if _, err := cli.Put(ctx, "/ab/seen/e3", "y"); err != nil {
		t.Fatal(err)
	}
	if found, _ := read("", "e3"); fmt.Sprint(found) != "[e3=y]" {
		t.Fatalf("an Update writing nothing: found %v, want [e3=y]", found)
	}
	many := []string{"m0", "m1", "m2", "m3", "m4", "m5", "m6", "m7", "m8", "e2"}
	if found, _ := read("c", many...); fmt.Sprint(found) != "[e2=x]" {
		t.Fatalf("more guesses than one Txn compares: found %v, want [e2=x]", found)
	}
	for k, want := range map[string]string{"a": "[]", "b": "[e2=x]", "c": "[e2=x]"} {
		resp, err := cli.Get(ctx, "/ab/out/"+k)
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != want || resp.Kvs[0].Version != 1 {
			t.Errorf("out/%s: %v, want %s written once", k, resp.Kvs, want)
		}
	}
}

package etcd

import (
	"context"
	"errors"
	"strings"

	"github.com/roombridge/roombridge/store"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// dumpPage is how many keys one range read of Dump fetches.
const dumpPage = 1024

// Dump implements store.Dumper: the whole prefix, read in pages at the
// revision of the first page, so the keys are those of one instant however
// the leader writes meanwhile.
func (s *Store) Dump(ctx context.Context, fn func(bucket, key string, value []byte) error) error {
	if s.gc.Closed() {
		return store.ErrClosed
	}
	pfx := s.prefix + "/"
	from, end := pfx, clientv3.GetPrefixRangeEnd(pfx)
	var rev int64
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(dumpPage),
			clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend)}
		if rev > 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		rctx, cancel := context.WithTimeout(ctx, s.opt.Timeout)
		resp, err := s.cli.Get(rctx, from, opts...)
		cancel()
		if err != nil {
			return wrap("dump", err)
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		for _, kv := range resp.Kvs {
			bucket, key, ok := strings.Cut(strings.TrimPrefix(string(kv.Key), pfx), "/")
			if !ok {
				continue // not a bucket's key
			}
			if err := fn(bucket, key, kv.Value); err != nil {
				if errors.Is(err, store.ErrStop) {
					return nil
				}
				return err
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return nil
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

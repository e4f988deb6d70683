package requests

import (
	"context"
	"strings"

	"github.com/roombridge/roombridge/store"
)

// Page is List one page at a time: the requests f selects whose ID comes
// after after (zero: from the first), at most f.Limit of them (it must be
// positive), and the ID to pass as after for the next page (zero: this was
// the last).
func (s *Service) Page(ctx context.Context, f Filter, after ID) ([]*Request, ID, error) {
	var out []*Request
	more := false
	err := s.store.View(ctx, func(tx store.Tx) error {
		p := ""
		bucket := bucketRequests
		if f.State != 0 {
			p, bucket = f.State.String()+"/", bucketByState
		}
		from := p + s.owner + "/"
		to := store.PrefixEnd(from)
		if !after.IsZero() {
			from += after.Key() + "\x00"
		}
		return tx.Scan(bucket, from, to, func(k string, _ []byte) error {
			var r Request
			if err := store.GetJSON(tx, bucketRequests, strings.TrimPrefix(k, p), &r); err != nil {
				return err
			}
			if f.Agent != "" && r.Agent != f.Agent {
				return nil
			}
			if len(out) == f.Limit {
				more = true
				return store.ErrStop
			}
			out = append(out, &r)
			return nil
		})
	})
	if err != nil || !more {
		return out, ID{}, err
	}
	return out, out[len(out)-1].ID, nil
}

package web

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/roombridge/roombridge/store"
)

// sweepBatch is how many expired links or sessions one transaction deletes
// (two deletes each, under etcd's 128 operations per transaction).
const sweepBatch = 50

// expired is a stored link or session past its expiry: what to delete.
type expired struct {
	bucket, key string
	user        string // a session's: its entry in bucketUserSessions
}

// Sweep deletes the sign-in links and sessions expired by now (used ones
// are deleted when used or ended; these were never used or never ended),
// so that they do not accumulate; it reports how many it deleted. The
// core's retention job runs it on the leader.
func (s *Server) Sweep(ctx context.Context, now time.Time) (int, error) {
	var found []expired
	err := s.store.View(ctx, func(tx store.Tx) error {
		found = nil
		for _, b := range []string{bucketLinks, bucketSessions} {
			if err := tx.Scan(b, "", "", func(k string, v []byte) error {
				var e struct {
					User    string    `json:"user"`
					Expires time.Time `json:"expires"`
				}
				if err := json.Unmarshal(v, &e); err != nil || !now.Before(e.Expires) {
					found = append(found, expired{bucket: b, key: k, user: e.User})
				}
				return nil
			}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("web: sweep expired sign-ins: %w", err)
	}
	for i := 0; i < len(found); i += sweepBatch {
		batch := found[i:min(i+sweepBatch, len(found))]
		if err := s.store.Update(ctx, func(tx store.Tx) error {
			for _, e := range batch {
				if err := tx.Delete(e.bucket, e.key); err != nil {
					return err
				}
				if e.bucket == bucketSessions {
					if err := tx.Delete(bucketUserSessions, e.user+"/"+e.key); err != nil {
						return err
					}
				}
			}
			return nil
		}); err != nil {
			return i, fmt.Errorf("web: sweep expired sign-ins: %w", err)
		}
	}
	return len(found), nil
}

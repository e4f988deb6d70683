package store

import (
	"bytes"
	"sync"
)

// EffectCache reads the outbox like PendingEffects, but decodes only the
// effects it has not seen, or whose stored bytes changed since (an
// UpdateEffect: attempts, back-off), and forgets those no longer read (the
// delivered). The outbox's deliverer reads its head on every enqueue: with
// a backlog (a burst into one Slack channel drains at one post a second),
// decoding the whole head each time cost more CPU than everything else the
// bridge does. A comparison of the stored bytes is all a known effect
// costs. The effects returned share their payload with the cache: callers
// must not modify it. Safe for concurrent use; the zero value is ready.
type EffectCache struct {
	mu   sync.Mutex
	seen map[string]cachedEffect
	gen  uint64
}

type cachedEffect struct {
	raw []byte
	e   Effect
	gen uint64
}

// Pending returns up to limit (0: no limit) undelivered effects in
// insertion order, as PendingEffects does.
func (c *EffectCache) Pending(tx Tx, limit int) ([]Effect, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen == nil {
		c.seen = map[string]cachedEffect{}
	}
	c.gen++
	var out []Effect
	err := tx.Scan(bucketOutbox, "", "", func(k string, v []byte) error {
		ce, ok := c.seen[k]
		if !ok || !bytes.Equal(ce.raw, v) {
			ce = cachedEffect{raw: bytes.Clone(v)}
			var err error
			if ce.e, err = decodeEffect(ce.raw); err != nil {
				return err
			}
		}
		ce.gen = c.gen
		c.seen[k] = ce
		out = append(out, ce.e)
		if limit > 0 && len(out) >= limit {
			return ErrStop
		}
		return nil
	})
	for k, ce := range c.seen {
		if ce.gen != c.gen {
			delete(c.seen, k)
		}
	}
	return out, err
}

// Len is how many effects the cache holds (those of the last read).
func (c *EffectCache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.seen)
}

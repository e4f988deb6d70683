// Package ratelimit paces calls to chat platforms per key (a channel, a
// chat, a message, an API): Keyed with a token bucket per key, Spacer with one
// call at a time per key, spaced from the end (or the start) of the previous
// call. Shared by the Slack and Feishu connectors.
package ratelimit

import (
	"context"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Keyed holds a token bucket per key, created on first use.
type Keyed struct {
	every time.Duration
	burst int

	mu      sync.Mutex
	buckets map[string]*rate.Limiter
}

// NewKeyed allows one call per every for each key, with bursts of burst.
func NewKeyed(every time.Duration, burst int) *Keyed {
	return &Keyed{every: every, burst: burst, buckets: map[string]*rate.Limiter{}}
}

func (k *Keyed) bucket(key string) *rate.Limiter {
	k.mu.Lock()
	defer k.mu.Unlock()
	b, ok := k.buckets[key]
	if !ok {
		b = rate.NewLimiter(rate.Every(k.every), k.burst)
		k.buckets[key] = b
	}
	return b
}

// Wait blocks until a call for key is allowed or ctx ends.
func (k *Keyed) Wait(ctx context.Context, key string) error {
	return k.bucket(key).Wait(ctx)
}

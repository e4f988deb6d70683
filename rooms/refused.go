package rooms

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/store"
)

// Refusals of unauthenticated callers (webhooks a connector refused, /v1
// calls without the API token) are each logged, but only RefusalsPerWindow
// of them per kind and reason are audited per RefusalWindow, so a flood of
// forged requests cannot fill the store. The first record after a window
// that suppressed some says how many.
const (
	RefusalsPerWindow = 5
	RefusalWindow     = time.Minute
)

// Refusals counts refusals per key (kind and reason) in the current window
// and audits them at that bounded rate. The zero value is ready to use.
type Refusals struct {
	mu sync.Mutex
	m  map[string]*refusalWindow
}

type refusalWindow struct {
	start      time.Time
	recorded   int
	suppressed int // in the previous windows, not yet told
}

// admit reports whether a refusal with key at now is to be audited, and how
// many before it were not.
func (w *Refusals) admit(key string, now time.Time) (bool, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil {
		w.m = map[string]*refusalWindow{}
	}
	cur := w.m[key]
	if cur == nil {
		if len(w.m) >= 1024 { // reasons are few; bound the map anyway
			clear(w.m)
		}
		cur = &refusalWindow{start: now}
		w.m[key] = cur
	}
	if now.Sub(cur.start) >= RefusalWindow {
		cur.start, cur.recorded = now, 0
	}
	if cur.recorded >= RefusalsPerWindow {
		cur.suppressed++
		return false, 0
	}
	cur.recorded++
	n := cur.suppressed
	cur.suppressed = 0
	return true, n
}

// Audit appends rec (its Time set) unless RefusalsPerWindow records of key
// were audited in this window already; the first record after some were
// suppressed says how many in its Detail.
func (w *Refusals) Audit(ctx context.Context, st store.Store, key string, rec audit.Record) error {
	ok, suppressed := w.admit(key, rec.Time)
	if !ok {
		return nil
	}
	if suppressed > 0 {
		rec.Detail += fmt.Sprintf(" (and %d more like it not recorded; see the log)", suppressed)
	}
	return st.Update(ctx, func(tx store.Tx) error { return audit.Append(tx, rec) })
}

// auditWebhookRefusal records a webhook a connector refused (chat.Refused),
// at a bounded rate.
func (rt *Router) auditWebhookRefusal(ctx context.Context, ev chat.Event) {
	err := rt.refusals.Audit(ctx, rt.svc.Store(), ev.Surface+"\x00"+ev.Text, audit.Record{Time: rt.svc.Clock().Now(),
		Actor: ev.User, Surface: ev.Surface, Action: "webhook_refused", Detail: ev.Text})
	if err != nil {
		rt.log.WarnContext(ctx, "auditing a refused webhook", "surface", ev.Surface, "error", err)
	}
}

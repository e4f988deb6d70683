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

// Webhook refusals come from unauthenticated senders: each is logged by its
// connector, but only RefusalsPerWindow of them per surface and reason are
// audited per RefusalWindow, so a flood of forged requests cannot fill the
// store. The first record after a window that suppressed some says how many.
const (
	RefusalsPerWindow = 5
	RefusalWindow     = time.Minute
)

// refusalWindows counts refusals per surface and reason in the current
// window.
type refusalWindows struct {
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
func (w *refusalWindows) admit(key string, now time.Time) (bool, int) {
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

// auditWebhookRefusal records a webhook a connector refused (chat.Refused),
// at a bounded rate.
func (rt *Router) auditWebhookRefusal(ctx context.Context, ev chat.Event) {
	now := rt.svc.Clock().Now()
	ok, suppressed := rt.refusals.admit(ev.Surface+"\x00"+ev.Text, now)
	if !ok {
		return
	}
	detail := ev.Text
	if suppressed > 0 {
		detail += fmt.Sprintf(" (and %d more like it not recorded; see the log)", suppressed)
	}
	err := rt.svc.Store().Update(ctx, func(tx store.Tx) error {
		return audit.Append(tx, audit.Record{Time: now, Actor: ev.User, Surface: ev.Surface,
			Action: "webhook_refused", Detail: detail})
	})
	if err != nil {
		rt.log.WarnContext(ctx, "auditing a refused webhook", "surface", ev.Surface, "error", err)
	}
}

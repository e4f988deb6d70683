package requests

import (
	"errors"
	"fmt"
	"time"

	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/internal/clip"
	"github.com/roombridge/roombridge/store"
)

// originTTL is how long the message of an ask is remembered, so that its
// edit or deletion finds the request: longer than an approval waits by
// default (24 h) and than a queue usually holds a request. An edit or a
// deletion later than that is not followed.
const originTTL = 7 * 24 * time.Hour

// ErrStarted: the request has started (or ended), so its ask can no longer
// be edited.
var ErrStarted = errors.New("the request has already started")

// Origin names the chat message that asked: its surface, channel and the
// platform's ID of the message (Ask.Origin).
func Origin(surface, channel, message string) string {
	return surface + ":" + channel + "/" + message
}

// originKey is the dedupe-bucket key under which origin's request is kept.
func (s *Service) originKey(origin string) string { return "origin:" + s.owner + "/" + origin }

// rememberOrigin records that the message origin asked request id ("":
// nothing to record).
func (s *Service) rememberOrigin(tx store.Tx, origin string, id ID, now time.Time) error {
	if origin == "" {
		return nil
	}
	if err := store.Remember(tx, s.originKey(origin), []byte(id.String()), now, originTTL); err != nil {
		return fmt.Errorf("requests: create: remember the ask's message: %w", err)
	}
	return nil
}

// OriginTx returns the request the message origin asked; ok is false when
// no request is known for it (a message that was no ask, or one older than
// originTTL).
func (s *Service) OriginTx(tx store.Tx, origin string) (id ID, ok bool, err error) {
	b, live, err := store.Recall(tx, s.originKey(origin), s.clock.Now())
	if err != nil || !live {
		return ID{}, false, err
	}
	id, err = ParseID(string(b))
	if err != nil {
		return ID{}, false, fmt.Errorf("requests: the request of message %s: %w", origin, err)
	}
	return id, true, nil
}

// EditAskTx replaces the ask of request id by text, for actor (who edited
// the message that asked) on surface: only before the request starts
// (pending or approved; else ErrStarted, and nothing changes). The mentions
// of other requests are read again from the new text. The change is audited
// (ask_edited) and its observers told (the thread's parent shows the new
// ask, a pending approval's card too).
func (s *Service) EditAskTx(tx store.Tx, id ID, actor, surface, text string) (*Request, error) {
	if err := s.checkAsk(text); err != nil {
		return nil, err
	}
	r, err := s.GetTx(tx, id)
	if err != nil {
		return nil, err
	}
	if r.State != Pending && r.State != Approved {
		return r, fmt.Errorf("requests: edit %s: %w (%s)", id, ErrStarted, r.State)
	}
	now := s.clock.Now().UTC()
	var refs []ID
	for _, ref := range FindRefs(text, now) {
		if _, err := s.GetTx(tx, ref); err != nil {
			return nil, fmt.Errorf("requests: edit %s: the ask mentions %s: %w", id, ref, err)
		}
		refs = append(refs, ref)
	}
	after, err := s.UpdateTx(tx, id, actor, "", "", func(r *Request) { r.Ask, r.References = text, refs })
	if err != nil {
		return nil, err
	}
	return after, audit.Append(tx, audit.Record{Time: after.Updated, RequestID: id.String(), Actor: actor, Surface: surface,
		Action: "ask_edited", From: after.State.String(), To: after.State.String(), Detail: clip.Text(text, 200, clip.Bytes)})
}

package approvals

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store"
)

// Inbox is what waits for a decision or an answer in a room, oldest first.
type Inbox struct {
	Room  string `json:"room"`
	Items []Item `json:"items"`
	// Count is the total ("1 of 3").
	Count int `json:"count"`
}

// Item is one pending approval (or open question: Approval.Kind
// "question") of a room's inbox, joined with the request (or task) that
// asks. Delegated work's items name their root request (Approval.Root).
type Item struct {
	Approval *Approval `json:"approval"`
	// Position counts from 1, oldest first; Of is the inbox's total.
	Position int    `json:"position"`
	Of       int    `json:"of"`
	Asking   Asking `json:"asking"`
}

// Asking is the request (or background task) an inbox item is about.
type Asking struct {
	// Kind is "request"; background tasks will add "task".
	Kind      string      `json:"kind"`
	RequestID requests.ID `json:"request_id"`
	Agent     string      `json:"agent"`
	State     string      `json:"state"`
	Requester string      `json:"requester"`
	// Label is who asks, by name and ID.
	Label string `json:"label"`
}

// Inbox lists room's pending approvals and open questions (those of its
// requests, and those of delegated work whose root is in the room), oldest
// first, each with the request that asks. It reads the room's range of the
// pending index only.
func (s *Service) Inbox(ctx context.Context, room string) (*Inbox, error) {
	if _, ok := s.rooms.Named(room); !ok {
		return nil, fmt.Errorf("%w %q", ErrUnknownRoom, room)
	}
	in := &Inbox{Room: room, Items: []Item{}}
	p := url.PathEscape(room) + "/"
	err := s.store.View(ctx, func(tx store.Tx) error {
		in.Items = in.Items[:0]
		return tx.Scan(bucketInbox, p, store.PrefixEnd(p), func(k string, _ []byte) error {
			_, key, ok := strings.Cut(strings.TrimPrefix(k, p), "/")
			if !ok {
				return fmt.Errorf("corrupt inbox key %q", k)
			}
			a, err := getKeyTx(tx, key, key)
			if err != nil {
				return err
			}
			r, err := s.svc.GetTx(tx, a.RequestID)
			if err != nil {
				return err
			}
			label := a.Asker
			if a.Kind == KindQuestion {
				label = QuestionAsker(a)
			}
			in.Items = append(in.Items, Item{Approval: a, Asking: Asking{
				Kind: "request", RequestID: r.ID, Agent: r.Agent, State: r.State.String(),
				Requester: r.Requester, Label: label,
			}})
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("approvals: inbox of %s: %w", room, err)
	}
	in.Count = len(in.Items)
	for i := range in.Items {
		in.Items[i].Position, in.Items[i].Of = i+1, in.Count
	}
	return in, nil
}

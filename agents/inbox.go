package agents

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store"
)

// Buckets of this package.
const (
	// bucketInbox holds input for a request's next turn:
	// <owner>/<request key>/<seq> → Input. Items are acknowledged (deleted)
	// in the transaction that ends the turn that got them, so a turn cut
	// short by a restart gets them again.
	bucketInbox = "agent_inbox"
	// bucketParked marks running requests whose agent yielded, waiting on a
	// delegation or task: <owner>/<request key> → reason.
	bucketParked = "agent_parked"
	// bucketWoken marks running requests that have had a turn after their
	// first (a wake): their agent has had the ask, so a turn of theirs that
	// a restart cut is resumed without it. <owner>/<request key> → "1".
	bucketWoken = "agent_woken"
)

// ErrEnded: the request has ended; input for it cannot be delivered.
var ErrEnded = errors.New("the request has ended")

func requestKey(r *requests.Request) string { return r.Owner + "/" + r.ID.Key() }

// DeliverTx queues in for request id's next turn, inside the caller's
// transaction. It is never spliced into a running turn: the agent gets it at
// its next turn boundary (the next turn of a request that waits, or the
// first turn of a queued one). A request that has ended gets nothing:
// ErrEnded.
func DeliverTx(tx store.Tx, svc *requests.Service, id requests.ID, in Input) error {
	r, err := svc.GetTx(tx, id)
	if err != nil {
		return err
	}
	if r.State.Terminal() {
		return fmt.Errorf("%w: %s is %s", ErrEnded, r.ID, r.State)
	}
	n, err := store.NextSeq(tx, bucketInbox+"/"+requestKey(r))
	if err != nil {
		return err
	}
	if err := store.PutJSON(tx, bucketInbox, fmt.Sprintf("%s/%010d", requestKey(r), n), in); err != nil {
		return err
	}
	tx.Notify(requests.TopicAgent(r.Agent))
	return nil
}

// Reply delivers a person's reply in request id's thread to its agent (at
// the next turn boundary), with an audit record.
func Reply(ctx context.Context, svc *requests.Service, id requests.ID, user, surface, text string) error {
	_, err := ReplyEvent(ctx, svc, id, user, surface, text, "")
	return err
}

// replyDedupeTTL is how long a platform's event ID of a reply is remembered:
// longer than the platforms' redelivery windows.
const replyDedupeTTL = 24 * time.Hour

// ReplyEvent is Reply for a platform event: the same eventKey ("slack:Ev1")
// delivered again is recognised in the same transaction and delivers
// nothing (it reports false).
func ReplyEvent(ctx context.Context, svc *requests.Service, id requests.ID, user, surface, text, eventKey string) (bool, error) {
	text = strings.TrimSpace(text)
	if text == "" {
		return false, errors.New("agents: reply: the reply is empty")
	}
	delivered := false
	err := svc.Store().Update(ctx, func(tx store.Tx) error {
		delivered = false
		if eventKey != "" {
			fresh, err := store.Dedupe(tx, "reply:"+eventKey, svc.Clock().Now(), replyDedupeTTL)
			if err != nil || !fresh {
				return err
			}
		}
		if err := DeliverTx(tx, svc, id, Input{Kind: InputReply, Text: text, From: user}); err != nil {
			return err
		}
		delivered = true
		return audit.Append(tx, audit.Record{Time: svc.Clock().Now().UTC(), RequestID: id.String(), Actor: user,
			Surface: surface, Action: "reply", Detail: trimLine(text, 200)})
	})
	if err != nil {
		return false, fmt.Errorf("agents: reply to %s: %w", id, err)
	}
	return delivered, nil
}

// inboxItem is a queued input and its key.
type inboxItem struct {
	key string
	in  Input
}

// inboxTx returns request r's queued input in order.
func inboxTx(tx store.Tx, r *requests.Request) ([]inboxItem, error) {
	var out []inboxItem
	p := requestKey(r) + "/"
	err := tx.Scan(bucketInbox, p, store.PrefixEnd(p), func(k string, _ []byte) error {
		var in Input
		if err := store.GetJSON(tx, bucketInbox, k, &in); err != nil {
			return err
		}
		out = append(out, inboxItem{key: k, in: in})
		return nil
	})
	return out, err
}

// wokenTx reports whether running request r has had a turn after its first.
func wokenTx(tx store.Tx, r *requests.Request) (bool, error) {
	_, err := tx.Get(bucketWoken, requestKey(r))
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// parkedTx reports whether running request r waits (its agent yielded).
func parkedTx(tx store.Tx, r *requests.Request) (bool, error) {
	_, err := tx.Get(bucketParked, requestKey(r))
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

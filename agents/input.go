package agents

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/internal/clip"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store"
)

// Buckets of this package.
const (
	// bucketInput holds the pending input of a request's next turn (the
	// name "agent_inbox" is what the store has always called it):
	// <owner>/<request key>/<seq> → Input. Items are acknowledged (deleted)
	// in the transaction that ends the turn that got them, so a turn cut
	// short by a restart gets them again.
	bucketInput = "agent_inbox"
	// bucketParked marks running requests whose agent yielded, waiting on a
	// delegation or task: <owner>/<request key> → reason.
	bucketParked = "agent_parked"
	// bucketTurns records the current turn of running requests: <owner>/
	// <request key> → turnRecord, written by the transaction that starts or
	// wakes the request for a turn and kept when a restart resumes it.
	bucketTurns = "agent_turns"
	// bucketWoken is the marker that bucketTurns replaces: <owner>/<request
	// key> → "1" for a request that had a turn after its first. Written by
	// earlier versions; still read (a request woken before an upgrade), and
	// deleted when the request ends.
	bucketWoken = "agent_woken"
	// bucketCalls journals the exec-protocol calls of a request's current
	// turn that make something (a delegated request, a task, an approval,
	// a question): <owner>/<request key>/<turn>/<call id> → callRecord, and
	// the MCP calls sent with a key (MCPCallKey) under
	// <owner>/<request key>/mcp/<key digest>. A resumed turn that repeats a
	// call, or a call sent again, gets the recorded answer (see CallKey). A
	// request's records go when its turn ends (park or end): no later turn
	// repeats them. None is written for a request that has ended (an ask
	// journaled after its turn: recordAsk).
	bucketCalls = "agent_calls"
)

// ErrEnded: the request has ended; input for it cannot be delivered.
var ErrEnded = errors.New("the request has ended")

func requestKey(r *requests.Request) string { return ownedKey(r.Owner, r.ID) }

// ownedKey is the key of the request of owner with id in this package's
// buckets (requestKey): a request of the scheduler's service has its
// owner (requests.Service.Owner).
func ownedKey(owner string, id requests.ID) string { return owner + "/" + id.Key() }

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
	n, err := store.NextSeq(tx, bucketInput+"/"+requestKey(r))
	if err != nil {
		return err
	}
	if err := store.PutJSON(tx, bucketInput, fmt.Sprintf("%s/%010d", requestKey(r), n), in); err != nil {
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
	text = svc.Clip(text) // a reply is a message of the request: cut to its bound
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
			Surface: surface, Action: "reply", Detail: clip.Line(text, 200, clip.Bytes)})
	})
	if err != nil {
		return false, fmt.Errorf("agents: reply to %s: %w", id, err)
	}
	return delivered, nil
}

// pendingInput is an input queued for a request's next turn, and its key.
type pendingInput struct {
	key string
	in  Input
}

// pendingInputTx returns the input queued for request r's next turn, in
// order.
func pendingInputTx(tx store.Tx, r *requests.Request) ([]pendingInput, error) {
	var out []pendingInput
	p := requestKey(r) + "/"
	err := tx.Scan(bucketInput, p, store.PrefixEnd(p), func(k string, _ []byte) error {
		var in Input
		if err := store.GetJSON(tx, bucketInput, k, &in); err != nil {
			return err
		}
		out = append(out, pendingInput{key: k, in: in})
		return nil
	})
	return out, err
}

// turnRecord is the current turn of a running request.
type turnRecord struct {
	// Turn numbers the request's turns: the first is 1, each wake adds
	// one, and a resumed turn keeps the number of the turn it repeats.
	// Past 1, the agent has had the ask, so a turn that a restart cut is
	// resumed without it. Calls are journaled by turn (bucketCalls).
	Turn int `json:"turn"`
	// Upto is the key of the last pending input item the turn got ("":
	// none). A resumed turn gets the delegated results (answers, task results) the
	// cut turn got, and no later one: those arrived during the turn, as for
	// a turn no restart cut, and go to the next turn (or are reported
	// undelivered if there is none). An agent that repeats its calls then
	// gets, at the next turn, the result of a call it repeated, once.
	Upto string `json:"upto,omitempty"`
	// Mark is how far a runtime that runs the turn elsewhere got: the
	// last of its numbered reports applied (see sink.Marking), written in
	// the transaction that applied it; a resumed turn keeps it, the next
	// turn starts again at 0.
	Mark int `json:"mark,omitempty"`
}

// turnTx returns running request r's current turn, and whether it has had
// a turn after its first. A request started by an earlier version has none
// (nil).
func turnTx(tx store.Tx, r *requests.Request) (*turnRecord, bool, error) {
	var t *turnRecord
	var rec turnRecord
	switch err := store.GetJSON(tx, bucketTurns, requestKey(r), &rec); {
	case err == nil:
		t = &rec
	case !errors.Is(err, store.ErrNotFound):
		return nil, false, fmt.Errorf("turn of %s: %w", r.ID, err)
	}
	if t != nil && t.Turn > 1 {
		return t, true, nil
	}
	_, err := tx.Get(bucketWoken, requestKey(r))
	if errors.Is(err, store.ErrNotFound) {
		return t, false, nil
	}
	return t, err == nil, err
}

// putTurnTx records turn number n of running request r, which got pending
// input got.
func putTurnTx(tx store.Tx, r *requests.Request, n int, got []pendingInput) error {
	t := turnRecord{Turn: n}
	if len(got) > 0 {
		t.Upto = got[len(got)-1].key
	}
	return store.PutJSON(tx, bucketTurns, requestKey(r), t)
}

// resumedInput is the pending input that the resumed turn of request turn
// t gets: in, less the delegated results that came after those the cut turn got
// (see turnRecord.Upto). Without a record (nil) it is all of in.
func resumedInput(t *turnRecord, in []pendingInput) []pendingInput {
	if t == nil {
		return in
	}
	return slices.DeleteFunc(in, func(it pendingInput) bool { return delegatedResult(it.in) && it.key > t.Upto })
}

// parkedTx reports whether running request r waits (its agent yielded).
func parkedTx(tx store.Tx, r *requests.Request) (bool, error) {
	_, err := tx.Get(bucketParked, requestKey(r))
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// references are the results of the requests r's ask mentions.
func (s *Scheduler) references(ctx context.Context, r *requests.Request) ([]Input, error) {
	var in []Input
	err := s.svc.Store().View(ctx, func(tx store.Tx) error {
		for _, id := range r.References {
			ref, err := s.svc.GetTx(tx, id)
			if err != nil {
				return fmt.Errorf("reference %s: %w", id, err)
			}
			text := ref.Result
			if text == "" && ref.Reason != "" {
				text = ref.Reason
			}
			in = append(in, Input{Kind: InputReference, RequestID: id.String(), State: ref.State.String(), Text: text})
		}
		return nil
	})
	return in, err
}

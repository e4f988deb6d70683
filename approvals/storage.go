package approvals

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/roombridge/roombridge/internal/jsonx"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store"
)

func getTx(tx store.Tx, r ref) (*Approval, error) {
	return getKeyTx(tx, r.key(), r.String())
}

func getKeyTx(tx store.Tx, key, name string) (*Approval, error) {
	var a Approval
	err := store.GetJSON(tx, bucketApprovals, key, &a)
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("%w %s", ErrUnknown, name)
	}
	if err != nil {
		return nil, fmt.Errorf("approvals: get %s: %w", name, err)
	}
	return &a, nil
}

func (a *Approval) ref() ref {
	r := ref{req: a.RequestID}
	if _, n, ok := strings.Cut(a.ID, "."); ok {
		n, r.q = strings.CutPrefix(n, "q")
		r.n, _ = strconv.Atoi(n)
	}
	return r
}

// threadRequests are the requests in whose threads question a is shown (and
// may be answered by a reply): the asking request's, and its root's.
func (a *Approval) threadRequests() []requests.ID {
	if !a.Root.IsZero() && a.Root != a.RequestID {
		return []requests.ID{a.RequestID, a.Root}
	}
	return []requests.ID{a.RequestID}
}

func threadQuestionKey(thread requests.ID, a *Approval, key string) string {
	return fmt.Sprintf("%s/%013d/%s", thread.Key(), a.Created.UnixMilli(), key)
}

// inboxRooms are the rooms whose inbox lists a.
func (a *Approval) inboxRooms() []string {
	if a.RootRoom != "" && a.RootRoom != a.Room {
		return []string{a.Room, a.RootRoom}
	}
	return []string{a.Room}
}

func inboxKey(room string, a *Approval, key string) string {
	var buf [96]byte // one allocation, the string's, for most keys
	b := jsonx.AppendPadded(append(append(buf[:0], url.PathEscape(room)...), '/'), a.Created.UnixMilli(), 13)
	return string(append(append(b, '/'), key...))
}

// putTx writes a (encoded: its JSON, or nil to encode it here), keeping the
// expiry, inbox and open indexes in step with its state, and wakes its
// waiters.
func putTx(tx store.Tx, before, a *Approval, encoded []byte) error {
	return putEditsTx(tx, a, encoded, editsOf(before, a))
}

// edits are the keys of the indexes of an approval's state that its move
// from before to a changes (editsOf), and a's key: built ahead of the
// transaction that writes them, off the store's writer, for a settlement.
type edits struct {
	key  string // a's, in bucketApprovals
	list []edit
}

// edit puts (put) or deletes key in bucket; in the expiry index, as a
// store.TimerKey, when bucket is "".
type edit struct {
	bucket, key string
	put         bool
}

func (es *edits) add(bucket, key string, put bool) {
	es.list = append(es.list, edit{bucket: bucket, key: key, put: put})
}

func (es *edits) timer(kind string, due time.Time, put bool) {
	es.add("", string(store.TimerKeyOf(kind, due, es.key)), put)
}

// pending puts (put) or deletes the index keys of p while it is pending.
func (es *edits) pending(p *Approval, put bool) {
	es.timer(TimerKind, p.ExpiresAt, put)
	for _, room := range p.inboxRooms() {
		es.add(bucketInbox, inboxKey(room, p, es.key), put)
	}
	es.add(bucketOpen, es.key, put)
	if p.Kind == KindQuestion {
		for _, th := range p.threadRequests() {
			es.add(bucketThreadQuestions, threadQuestionKey(th, p, es.key), put)
		}
	}
}

// editsOf are the edits of a's move from before (nil: a's creation): its
// notice timer due at a.NoticeAt while a is pending, gone once it is
// settled; and while it is pending, its expiry timer, its rooms' inboxes,
// the open index and, for a question, its threads' questions.
func editsOf(before, a *Approval) edits {
	es := edits{key: a.ref().key(), list: make([]edit, 0, 5)}
	var was, will time.Time
	if before != nil && before.State == Pending {
		was = before.NoticeAt
	}
	if a.State == Pending {
		will = a.NoticeAt
	}
	if !was.Equal(will) && !was.IsZero() {
		es.timer(NoticeKind, was, false)
	}
	if !was.Equal(will) && !will.IsZero() {
		es.timer(NoticeKind, will, true)
	}
	switch {
	case before != nil && before.State == Pending && a.State != Pending:
		es.pending(before, false)
	case before == nil && a.State == Pending:
		es.pending(a, true)
	}
	return es
}

// putEditsTx writes a (encoded: its JSON, or nil to encode it here) under
// es.key with the edits of es, and wakes a's waiters.
func putEditsTx(tx store.Tx, a *Approval, encoded []byte, es edits) error {
	for _, e := range es.list {
		var err error
		switch {
		case e.bucket == "" && e.put:
			err = store.TimerKey(e.key).Add(tx)
		case e.bucket == "":
			err = store.TimerKey(e.key).Remove(tx)
		case e.put:
			err = tx.Put(e.bucket, e.key, nil)
		default:
			err = tx.Delete(e.bucket, e.key)
		}
		if err != nil {
			return err
		}
	}
	if encoded == nil {
		var err error
		if encoded, err = a.encode(); err != nil {
			return err
		}
	}
	if err := tx.Put(bucketApprovals, es.key, encoded); err != nil {
		return fmt.Errorf("approvals: write %s: %w", a.ID, err)
	}
	tx.Notify(TopicApprovals)
	return nil
}

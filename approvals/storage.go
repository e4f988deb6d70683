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
	b := make([]byte, 0, len(room)+len(key)+15)
	b = jsonx.AppendPadded(append(append(b, url.PathEscape(room)...), '/'), a.Created.UnixMilli(), 13)
	return string(append(append(b, '/'), key...))
}

// putTx writes a (encoded: its JSON, or nil to encode it here), keeping the
// expiry, inbox and open indexes in step with its state, and wakes its
// waiters.
func putTx(tx store.Tx, before, a *Approval, encoded []byte) error {
	key := a.ref().key()
	if err := moveNoticeTx(tx, before, a, key); err != nil {
		return err
	}
	if before != nil && before.State == Pending && a.State != Pending {
		if err := store.RemoveTimer(tx, TimerKind, before.ExpiresAt, key); err != nil {
			return err
		}
		for _, room := range before.inboxRooms() {
			if err := tx.Delete(bucketInbox, inboxKey(room, before, key)); err != nil {
				return err
			}
		}
		if err := tx.Delete(bucketOpen, key); err != nil {
			return err
		}
		if before.Kind == KindQuestion {
			for _, th := range before.threadRequests() {
				if err := tx.Delete(bucketThreadQuestions, threadQuestionKey(th, before, key)); err != nil {
					return err
				}
			}
		}
	}
	if before == nil && a.State == Pending {
		if err := store.AddTimer(tx, TimerKind, a.ExpiresAt, key); err != nil {
			return err
		}
		for _, room := range a.inboxRooms() {
			if err := tx.Put(bucketInbox, inboxKey(room, a, key), nil); err != nil {
				return err
			}
		}
		if err := tx.Put(bucketOpen, key, nil); err != nil {
			return err
		}
		if a.Kind == KindQuestion {
			for _, th := range a.threadRequests() {
				if err := tx.Put(bucketThreadQuestions, threadQuestionKey(th, a, key), nil); err != nil {
					return err
				}
			}
		}
	}
	if encoded == nil {
		var err error
		if encoded, err = a.encode(); err != nil {
			return err
		}
	}
	if err := tx.Put(bucketApprovals, key, encoded); err != nil {
		return fmt.Errorf("approvals: write %s: %w", a.ID, err)
	}
	tx.Notify(TopicApprovals)
	return nil
}

// moveNoticeTx keeps a's notice timer in step: due at a.NoticeAt while a is
// pending, gone once it is settled.
func moveNoticeTx(tx store.Tx, before, a *Approval, key string) error {
	var was, will time.Time
	if before != nil && before.State == Pending {
		was = before.NoticeAt
	}
	if a.State == Pending {
		will = a.NoticeAt
	}
	if was.Equal(will) {
		return nil
	}
	if !was.IsZero() {
		if err := store.RemoveTimer(tx, NoticeKind, was, key); err != nil {
			return err
		}
	}
	if !will.IsZero() {
		return store.AddTimer(tx, NoticeKind, will, key)
	}
	return nil
}

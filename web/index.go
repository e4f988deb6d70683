package web

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store"
)

// The room index lists each room's requests newest first, so that a room
// page reads one page of keys whatever the number of requests:
// <room>/<inverted ID key> → nil. It is kept by Observe in the transaction
// of every change, and built once for requests stored before (Backfill).
const (
	bucketRoomIndex = "web_room_index"
	bucketMeta      = "web_meta"
	metaIndexed     = "room_index_v1"
)

// TopicRoom is notified on every change of a request of room: the SSE
// streams of the people who may see that room wake on it.
func TopicRoom(room string) string { return "web:room:" + room }

// inverted maps an ID's key (digits and '-') so that byte order is newest
// first.
func inverted(id requests.ID) string {
	b := []byte(id.Key())
	for i, c := range b {
		if c >= '0' && c <= '9' {
			b[i] = '9' - c + '0'
		}
	}
	return string(b)
}

func fromInverted(k string) (requests.ID, error) {
	b := []byte(k)
	for i, c := range b {
		if c >= '0' && c <= '9' {
			b[i] = '9' - c + '0'
		}
	}
	day, n, ok := strings.Cut(string(b), "-")
	if !ok {
		return requests.ID{}, fmt.Errorf("web: corrupt index key %q", k)
	}
	num, err := strconv.Atoi(n)
	if err != nil {
		return requests.ID{}, fmt.Errorf("web: corrupt index key %q", k)
	}
	return requests.ParseID(fmt.Sprintf("R%s-%02d", day, num))
}

func roomPrefix(room string) string { return url.PathEscape(room) + "/" }

// Observe is the web room's request observer: it indexes a new request in
// its room and wakes the room's live pages.
func (s *Server) Observe(tx store.Tx, before, after *requests.Request) error {
	if after == nil {
		return nil
	}
	if before == nil {
		if err := tx.Put(bucketRoomIndex, roomPrefix(after.Room)+inverted(after.ID), nil); err != nil {
			return fmt.Errorf("web: index %s: %w", after.ID, err)
		}
	}
	tx.Notify(TopicRoom(after.Room))
	return nil
}

// Backfill indexes the requests stored before the web room kept its index
// (once: a mark in the store says it is done).
func (s *Server) Backfill(ctx context.Context) error {
	err := s.store.Update(ctx, func(tx store.Tx) error {
		if _, err := tx.Get(bucketMeta, metaIndexed); err == nil {
			return nil
		}
		if err := s.svc.EachTx(tx, func(r *requests.Request) error {
			return tx.Put(bucketRoomIndex, roomPrefix(r.Room)+inverted(r.ID), nil)
		}); err != nil {
			return err
		}
		return tx.Put(bucketMeta, metaIndexed, []byte("1"))
	})
	if err != nil {
		return fmt.Errorf("web: backfill the room index: %w", err)
	}
	return nil
}

// page is one page of a room's requests, newest first.
type page struct {
	Requests []*requests.Request
	// Next is the ID to continue after ("": the last page).
	Next string
}

// roomRequests reads up to limit requests of room after the request after
// (zero: from the newest), keeping those of state and agent (zero, "":
// any).
func (s *Server) roomRequests(ctx context.Context, room string, after requests.ID, state requests.State, agent string, limit int) (page, error) {
	var p page
	pre := roomPrefix(room)
	from := pre
	if !after.IsZero() {
		from = pre + inverted(after) + "\x00"
	}
	err := s.store.View(ctx, func(tx store.Tx) error {
		p = page{}
		return tx.Scan(bucketRoomIndex, from, store.PrefixEnd(pre), func(k string, _ []byte) error {
			id, err := fromInverted(strings.TrimPrefix(k, pre))
			if err != nil {
				return err
			}
			if len(p.Requests) == limit {
				p.Next = p.Requests[limit-1].ID.String()
				return store.ErrStop
			}
			r, err := s.svc.GetTx(tx, id)
			if err != nil {
				return err
			}
			if (state == 0 || r.State == state) && (agent == "" || r.Agent == agent) {
				p.Requests = append(p.Requests, r)
			}
			return nil
		})
	})
	return p, err
}

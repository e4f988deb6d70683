package approvals

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/internal/clip"
	"github.com/roombridge/roombridge/store"
	"github.com/roombridge/roombridge/threads"
)

// NoticeKind is the kind of the approvals' notice timers in the expiry
// index: one per pending approval, due when its card's time left changes
// (TimeLeft) or a reminder falls due, whichever is first. Settling an
// approval removes it with the expiry timer, so a settled approval is never
// updated or reminded of.
const NoticeKind = "approval_notice"

// Message kinds of the notices: a card's time left refreshed (its Kind
// differs from a settled card's "approval", so the outbox tells the two
// apart), and a reminder DM.
const (
	KindTimeLeft = "approval_time_left"
	KindReminder = "approval_reminder"
)

// actionReminded is the audit action of a reminder sent to one approver.
const actionReminded = "approval_reminded"

// TimeLeft is how a card shows the time left d: rounded up to whole days
// above 48 h, whole hours above 1 h, else quarter hours ("3 d", "23 h",
// "45 min"). next is the time left at which the label changes next (0: it
// does not change before the expiry).
func TimeLeft(d time.Duration) (label string, next time.Duration) {
	if d <= 0 {
		return "now", 0
	}
	step, unit := 15*time.Minute, "min"
	switch {
	case d > 48*time.Hour:
		step, unit = 24*time.Hour, "d"
	case d > time.Hour:
		step, unit = time.Hour, "h"
	}
	k := (d + step - 1) / step
	switch {
	case unit == "min" && k == 4:
		label = "1 h"
	case unit == "min":
		label = fmt.Sprintf("%d min", int64(k)*15)
	default:
		label = fmt.Sprintf("%d %s", k, unit)
	}
	return label, (k - 1) * step
}

// shownAt is the time a's card tells the time left as of.
func (a *Approval) shownAt() time.Time {
	if a.ShownAt.IsZero() {
		return a.Created
	}
	return a.ShownAt
}

// left is the time left on a's card.
func (a *Approval) left() string {
	l, _ := TimeLeft(a.ExpiresAt.Sub(a.shownAt()))
	return l
}

// reminders are the times a's approvers are reminded (approvals.remind
// before the expiry, after the creation), earliest first. Questions have no
// approvers to remind.
func (s *Service) reminders(a *Approval) []time.Time {
	if a.Kind == KindQuestion {
		return nil
	}
	var out []time.Time
	for _, d := range s.remind {
		if t := a.ExpiresAt.Add(-d); t.After(a.Created) {
			out = append(out, t)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Before(out[j]) })
	return out
}

// nextNotice is when a's notice timer is due after now: the next change of
// its card's time left or its next reminder not sent, whichever is first
// (zero: none before the expiry).
func (s *Service) nextNotice(a *Approval, now time.Time) time.Time {
	var next time.Time
	if _, d := TimeLeft(a.ExpiresAt.Sub(now)); d > 0 {
		next = a.ExpiresAt.Add(-d)
	}
	for _, t := range s.reminders(a) {
		if t.After(now) && t.After(a.RemindedAt) {
			if next.IsZero() || t.Before(next) {
				next = t
			}
			break
		}
	}
	return next.Truncate(time.Millisecond)
}

// dueReminder is the latest reminder of a due at now and not sent yet
// (reminders missed while no leader swept are sent once, not each).
func (s *Service) dueReminder(a *Approval, now time.Time) (time.Time, bool) {
	var due time.Time
	for _, t := range s.reminders(a) {
		if !t.After(now) && t.After(a.RemindedAt) {
			due = t
		}
	}
	return due, !due.IsZero()
}

// Notices is the ttl.Expirer of the notice timers: it updates the time left
// on the cards and reminds the approvers. Register it with the sweeper after
// the Service itself (an approval due to expire expires first).
func (s *Service) Notices() *Notices { return &Notices{s: s} }

// Notices sends the approvals' notices through the sweeper (Service.Notices).
type Notices struct{ s *Service }

// Due returns up to limit notice timers due at now, earliest first.
func (n *Notices) Due(ctx context.Context, now time.Time, after store.Timer, limit int) ([]store.Timer, error) {
	due, err := store.Due(ctx, n.s.store, NoticeKind, now, after, limit)
	if err != nil {
		return nil, fmt.Errorf("approvals: due notices: %w", err)
	}
	return due, nil
}

// Expire sends the notice of timer t in one transaction: the cards updated
// if their time left changed, the reminder DMs if one is due, and the next
// notice timer. It reports whether it sent anything; a stale timer (the
// approval settled, or its notice moved) is dropped.
func (n *Notices) Expire(ctx context.Context, t store.Timer, now time.Time) (bool, error) {
	var sent bool
	err := n.s.store.Update(ctx, func(tx store.Tx) error {
		sent = false
		a, err := getKeyTx(tx, t.ID, t.ID)
		if err != nil || a.State != Pending || !a.NoticeAt.Equal(t.Due) {
			return store.RemoveTimer(tx, NoticeKind, t.Due, t.ID)
		}
		if !now.Before(a.ExpiresAt) {
			return nil // the expiry settles it (and drops this timer)
		}
		sent, err = n.s.noticeTx(tx, a, now)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("approvals: notice %s: %w", t.ID, err)
	}
	return sent, nil
}

// noticeTx sends pending approval a's notice at now.
func (s *Service) noticeTx(tx store.Tx, a *Approval, now time.Time) (bool, error) {
	after := *a
	after.ShownAt = now
	sent := false
	if after.left() != a.left() {
		m := Card(&after)
		m.Kind = KindTimeLeft
		if err := updateCardsTx(tx, &after, m); err != nil {
			return false, err
		}
		sent = true
	}
	if due, ok := s.dueReminder(a, now); ok {
		after.RemindedAt = due
		if err := s.remindTx(tx, &after, now); err != nil {
			return false, err
		}
		sent = true
	}
	after.NoticeAt = s.nextNotice(&after, now)
	return sent, putTx(tx, a, &after, nil)
}

// remindTx DMs the reminder to each approver of a who has not decided
// (while a is pending, nobody has), and audits each reminder.
func (s *Service) remindTx(tx store.Tx, a *Approval, now time.Time) error {
	m := Reminder(a)
	for _, u := range s.dmApprovers(a) {
		if u == a.DecidedBy {
			continue
		}
		surface, id, _ := strings.Cut(u, ":")
		e := threads.Effect{Op: threads.OpDirect, Request: a.RequestID.String(), Surface: surface, User: id,
			Save: fmt.Sprintf("approval/%s/remind/%d/%s", a.ID, a.RemindedAt.UnixMilli(), u), Message: m}
		if err := threads.Enqueue(tx, e); err != nil {
			return err
		}
		if err := audit.Append(tx, audit.Record{
			Time: now, RequestID: a.RequestID.String(), Actor: ActorTTL, Surface: surface, Action: actionReminded,
			Detail: a.ID + ": reminded " + u + ", expires in " + a.left(),
		}); err != nil {
			return err
		}
	}
	return nil
}

// dmApprovers are the approvers of a's room who get its card as a direct
// message: those on a surface with a running connector (none for a
// question, which is answered in its threads).
func (s *Service) dmApprovers(a *Approval) []string {
	if a.Kind == KindQuestion {
		return nil
	}
	var out []string
	for _, u := range s.rooms.Approvers(a.Room) {
		surface, _, _ := strings.Cut(u, ":")
		if s.rooms.Running(surface) {
			out = append(out, u)
		}
	}
	return out
}

// Reminder is the reminder DMed to an approver of a: what waits, when it
// expires, and how to decide. It is text, not a copy of the card (the card
// DMed at the creation keeps the buttons and is updated on the decision).
func Reminder(a *Approval) chat.Message {
	noun := "Approval"
	if a.Kind == KindAction {
		noun = "Permission"
	}
	return chat.Message{Request: a.RequestID.String(), Kind: KindReminder, Text: fmt.Sprintf(
		"Reminder · %s %s · %s %s: %s · decide on its card, or type: approve %s | deny %s",
		noun, a.ID, a.Agent, expires(a), clip.Line(a.Action, 200, clip.Bytes), a.ID, a.ID)}
}

package approvals

import (
	"context"
	"fmt"
	"strings"

	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store"
)

// MayRevoke reports whether actor may revoke users: the owners and holders
// of the API token.
func (s *Service) MayRevoke(actor string) bool {
	return s.rooms.MayRevoke(actor)
}

// CheckUser reports whether user is written surface:id with a known surface.
func CheckUser(user string) error {
	surface, id, ok := strings.Cut(user, ":")
	switch {
	case !ok || id == "" || strings.ContainsAny(id, " \t\n:/"):
	case surface == chat.Slack, surface == chat.Feishu, surface == chat.Console, surface == chat.API:
		return nil
	}
	return fmt.Errorf("%w: %q (want surface:id, e.g. slack:U123, with surface slack, feishu, console or api)", ErrBadUser, user)
}

// Revoke cancels every request of user that has not started (pending or
// queued), each in its own transaction with its own audit record, and
// withdraws their approvals; the user's running requests finish. The revoke
// itself is audited too. Only owners and API token holders may revoke; a
// refusal is audited and changes nothing. It returns the requests it
// cancelled, in ID order.
func (s *Service) Revoke(ctx context.Context, user, actor, surface string) ([]requests.ID, error) {
	if err := CheckUser(user); err != nil {
		return nil, s.refuseOutside(ctx, "", actor, surface, actionDecisionRefused, "revoke "+user, err)
	}
	if !s.MayRevoke(actor) {
		return nil, s.refuseOutside(ctx, "", actor, surface, actionDecisionRefused, "revoke "+user,
			refuse(ErrForbidden, "%s may not revoke users: only the owners may", actor))
	}
	var ids []requests.ID
	for _, st := range []requests.State{requests.Pending, requests.Approved} {
		list, err := s.svc.List(ctx, requests.Filter{State: st})
		if err != nil {
			return nil, fmt.Errorf("approvals: revoke %s: %w", user, err)
		}
		for _, r := range list {
			if r.Requester == user {
				ids = append(ids, r.ID)
			}
		}
	}
	reason := "access of " + user + " revoked by " + actor
	var cancelled []requests.ID
	for _, id := range ids {
		var done bool
		err := s.store.Update(ctx, func(tx store.Tx) error {
			done = false
			r, err := s.svc.GetTx(tx, id)
			if err != nil {
				return err
			}
			if r.State != requests.Pending && r.State != requests.Approved {
				return nil // it started or ended meanwhile: left alone
			}
			_, err = s.svc.ApplyTx(tx, id, requests.Change{Event: requests.Cancel, Actor: actor, Surface: surface,
				Detail: reason, Mutate: func(r *requests.Request) { r.Reason = reason }})
			done = err == nil
			return err
		})
		if err != nil {
			return cancelled, fmt.Errorf("approvals: revoke %s: cancel %s: %w", user, id, err)
		}
		if done {
			cancelled = append(cancelled, id)
		}
	}
	names := make([]string, len(cancelled))
	for i, id := range cancelled {
		names[i] = id.String()
	}
	err := s.store.Update(ctx, func(tx store.Tx) error {
		return audit.Append(tx, audit.Record{
			Time: s.now(), Actor: actor, Surface: surface, Action: "revoke",
			Detail: fmt.Sprintf("%s: %d waiting request(s) cancelled %v; running ones finish", user, len(cancelled), names),
		})
	})
	if err != nil {
		return cancelled, fmt.Errorf("approvals: revoke %s: %w", user, err)
	}
	for _, end := range s.onRevoke {
		if err := end(ctx, user); err != nil {
			return cancelled, fmt.Errorf("approvals: revoke %s: %w", user, err)
		}
	}
	s.log.InfoContext(ctx, "user revoked", "user", user, "by", actor, "cancelled", len(cancelled))
	return cancelled, nil
}

// OnRevoke adds what a revoke also ends (the user's web sessions): end runs
// after the user's waiting requests are cancelled.
func (s *Service) OnRevoke(end func(ctx context.Context, user string) error) {
	s.onRevoke = append(s.onRevoke, end)
}

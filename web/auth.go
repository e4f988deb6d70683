package web

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/store"
	"github.com/roombridge/roombridge/threads"
)

// Lifetimes of sign-in links and sessions.
const (
	LinkTTL    = 10 * time.Minute
	SessionTTL = 12 * time.Hour
)

// Buckets of the web room's sign-in state. Tokens are never stored: keys
// are the hex SHA-256 of the token.
const (
	bucketLinks        = "web_links"         // hash → link
	bucketSessions     = "web_sessions"      // hash → session
	bucketUserSessions = "web_user_sessions" // user/hash → nil (revoke)
	bucketHidden       = "web_hidden"        // user/approval ID → nil (✕ on a card)
)

// cookieName is the session cookie.
const cookieName = "roombridge_session"

// link is a one-time sign-in link, before it is used.
type link struct {
	User    string    `json:"user"`
	Expires time.Time `json:"expires"`
}

// session is a signed-in person.
type session struct {
	User    string    `json:"user"`
	Expires time.Time `json:"expires"`
	// CSRF is the token every POST of this session carries.
	CSRF string `json:"csrf"`
	// Admin: signed in with the API token.
	Admin bool `json:"admin,omitempty"`
	hash  string
}

func newToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand never fails (Go 1.24+)
	return base64.RawURLEncoding.EncodeToString(b)
}

func hashToken(tok string) string {
	h := sha256.Sum256([]byte(tok))
	return hex.EncodeToString(h[:])
}

// SignInLink makes a one-time sign-in link for user (surface:id, who typed
// "web" on surface) and sends it to them by direct message through the
// outbox. It answers what the person is told in chat.
func (s *Server) SignInLink(ctx context.Context, user, surface string) (string, error) {
	tok := newToken()
	url := s.base() + "/signin?t=" + tok
	now := s.now()
	_, id, _ := strings.Cut(user, ":")
	err := s.store.Update(ctx, func(tx store.Tx) error {
		if err := store.PutJSON(tx, bucketLinks, hashToken(tok), link{User: user, Expires: now.Add(LinkTTL)}); err != nil {
			return err
		}
		if err := threads.Enqueue(tx, threads.Effect{Op: threads.OpDirect, Request: "web", Surface: surface, User: id,
			Message: chat.Message{Request: "web", Kind: "notice", IdempotencyKey: "web-signin/" + hashToken(tok)[:16],
				Text: "Sign in to the web room (once, within 10 minutes): " + url}}); err != nil {
			return err
		}
		return audit.Append(tx, audit.Record{Time: now, Actor: user, Surface: surface, Action: "web_link",
			Detail: "sign-in link sent by direct message"})
	})
	if err != nil {
		return "", fmt.Errorf("web: sign-in link: %w", err)
	}
	return "a sign-in link for the web room is on its way to you by direct message (valid 10 minutes, once)", nil
}

// errBadLink: the link is unknown, used or expired.
var errBadLink = errors.New("this sign-in link is unknown, used or expired: type web in chat for a new one")

// useLink consumes the link of tok and opens a session for its person.
func (s *Server) useLink(ctx context.Context, tok string) (*session, string, error) {
	var l link
	var sess *session
	var cookie string
	err := s.store.Update(ctx, func(tx store.Tx) error {
		k := hashToken(tok)
		if err := store.GetJSON(tx, bucketLinks, k, &l); errors.Is(err, store.ErrNotFound) {
			return errBadLink
		} else if err != nil {
			return err
		}
		if err := tx.Delete(bucketLinks, k); err != nil { // single use
			return err
		}
		if !s.now().Before(l.Expires) {
			return nil // deleted, refused after the commit
		}
		var err error
		sess, cookie, err = s.openTx(tx, l.User, false)
		return err
	})
	if err == nil && sess == nil {
		err = errBadLink
	}
	return sess, cookie, err
}

// openTx opens a session for user, audited.
func (s *Server) openTx(tx store.Tx, user string, admin bool) (*session, string, error) {
	tok := newToken()
	sess := &session{User: user, Expires: s.now().Add(SessionTTL), CSRF: newToken(), Admin: admin, hash: hashToken(tok)}
	if err := store.PutJSON(tx, bucketSessions, sess.hash, sess); err != nil {
		return nil, "", err
	}
	if err := tx.Put(bucketUserSessions, user+"/"+sess.hash, nil); err != nil {
		return nil, "", err
	}
	how := "one-time link"
	if admin {
		how = "API token"
	}
	return sess, tok, audit.Append(tx, audit.Record{Time: s.now(), Actor: user, Surface: Surface, Action: "web_signin", Detail: "signed in with " + how})
}

// signInToken opens an admin session for the holder of the API token.
func (s *Server) signInToken(ctx context.Context, tok string) (*session, string, error) {
	if s.token == "" || subtle.ConstantTimeCompare([]byte(tok), []byte(s.token)) != 1 {
		return nil, "", errBadLink
	}
	var sess *session
	var cookie string
	err := s.store.Update(ctx, func(tx store.Tx) error {
		var err error
		sess, cookie, err = s.openTx(tx, chat.API+":token", true)
		return err
	})
	return sess, cookie, err
}

// session returns the live session of r's cookie, or nil.
func (s *Server) session(r *http.Request) *session {
	c, err := r.Cookie(cookieName)
	if err != nil || c.Value == "" {
		return nil
	}
	var sess session
	err = s.store.View(r.Context(), func(tx store.Tx) error {
		return store.GetJSON(tx, bucketSessions, hashToken(c.Value), &sess)
	})
	if err != nil || !s.now().Before(sess.Expires) {
		return nil
	}
	sess.hash = hashToken(c.Value)
	return &sess
}

func (s *Server) setCookie(w http.ResponseWriter, tok string, expires time.Time) {
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: tok, Path: "/", Expires: expires, HttpOnly: true,
		Secure: s.secure, SameSite: http.SameSiteLaxMode})
}

// EndSessions ends every web session of user (bridge revoke USER).
func (s *Server) EndSessions(ctx context.Context, user string) error {
	err := s.store.Update(ctx, func(tx store.Tx) error {
		p := user + "/"
		var keys []string
		if err := tx.Scan(bucketUserSessions, p, store.PrefixEnd(p), func(k string, _ []byte) error {
			keys = append(keys, k)
			return nil
		}); err != nil {
			return err
		}
		for _, k := range keys {
			if err := tx.Delete(bucketSessions, strings.TrimPrefix(k, p)); err != nil {
				return err
			}
			if err := tx.Delete(bucketUserSessions, k); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("web: end sessions of %s: %w", user, err)
	}
	return nil
}

// endSession signs sess out.
func (s *Server) endSession(ctx context.Context, sess *session) error {
	return s.store.Update(ctx, func(tx store.Tx) error {
		if err := tx.Delete(bucketSessions, sess.hash); err != nil {
			return err
		}
		if err := tx.Delete(bucketUserSessions, sess.User+"/"+sess.hash); err != nil {
			return err
		}
		return audit.Append(tx, audit.Record{Time: s.now(), Actor: sess.User, Surface: Surface, Action: "web_signout"})
	})
}

// refuse answers 403 to a refused POST and audits it.
func (s *Server) refuse(w http.ResponseWriter, r *http.Request, actor, why string) {
	err := s.store.Update(r.Context(), func(tx store.Tx) error {
		return audit.Append(tx, audit.Record{Time: s.now(), Actor: actor, Surface: Surface, Action: "web_refused",
			Detail: fmt.Sprintf("%s %s: %s", r.Method, r.URL.Path, why)})
	})
	if err != nil {
		s.log.ErrorContext(r.Context(), "auditing a refused web action", "error", err)
	}
	http.Error(w, "403 forbidden: "+why, http.StatusForbidden)
}

// checkPost authorises a POST: a live session and its CSRF token. On
// refusal it has answered 403 (audited) and returns nil.
func (s *Server) checkPost(w http.ResponseWriter, r *http.Request) *session {
	sess := s.session(r)
	if sess == nil {
		s.refuse(w, r, "web:anonymous", "not signed in")
		return nil
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxForm)
	got := r.PostFormValue("csrf")
	if got == "" || subtle.ConstantTimeCompare([]byte(got), []byte(sess.CSRF)) != 1 {
		s.refuse(w, r, sess.User, "missing or wrong CSRF token")
		return nil
	}
	return sess
}

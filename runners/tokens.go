package runners

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/roombridge/roombridge/store"
)

// bucket holds one Record per runner name.
const bucket = "runners"

// Record is a registered runner as the store keeps it: its token only as a
// SHA-256.
type Record struct {
	Name        string    `json:"name"`
	TokenHash   string    `json:"token_hash"`
	Created     time.Time `json:"created"`
	LastContact time.Time `json:"last_contact,omitzero"`
}

// ErrExists: a runner of that name is already registered.
var ErrExists = errors.New("runner already registered")

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,62}$`)

func hashToken(tok string) string {
	h := sha256.Sum256([]byte(tok))
	return hex.EncodeToString(h[:])
}

// Add registers runner name and returns its token (shown once; the store
// keeps its hash).
func Add(ctx context.Context, st store.Store, now time.Time, name string) (string, error) {
	if !nameRE.MatchString(name) {
		return "", fmt.Errorf("runners: add %q: a name is lower-case letters, digits, '.', '_' or '-'", name)
	}
	var b [24]byte
	_, _ = rand.Read(b[:])
	tok := "rnr_" + hex.EncodeToString(b[:])
	err := st.Update(ctx, func(tx store.Tx) error {
		if _, err := tx.Get(bucket, name); err == nil {
			return fmt.Errorf("%w: %s", ErrExists, name)
		} else if !errors.Is(err, store.ErrNotFound) {
			return err
		}
		return store.PutJSON(tx, bucket, name, Record{Name: name, TokenHash: hashToken(tok), Created: now})
	})
	if err != nil {
		return "", fmt.Errorf("runners: add %s: %w", name, err)
	}
	return tok, nil
}

// List reads every registered runner, by name.
func List(ctx context.Context, st store.Store) ([]Record, error) {
	var out []Record
	err := st.View(ctx, func(tx store.Tx) error {
		return tx.Scan(bucket, "", "", func(_ string, v []byte) error {
			var r Record
			if err := json.Unmarshal(v, &r); err != nil {
				return err
			}
			out = append(out, r)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("runners: list: %w", err)
	}
	return out, nil
}

// remove deletes runner name's record (store.ErrNotFound when none).
func remove(ctx context.Context, st store.Store, name string) error {
	return st.Update(ctx, func(tx store.Tx) error {
		if _, err := tx.Get(bucket, name); err != nil {
			return err
		}
		return tx.Delete(bucket, name)
	})
}

// authenticate finds the runner whose token is tok.
func authenticate(ctx context.Context, st store.Store, name, tok string) (Record, error) {
	var r Record
	err := st.View(ctx, func(tx store.Tx) error { return store.GetJSON(tx, bucket, name, &r) })
	if err != nil {
		return Record{}, err
	}
	if hashToken(tok) != r.TokenHash {
		return Record{}, store.ErrNotFound
	}
	return r, nil
}

// touch records a runner's last contact.
func touch(ctx context.Context, st store.Store, name string, at time.Time) error {
	return st.Update(ctx, func(tx store.Tx) error {
		var r Record
		if err := store.GetJSON(tx, bucket, name, &r); err != nil {
			return err
		}
		r.LastContact = at
		return store.PutJSON(tx, bucket, name, r)
	})
}

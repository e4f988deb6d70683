package bolt_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/roombridge/roombridge/store"
	"github.com/roombridge/roombridge/store/bolt"
	"github.com/roombridge/roombridge/store/storetest"
)

func TestContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T) func() store.Store {
		path := filepath.Join(t.TempDir(), "bridge.db")
		return func() store.Store {
			db, err := bolt.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			return db
		}
	})
}

func TestSecondOpenFailsFast(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bridge.db")
	db, err := bolt.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	_, err = bolt.Open(path)
	if err == nil || !strings.Contains(err.Error(), "in use by another process") {
		t.Fatalf("second Open: %v, want a clear in-use error", err)
	}
}

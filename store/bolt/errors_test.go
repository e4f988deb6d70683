package bolt

import (
	"errors"
	"os"
	"syscall"
	"testing"

	"github.com/roombridge/roombridge/store"
)

// TestNoSpaceIsFull: a commit that failed for want of space (ENOSPC, as
// bbolt reports a write or fdatasync on a full device) is store.ErrFull,
// which callers retry; any other failure is not. (A full device cannot be
// made in a test without privileges, so the classification is tested on
// the error bbolt returns.)
func TestNoSpaceIsFull(t *testing.T) {
	full := commitErr(&os.PathError{Op: "write", Path: "/data/bridge.db", Err: syscall.ENOSPC})
	if !errors.Is(full, store.ErrFull) || !errors.Is(full, syscall.ENOSPC) {
		t.Errorf("ENOSPC: %v; want store.ErrFull wrapping ENOSPC", full)
	}
	if other := commitErr(&os.PathError{Op: "write", Path: "/data/bridge.db", Err: syscall.EIO}); store.Transient(other) {
		t.Errorf("EIO: %v; want a permanent error", other)
	}
}

// Package procgroup runs a child in its own process group, the way the
// bridge and its runners run agents (agents/process) and background
// commands (internal/bgcmd): a signal reaches the child's children too, on
// Linux the kernel signals the child when its parent dies, and the tail of
// what the child writes is kept for a failure's reason.
package procgroup

import (
	"os"
	"sync"
	"syscall"
)

// Attr puts a child in its own process group; on Linux the kernel sends it
// onParentDeath if the process that started it dies (elsewhere that part is
// not available and only the group is set).
func Attr(onParentDeath syscall.Signal) *syscall.SysProcAttr { return attr(onParentDeath) }

// Signal sends sig to p's whole process group. A nil p (never started)
// is a no-op.
func Signal(p *os.Process, sig syscall.Signal) error {
	if p == nil {
		return nil
	}
	return syscall.Kill(-p.Pid, sig)
}

// Tail is an io.Writer that keeps the last Max bytes written to it; it is
// safe for concurrent use (a child's stdout and stderr may share it).
type Tail struct {
	Max int

	mu  sync.Mutex
	buf []byte
}

func (t *Tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.Max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

// String is what the tail holds.
func (t *Tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

package procgroup

import (
	"errors"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func TestTailKeepsTheLastBytes(t *testing.T) {
	tl := &Tail{Max: 8}
	for _, s := range []string{"abc", "defgh", "ijklmnop", "qr"} {
		if n, err := tl.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", s, n, err)
		}
	}
	if got := tl.String(); got != "klmnopqr" {
		t.Fatalf("tail = %q, want %q", got, "klmnopqr")
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				_, _ = tl.Write([]byte("xy"))
			}
		}()
	}
	wg.Wait()
	if got := tl.String(); got != strings.Repeat("xy", 4) {
		t.Fatalf("tail after concurrent writes = %q", got)
	}
}

// TestSignalReachesTheGroup starts a shell whose child sleeps: a signal to
// the group ends both, so Wait returns although the grandchild held the
// pipe open.
func TestSignalReachesTheGroup(t *testing.T) {
	cmd := exec.Command("sh", "-c", "sleep 60 & echo started; wait")
	cmd.SysProcAttr = Attr(syscall.SIGKILL)
	out := &Tail{Max: 64}
	cmd.Stdout = out
	cmd.WaitDelay = 30 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), "started") {
		if time.Now().After(deadline) {
			t.Fatal("the shell never started its child")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := Signal(cmd.Process, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatalf("Wait = %v, want the kill's exit error", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Wait did not return: the group's grandchild survived the signal")
	}
	if err := Signal(nil, syscall.SIGKILL); err != nil {
		t.Fatalf("Signal(nil) = %v", err)
	}
}

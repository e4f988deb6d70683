//go:build unix

package failpoint

import (
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

func TestParse(t *testing.T) {
	got, err := parse("task_ended, request_ended@3")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[TaskEnded].at != 1 || got[RequestEnded].at != 3 {
		t.Fatalf("parse: %+v", got)
	}
	for _, bad := range []string{"x@0", "x@", "x@two", "@2", "x,,y", "x,x@2"} {
		if _, err := parse(bad); err == nil || !strings.Contains(err.Error(), EnvVar) {
			t.Errorf("parse(%q): %v, want an error naming %s", bad, err, EnvVar)
		}
	}
}

// TestHitKills runs this test binary as a helper that hits "x" three times
// with x@2 armed: it says the first hit, and dies of SIGKILL at the second.
func TestHitKills(t *testing.T) {
	if os.Getenv("FAILPOINT_HELPER") == "1" {
		for i := 1; i <= 3; i++ {
			Hit("other")
			Hit("x")
			os.Stdout.WriteString("after hit " + strconv.Itoa(i) + "\n")
		}
		os.Exit(0)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHitKills$")
	cmd.Env = append(os.Environ(), "FAILPOINT_HELPER=1", EnvVar+"=x@2", "GORACE=atexit_sleep_ms=0")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if string(out) != "after hit 1\n" {
		t.Errorf("helper stdout %q, want only the first hit's line", out)
	}
	if !strings.Contains(stderr.String(), "failpoint x@2: killing the process") {
		t.Errorf("helper stderr %q", stderr.String())
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("helper: %v, want it killed", err)
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Errorf("helper ended with %v, want SIGKILL", ee)
	}
}

// TestMalformedStops: a malformed list stops the process at start, saying
// why.
func TestMalformedStops(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), EnvVar+"=x@0", "GORACE=atexit_sleep_ms=0")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), `bad entry "x@0"`) {
		t.Fatalf("malformed list: %v, %s", err, out)
	}
}

// TestUnarmed: without the variable nothing is armed, and Hit does nothing.
func TestUnarmed(t *testing.T) {
	if os.Getenv(EnvVar) != "" {
		t.Skip(EnvVar + " is set")
	}
	if armed != nil {
		t.Fatal("armed without " + EnvVar)
	}
	Hit(TaskEnded)
}

// notes records notified topics, as a store transaction does.
type notes []string

func (n *notes) Notify(topic string) { *n = append(*n, topic) }

// TestAtCommit: an armed failpoint adds its topic to the transaction (and
// Committed then hits it); one not armed adds nothing.
func TestAtCommit(t *testing.T) {
	saved := armed
	t.Cleanup(func() { armed = saved })
	armed = map[string]*point{"x": {at: 2}}
	var tx notes
	AtCommit(&tx, "y")
	AtCommit(&tx, "x")
	if len(tx) != 1 || tx[0] != "failpoint:x" {
		t.Fatalf("topics %q", tx)
	}
	Committed(append(tx, "other")) // the first hit of x@2: nothing happens
	if n := armed["x"].hits.Load(); n != 1 {
		t.Fatalf("x hit %d times", n)
	}
}

package process_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/roombridge/roombridge/agents"
	"github.com/roombridge/roombridge/agents/process"
)

// nopSink takes a turn's reports and answers calls with an error.
type nopSink struct{}

func (nopSink) Session(context.Context, string) error       { return nil }
func (nopSink) Tool(context.Context, string, string) error  { return nil }
func (nopSink) Progress(context.Context, int, string) error { return nil }
func (nopSink) Message(context.Context, string) error       { return nil }
func (nopSink) Call(context.Context, agents.TurnEvent) agents.Response {
	return agents.Response{Error: "no calls here"}
}

func TestEnvironHides(t *testing.T) {
	env := []string{"PATH=/bin", "SLACK_BOT_TOKEN=xoxb-1", "HOME=/h", "SLACK_BOT_TOKEN_X=kept", "A=b=c"}
	got := process.Environ(env, []string{"SLACK_BOT_TOKEN", "MISSING"})
	want := []string{"PATH=/bin", "HOME=/h", "SLACK_BOT_TOKEN_X=kept", "A=b=c"}
	if !slices.Equal(got, want) {
		t.Fatalf("Environ = %q, want %q", got, want)
	}
	if got := process.Environ(env, nil); !slices.Equal(got, env) {
		t.Fatalf("Environ with nothing to hide = %q, want %q", got, env)
	}
}

// An agent process does not inherit the variables the config named as
// secrets, and does inherit the others.
func TestAgentDoesNotSeeHiddenSecrets(t *testing.T) {
	t.Setenv("RB_TEST_SECRET", "s3cret-value")
	t.Setenv("RB_TEST_PLAIN", "plain-value")
	script := `read turn; printf '{"type":"final","text":"secret=[%s] plain=[%s]"}\n' "$RB_TEST_SECRET" "$RB_TEST_PLAIN"`
	for _, tc := range []struct {
		hide []string
		want string
	}{
		{nil, "secret=[s3cret-value] plain=[plain-value]"},
		{[]string{"RB_TEST_SECRET"}, "secret=[] plain=[plain-value]"},
	} {
		x := &process.Runtime{Command: []string{"/bin/sh", "-c", script}, Workdir: t.TempDir(), HideEnv: tc.hide}
		out, err := x.Run(context.Background(), agents.Turn{Agent: "coder"}, nopSink{})
		if err != nil {
			t.Fatalf("hide %q: %v", tc.hide, err)
		}
		if out.Final != tc.want {
			t.Errorf("hide %q: final = %q, want %q", tc.hide, out.Final, tc.want)
		}
	}
}

// TestKinds: a Runtime without a Kind is an exec runtime, and speaks the
// exec protocol (its answer is the answer, not a yield in disguise); an
// unknown kind fails the turn without starting anything.
func TestKinds(t *testing.T) {
	script := `read turn; echo '{"type":"final","text":"done"}'`
	out, err := (&process.Runtime{Command: []string{"/bin/sh", "-c", script}}).Run(context.Background(), agents.Turn{Agent: "coder"}, nopSink{})
	if err != nil || out.Final != "done" || out.YieldIfWaiting {
		t.Errorf("default kind: %+v, %v; want the exec protocol's final answer", out, err)
	}
	marker := filepath.Join(t.TempDir(), "started")
	rt := &process.Runtime{Kind: "bogus", Command: []string{"/bin/sh", "-c", "touch " + marker}}
	if _, err := rt.Run(context.Background(), agents.Turn{Agent: "coder"}, nopSink{}); err == nil || !strings.Contains(err.Error(), `unknown kind "bogus"`) {
		t.Errorf("unknown kind: %v", err)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("an unknown kind started its command")
	}
}

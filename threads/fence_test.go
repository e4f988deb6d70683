package threads_test

import (
	"context"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"log/slog"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/connectors/console"
	"github.com/roombridge/roombridge/connectors/feishu"
	"github.com/roombridge/roombridge/connectors/slack"
	"github.com/roombridge/roombridge/connectors/slack/slacktest"
	"github.com/roombridge/roombridge/threads"
)

// abilities are chat's optional connector interfaces. TestAbilitiesListed
// keeps the list whole.
var abilities = []reflect.Type{
	reflect.TypeFor[chat.DirectMessenger](),
	reflect.TypeFor[chat.Finder](),
	reflect.TypeFor[chat.Streamer](),
}

// has names the abilities c has.
func has(c chat.Connector) []string {
	var out []string
	for _, a := range abilities {
		if reflect.TypeOf(c).Implements(a) {
			out = append(out, a.Name())
		}
	}
	return out
}

// TestAbilitiesListed: every interface of package chat that embeds
// Connector (an optional ability) is in abilities, so that
// TestFencedKeepsAbilities checks the ones added later too.
func TestAbilitiesListed(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "chat", "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("chat's sources: %v (%d files)", err, len(files))
	}
	var found []string
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(af, func(n ast.Node) bool {
			ts, ok := n.(*ast.TypeSpec)
			if !ok {
				return true
			}
			if it, ok := ts.Type.(*ast.InterfaceType); ok && slices.ContainsFunc(it.Methods.List, func(f *ast.Field) bool {
				id, ok := f.Type.(*ast.Ident)
				return len(f.Names) == 0 && ok && id.Name == "Connector"
			}) {
				found = append(found, ts.Name.Name)
			}
			return false
		})
	}
	var listed []string
	for _, a := range abilities {
		listed = append(listed, a.Name())
	}
	slices.Sort(found)
	slices.Sort(listed)
	if !slices.Equal(found, listed) {
		t.Errorf("chat's optional interfaces are %q, the test lists %q: add the new ones to abilities", found, listed)
	}
}

// TestFencedKeepsAbilities: through a fence (once or twice), the outbox
// sends through a connector with the same optional interfaces as the raw
// one, for each real connector. (The wrapper that forwarded each interface
// by hand dropped chat.Finder.)
func TestFencedKeepsAbilities(t *testing.T) {
	fake := slacktest.NewServer()
	t.Cleanup(fake.Close)
	sl, err := slack.New(slack.Options{Mode: slack.ModeEvents, BotToken: slacktest.DefaultBotToken,
		SigningSecret: "secret", APIURL: fake.APIURL()})
	if err != nil {
		t.Fatal(err)
	}
	fs, err := feishu.New(feishu.Options{Mode: feishu.ModeCallback, AppID: "cli_test", AppSecret: "s",
		VerificationToken: "v", BaseURL: "http://127.0.0.1:1", Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	co := console.New(strings.NewReader(""), io.Discard, "room", "you")
	claim := func(context.Context) error { return nil }
	want := map[string][]string{chat.Slack: {"DirectMessenger", "Finder", "Streamer"}, chat.Feishu: {"DirectMessenger", "Streamer"}, chat.Console: {"DirectMessenger", "Streamer"}}
	for _, raw := range []chat.Connector{sl, fs, co} {
		s := raw.Surface()
		if got := has(raw); !slices.Equal(got, want[s]) {
			t.Errorf("%s has %q, want %q", s, got, want[s])
		}
		for _, c := range []chat.Connector{threads.Fenced(raw, claim), threads.Fenced(threads.Fenced(raw, claim), claim)} {
			d := threads.NewDeliverer(nil, nil, nil, c)
			if got := has(threads.SendsThrough(d, s)); !slices.Equal(got, has(raw)) {
				t.Errorf("%s fenced: the outbox sees %q, raw %q", s, got, has(raw))
			}
		}
	}
}

// claims counts claims and fails them while failing is set (threads are
// delivered in parallel: claims come from several goroutines).
type claims struct {
	mu      sync.Mutex
	n       int
	failing bool
}

func (c *claims) claim(context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	if c.failing {
		return errors.New("not the leader")
	}
	return nil
}

// set makes the next claims fail or not, and counts them from 0.
func (c *claims) set(failing bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n, c.failing = 0, failing
}

func (c *claims) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// TestFencedClaimsEverySend: every call to the platform through a fence,
// of every op (the direct message and the lookup of a post in doubt too),
// comes right after a claim; while claims fail nothing is posted, looked
// up or edited, and the effects wait in the outbox, in order.
func TestFencedClaimsEverySend(t *testing.T) {
	f := newDoubtFixture(t)
	cl := &claims{}
	cl.set(true)
	d := threads.NewDeliverer(f.db, f.clk, f.log, threads.Fenced(f.b, cl.claim))
	f.enqueue(parent("R1"))
	f.enqueue(threads.Effect{Op: threads.OpDirect, Request: "R2", User: "U9",
		Message: chat.Message{Request: "R2", Kind: "approval", Text: "decide?"}})
	f.round(d)
	if n := cl.count(); n != 2 || len(f.b.texts()) != 0 || f.b.lookupCount() != 0 {
		t.Fatalf("failing claims: %d claims, posts %q, %d lookups; want 2, none, 0", n, f.b.texts(), f.b.lookupCount())
	}
	if n := pendingEffects(t, f.db); n != 2 {
		t.Fatalf("%d effects pending, want 2", n)
	}

	cl.set(false)
	f.round(d) // both in doubt now (a failed attempt may have posted): looked up, then posted
	f.enqueue(reply("R1", "hello"), status("R1", "done"))
	f.round(d)
	if got := f.b.texts(); !slices.Equal(slices.Sorted(slices.Values(got)), []string{"R1", "decide?", "hello"}) || len(f.b.updates) != 1 {
		t.Errorf("posts %q, updates %q: want the parent, the DM and the reply once, one edit", got, f.b.updates)
	}
	if n := cl.count(); n != 6 || f.b.lookupCount() != 2 {
		t.Errorf("%d claims and %d lookups, want 6 (one per call: 4 sends, 2 lookups) and 2 (the effects in doubt)", n, f.b.lookupCount())
	}

	// Used as a plain connector, the fence claims too.
	cl.set(true)
	fc := threads.Fenced(f.b, cl.claim)
	if _, err := fc.Reply(context.Background(), chat.ThreadRef{Surface: surface, Channel: "C1", ID: "m1"}, chat.Message{Text: "late"}); err == nil {
		t.Error("a Reply through a failing fence succeeded")
	}
	if got := f.b.texts(); len(got) != 3 {
		t.Errorf("posts %q after a refused claim", got)
	}
}

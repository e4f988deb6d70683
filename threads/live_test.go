package threads_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/threads"
)

// streamer is a fake chat surface that can stream: it records the live
// messages' text as a platform would show it.
type streamer struct {
	platform
	smu    sync.Mutex
	n      int
	text   map[string]string // live message → its text
	closes map[string][]string
	steps  []string
	opens  int
	apps   int
}

func newStreamer() *streamer {
	return &streamer{platform: platform{failing: map[string]error{}}, text: map[string]string{}, closes: map[string][]string{}}
}

func (s *streamer) StreamPace() time.Duration { return 10 * time.Millisecond }

func (s *streamer) OpenStream(_ context.Context, t chat.ThreadRef, _ chat.Message) (chat.MessageRef, error) {
	s.smu.Lock()
	defer s.smu.Unlock()
	s.n++
	s.opens++
	return chat.MessageRef{Surface: chat.Console, Channel: t.Channel, ID: fmt.Sprintf("live%d", s.n)}, nil
}

func (s *streamer) AppendStream(_ context.Context, ref chat.MessageRef, u chat.StreamUpdate) error {
	s.smu.Lock()
	defer s.smu.Unlock()
	s.apps++
	s.text[ref.ID] += u.Delta
	for _, st := range u.Steps {
		s.steps = append(s.steps, st.Name+" "+st.Status)
	}
	return nil
}

func (s *streamer) CloseStream(_ context.Context, ref chat.MessageRef, m chat.Message) error {
	s.smu.Lock()
	defer s.smu.Unlock()
	s.text[ref.ID] = m.Text
	s.closes[ref.ID] = append(s.closes[ref.ID], m.Text)
	return nil
}

func (s *streamer) live(id string) string {
	s.smu.Lock()
	defer s.smu.Unlock()
	return s.text[id]
}

func (s *streamer) closed() map[string][]string {
	s.smu.Lock()
	defer s.smu.Unlock()
	out := map[string][]string{}
	for k, v := range s.closes {
		out[k] = slices.Clone(v)
	}
	return out
}

// waitFor waits (up to 10 s) for cond.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// waitShown waits for cond, the live text shown, moving the fake clock on
// by the surface's pace while it waits: the sender shows an update at most
// once a pace of the bridge's clock, so what came after the first update
// it showed is shown only once that clock moves.
func waitShown(t testing.TB, f *fixture, what string, cond func() bool) {
	t.Helper()
	waitFor(t, what, func() bool {
		if cond() {
			return true
		}
		f.clk.Advance(10 * time.Millisecond) // the streamer's pace
		return false
	})
}

func startLive(t testing.TB, f *fixture, s chat.Streamer) (*threads.Live, func()) {
	t.Helper()
	l := threads.NewLive(f.th, f.db, f.clk, slog.New(slog.NewTextHandler(io.Discard, nil)), s)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = l.Run(ctx) }()
	waitFor(t, "live running", l.Running)
	return l, func() { cancel(); <-done }
}

func liveFixture(t testing.TB) (*fixture, *streamer, *requests.Request) {
	f := newFixture(t)
	s := newStreamer()
	f.d = threads.NewDeliverer(f.db, f.clk, slog.New(slog.DiscardHandler), s)
	r := f.create(t)
	ctx := context.Background()
	r, err := f.svc.Apply(ctx, r.ID, requests.Change{Event: requests.Start, Actor: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.d.DeliverOnce(ctx); err != nil { // the parent: the thread exists
		t.Fatal(err)
	}
	return f, s, r
}

func finish(t *testing.T, f *fixture, r *requests.Request, answer string) {
	t.Helper()
	if _, err := f.svc.Apply(context.Background(), r.ID, requests.Change{Event: requests.Finish, Actor: "t",
		Mutate: func(r *requests.Request) { r.Result = answer }}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.d.DeliverOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestLiveStreamsAndTheAnswerClosesIt: deltas and tool steps are shown on
// one live message; the final answer, delivered by the outbox, closes it
// with exactly the stored answer, and is not posted again as a reply.
func TestLiveStreamsAndTheAnswerClosesIt(t *testing.T) {
	f, s, r := liveFixture(t)
	l, stop := startLive(t, f, s)
	defer stop()
	f.d.Live = l
	l.Tool(r, "start", "build")
	for _, w := range strings.SplitAfter("the quick brown fox", " ") {
		l.Delta(r, w)
	}
	l.Tool(r, "end", "build")
	waitShown(t, f, "the live text", func() bool { return s.live("live1") == "the quick brown fox" })
	finish(t, f, r, "the quick brown fox jumps")
	if got := s.closed(); !slices.Equal(got["live1"], []string{"the quick brown fox jumps"}) || len(got) != 1 {
		t.Errorf("closes %v, want live1 closed once with the answer", got)
	}
	for _, c := range s.Calls() {
		if strings.HasPrefix(c, "reply") {
			t.Errorf("the answer was also posted as a reply: %q", c)
		}
	}
	if got, err := f.svc.Get(context.Background(), r.ID); err != nil || got.Result != s.live("live1") {
		t.Errorf("stored answer %q, live message %q (%v)", got.Result, s.live("live1"), err)
	}
	s.smu.Lock()
	steps := slices.Clone(s.steps)
	s.smu.Unlock()
	if want := []string{"build " + chat.StepStarted, "build " + chat.StepDone}; !slices.Equal(steps, want) {
		t.Errorf("steps %v, want %v", steps, want)
	}
	if f.pending(t) != 0 {
		t.Errorf("%d effects left", f.pending(t))
	}
}

// TestLiveRestartClosesInterrupted: a live message open when the bridge
// stops is closed once as interrupted by the next start; the resumed turn
// streams anew, and the answer closes the new live message only.
func TestLiveRestartClosesInterrupted(t *testing.T) {
	f, s, r := liveFixture(t)
	l, stop := startLive(t, f, s)
	l.Delta(r, "half an ans")
	waitShown(t, f, "the live text", func() bool { return s.live("live1") == "half an ans" })
	stop() // the bridge dies: nothing closes live1

	l2, stop2 := startLive(t, f, s) // the restart
	defer stop2()
	f.d.Live = l2
	waitFor(t, "live1 closed", func() bool { return len(s.closed()["live1"]) == 1 })
	l2.Delta(r, "the whole answer")
	waitShown(t, f, "the new live text", func() bool { return s.live("live2") == "the whole answer" })
	finish(t, f, r, "the whole answer")
	want := map[string][]string{"live1": {threads.Interrupted}, "live2": {"the whole answer"}}
	if got := s.closed(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("closes %v, want %v", got, want)
	}
	for _, c := range s.Calls() {
		if strings.HasPrefix(c, "reply") {
			t.Errorf("the answer was also posted as a reply: %q", c)
		}
	}
}

// TestLiveAnswerWithoutStreamIsPosted: a request that streamed nothing gets
// its answer as a reply; one whose live message a restart left open gets
// that closed as interrupted and the answer posted once.
func TestLiveAnswerWithoutStreamIsPosted(t *testing.T) {
	f, s, r := liveFixture(t)
	l, stop := startLive(t, f, s)
	l.Delta(r, "partial")
	waitShown(t, f, "the live text", func() bool { return s.live("live1") == "partial" })
	stop()
	f.d.Live = threads.NewLive(f.th, f.db, f.clk, nil, s) // restarted, not yet running
	finish(t, f, r, "done it")
	if got := s.closed(); !slices.Equal(got["live1"], []string{threads.Interrupted}) {
		t.Errorf("closes %v, want live1 interrupted once", got)
	}
	replies := 0
	for _, c := range s.Calls() {
		if strings.HasPrefix(c, "reply") && strings.Contains(c, "done it") {
			replies++
		}
	}
	if replies != 1 {
		t.Errorf("the answer was posted %d times, want once: %v", replies, s.Calls())
	}
}

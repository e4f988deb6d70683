package threads

import (
	"strings"
	"sync"
)

// liveTexts is the live text of the requests being written, for watchers in
// this process (the web room's request pages), whatever surface their
// threads are on: in memory only, a request's from its first delta until
// its turn ends (Ended), then forgotten. A watcher gets the whole text so far, the
// newest only (a slow one skips what it missed).
type liveTexts struct {
	mu       sync.Mutex
	texts    map[string]*strings.Builder
	watchers map[string]map[chan string]struct{}
}

// add appends text to request's live text and shows it to its watchers.
func (t *liveTexts) add(request, text string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.texts == nil {
		t.texts = map[string]*strings.Builder{}
	}
	b, ok := t.texts[request]
	if !ok {
		b = &strings.Builder{}
		t.texts[request] = b
	}
	b.WriteString(text)
	t.publish(request, b.String()) // String does not copy: cheap per delta
}

// reset starts request's live text anew (Said: the text so far was posted).
func (t *liveTexts) reset(request string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.texts[request]; ok {
		t.texts[request] = &strings.Builder{}
		t.publish(request, "")
	}
}

// forget drops request's live text (its turn ended).
func (t *liveTexts) forget(request string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.texts, request)
}

// publish hands text to request's watchers, replacing what they have not
// read yet. Call with t.mu held.
func (t *liveTexts) publish(request, text string) {
	for ch := range t.watchers[request] {
		select {
		case <-ch:
		default:
		}
		ch <- text // cap 1, emptied above, only written under t.mu
	}
}

// watch subscribes to request's live text; the channel gets the text so far
// at once (if there is any), then the whole text after each change.
func (t *liveTexts) watch(request string) (<-chan string, func()) {
	ch := make(chan string, 1)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.watchers == nil {
		t.watchers = map[string]map[chan string]struct{}{}
	}
	if t.watchers[request] == nil {
		t.watchers[request] = map[chan string]struct{}{}
	}
	t.watchers[request][ch] = struct{}{}
	if b, ok := t.texts[request]; ok && b.Len() > 0 {
		ch <- b.String()
	}
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			t.mu.Lock()
			defer t.mu.Unlock()
			delete(t.watchers[request], ch)
			if len(t.watchers[request]) == 0 {
				delete(t.watchers, request)
			}
		})
	}
}

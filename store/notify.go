package store

import (
	"sync"

	"github.com/roombridge/roombridge/internal/failpoint"
)

// Notifier fans commit notifications out to subscribers by topic. Backends
// embed one and call Publish after each commit. Signals coalesce: a slow
// subscriber sees at least one signal after the last change, never a backlog.
type Notifier struct {
	mu   sync.Mutex
	subs map[string]map[chan struct{}]struct{}
}

// Subscribe implements Store.Subscribe.
func (n *Notifier) Subscribe(topic string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	n.mu.Lock()
	if n.subs == nil {
		n.subs = make(map[string]map[chan struct{}]struct{})
	}
	if n.subs[topic] == nil {
		n.subs[topic] = make(map[chan struct{}]struct{})
	}
	n.subs[topic][ch] = struct{}{}
	n.mu.Unlock()
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			n.mu.Lock()
			delete(n.subs[topic], ch)
			n.mu.Unlock()
		})
	}
}

// Publish signals every subscriber of the given topics.
func (n *Notifier) Publish(topics ...string) {
	failpoint.Committed(topics) // crash tests: killed after a commit, before anyone hears of it
	if len(topics) == 0 {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, t := range topics {
		for ch := range n.subs[t] {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
}

// Topics collects the topics a transaction notified, without duplicates.
type Topics []string

// Add records topic once.
func (t *Topics) Add(topic string) {
	for _, x := range *t {
		if x == topic {
			return
		}
	}
	*t = append(*t, topic)
}

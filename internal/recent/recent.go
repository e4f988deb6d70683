// Package recent remembers a bounded number of string pairs, the newest
// kept: what a connector learned of the messages it posted (a card's topic,
// the posts of a long answer) and can do without when it has forgotten it.
// It is in memory only.
package recent

import (
	"strings"
	"sync"
)

// Map is a bounded map of strings, safe for concurrent use: past its
// bound, the pair put first is forgotten first. The zero value is not
// usable; call New.
type Map struct {
	mu    sync.Mutex
	max   int
	m     map[string]string
	order []string // the keys of m, oldest first
}

// New returns a Map that remembers n pairs at most (at least one).
func New(n int) *Map { return &Map{max: max(1, n), m: map[string]string{}} }

// Get returns the value of key and whether it is remembered.
func (m *Map) Get(key string) (string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.m[key]
	return v, ok
}

// Put remembers value for key, unless key is remembered already (its first
// value stays); the oldest pair goes when the Map is full.
func (m *Map) Put(key, value string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.m[key]; ok {
		return
	}
	for len(m.order) >= m.max {
		delete(m.m, m.order[0])
		m.order = m.order[1:]
	}
	m.m[key] = value
	m.order = append(m.order, key)
}

// DeletePrefix forgets every key that begins with prefix.
func (m *Map) DeletePrefix(prefix string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	kept := m.order[:0]
	for _, k := range m.order {
		if strings.HasPrefix(k, prefix) {
			delete(m.m, k)
			continue
		}
		kept = append(kept, k)
	}
	m.order = kept
}

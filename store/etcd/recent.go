package etcd

// presentKeys bounds the keys a Store remembers as present (Options.Absent):
// enough for the events of minutes at a high rate, which is when a platform
// redelivers one.
const presentKeys = 1 << 15

// recent is a set of the newest n keys added (the oldest one leaves when a
// new one comes). Not safe for concurrent use.
type recent struct {
	keys map[string]struct{}
	ring []string
	next int
}

func newRecent(n int) *recent {
	return &recent{keys: make(map[string]struct{}, n), ring: make([]string, n)}
}

func (r *recent) has(k string) bool {
	_, ok := r.keys[k]
	return ok
}

func (r *recent) add(k string) {
	if r.has(k) {
		return
	}
	if old := r.ring[r.next]; old != "" {
		delete(r.keys, old)
	}
	r.ring[r.next] = k
	r.keys[k] = struct{}{}
	r.next = (r.next + 1) % len(r.ring)
}

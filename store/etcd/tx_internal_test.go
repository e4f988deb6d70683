package etcd

import "testing"

// A call that rewrites a key of its group with a bigger value makes the
// group's Txn bigger by the difference: a group that would go over
// MaxTxnBytes that way is not joined, and a smaller rewrite frees bytes.
func TestFitsCountsARewrittenValue(t *testing.T) {
	s := &Store{opt: Options{MaxTxnOps: 128, MaxTxnBytes: 1000}}
	g := &group{s: s, writes: map[string]write{"/p/b/k": {value: make([]byte, 100)}}}
	bigger := &tx{writes: map[string]write{"/p/b/k": {value: make([]byte, 995)}}}
	if g.fits(bigger, false) {
		t.Errorf("a rewrite of 100 bytes as 995 fits a group of at most 1,000 bytes (the key alone is 6)")
	}
	smaller := &tx{writes: map[string]write{"/p/b/k": {value: make([]byte, 10)}, "/p/b/j": {value: make([]byte, 900)}}}
	if !g.fits(smaller, false) {
		t.Errorf("a rewrite of 100 bytes as 10 beside 906 new ones does not fit 1,000 bytes: want 922")
	}
}

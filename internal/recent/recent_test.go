package recent_test

import (
	"fmt"
	"testing"

	"github.com/roombridge/roombridge/internal/recent"
)

// TestMap: the first value of a key stays; past the bound the oldest pair
// goes first; a prefix forgets its keys and frees their room.
func TestMap(t *testing.T) {
	m := recent.New(3)
	m.Put("a#1", "1")
	m.Put("a#1", "again")
	m.Put("a#2", "2")
	m.Put("b", "3")
	if v, ok := m.Get("a#1"); !ok || v != "1" {
		t.Errorf("a#1 = %q, %v; want its first value", v, ok)
	}
	m.Put("c", "4") // full: a#1 goes
	if _, ok := m.Get("a#1"); ok {
		t.Error("the oldest pair was kept past the bound")
	}
	m.DeletePrefix("a#")
	if _, ok := m.Get("a#2"); ok {
		t.Error("a#2 kept after DeletePrefix(a#)")
	}
	m.Put("d", "5")
	for _, k := range []string{"b", "c", "d"} {
		if _, ok := m.Get(k); !ok {
			t.Errorf("%s forgotten: the deleted keys still took room", k)
		}
	}
	for i := range 10 {
		m.Put(fmt.Sprint("k", i), "v")
	}
	if _, ok := m.Get("k6"); ok {
		t.Error("k6 kept: more than 3 pairs remembered")
	}
}

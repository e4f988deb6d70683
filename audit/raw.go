package audit

import (
	"encoding/json"
	"time"
	"unsafe"
)

// rawRecord is a stored record read in place, without decoding: the bytes
// of its fields inside the stored JSON. The export's fast path; a record it
// cannot read so is decoded with encoding/json.
type rawRecord struct {
	// field holds the seq number's digits, then the bytes between the quotes
	// of each string field, in CSVHeader's order (nil when omitted).
	field [numFields][]byte
	// escaped tells which strings hold escapes (decoded with encoding/json).
	escaped [numFields]bool
	strs    [numFields]string // Strings' result, reused
}

const numFields = 9

// fieldIndex maps the JSON names of Record's fields to their CSV column.
func fieldIndex(name []byte) int {
	switch string(name) { // no allocation: the compiler compares in place
	case "seq":
		return 0
	case "time":
		return 1
	case "request_id":
		return 2
	case "actor":
		return 3
	case "surface":
		return 4
	case "action":
		return 5
	case "from":
		return 6
	case "to":
		return 7
	case "detail":
		return 8
	}
	return -1
}

// parse reads v as Append stores it (json.Marshal of a Record: one flat
// object of Record's fields, seq a number, the others strings) and reports
// whether it could; anything else (an unknown key, a nested value, white
// space) is left to encoding/json.
func (r *rawRecord) parse(v []byte) bool {
	*r = rawRecord{strs: r.strs}
	if len(v) < 2 || v[0] != '{' {
		return false
	}
	i := 1
	for i < len(v) && v[i] != '}' {
		if v[i] != '"' {
			return false
		}
		end := i + 1
		for end < len(v) && v[end] != '"' && v[end] != '\\' {
			end++
		}
		if end+1 >= len(v) || v[end] != '"' || v[end+1] != ':' {
			return false
		}
		f := fieldIndex(v[i+1 : end])
		if f < 0 || r.field[f] != nil {
			return false
		}
		i = end + 2
		switch {
		case f == 0:
			start := i
			for i < len(v) && v[i] >= '0' && v[i] <= '9' {
				i++
			}
			if i == start {
				return false
			}
			r.field[0] = v[start:i]
		case i < len(v) && v[i] == '"':
			start := i + 1
			for i = start; i < len(v) && v[i] != '"'; i++ {
				if v[i] == '\\' {
					r.escaped[f] = true
					i++
				}
			}
			if i >= len(v) {
				return false
			}
			r.field[f] = v[start:i]
			i++
		default:
			return false
		}
		if i < len(v) && v[i] == ',' {
			i++
		}
	}
	return i == len(v)-1 && r.field[0] != nil && r.field[1] != nil
}

// inRange reports whether the record is within q's times (parsing its time
// only when q has a bound).
func (r *rawRecord) inRange(q Query) (bool, error) {
	if !q.bounded() {
		return true, nil
	}
	t, err := time.Parse(time.RFC3339Nano, view(r.field[1]))
	if err != nil {
		return false, err
	}
	return q.holds(t), nil
}

// Strings returns the record's CSV fields. Those without escapes are views
// of the stored bytes (unsafe.String, no copy): they are valid only while
// the store's callback runs, which is how long csv.Writer.Write keeps them
// (it copies them into its buffer). Escaped ones are decoded.
func (r *rawRecord) Strings() ([]string, error) {
	for i, b := range r.field {
		if !r.escaped[i] {
			r.strs[i] = view(b)
			continue
		}
		q := make([]byte, 0, len(b)+2)
		q = append(append(append(q, '"'), b...), '"')
		if err := json.Unmarshal(q, &r.strs[i]); err != nil {
			return nil, err
		}
	}
	return r.strs[:], nil
}

// view is b as a string without a copy; b must not change while it is used.
func view(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

package jsonx

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

// record is what the test reads with Fields, and json.Unmarshal with its
// tags.
type record struct {
	S string      `json:"s"`
	N int64       `json:"n"`
	B bool        `json:"b"`
	T time.Time   `json:"t"`
	A []string    `json:"a"`
	O []subRecord `json:"o"`
}

type subRecord struct {
	S string `json:"s"`
}

func readRecord(b []byte) (record, bool) {
	var r record
	f := ReadFields(b)
	f.Object(func(name string) {
		switch name {
		case "s":
			r.S = f.String()
		case "n":
			r.N = f.Int()
		case "b":
			r.B = f.Bool()
		case "t":
			r.T = f.Time()
		case "a":
			r.A = []string{}
			f.Array(func() { r.A = append(r.A, f.String()) })
		case "o":
			r.O = []subRecord{}
			f.Array(func() {
				var s subRecord
				f.Object(func(name string) {
					if name != "s" {
						f.Fail()
					}
					s.S = f.String()
				})
				r.O = append(r.O, s)
			})
		default:
			f.Fail()
		}
	})
	return r, f.Ok()
}

// Fields reads Object's form as json.Unmarshal does, and gives up (Ok
// false) on every other form, even where json.Unmarshal reads it: the
// caller's general decoder reads those.
func TestFieldsReadsWhatUnmarshalReads(t *testing.T) {
	read := []string{
		`{}`,
		`{"s":"plain","n":-42,"b":true,"t":"2026-12-01T11:30:05.123456789Z","a":["x",""],"o":[{"s":"y"},{}]}`,
		`{"s":"é · — 日本 \ud83d\ude00 \n \" \\ \/ \u003c","b":false,"n":0}`,
		`{"t":"2026-12-01T11:30:05+05:30","s":"\u2028"}`,
		`{"n":9223372036854775807,"s":"a","s":"last wins"}`,
		`{"a":[],"o":[]}`,
	}
	refused := []string{
		``, `{`, `{"s":"a"`, `{"s":"a"}x`, `{"s":"a"} `, ` {}`, `{ "s":"a"}`, `{"s" :"a"}`, `{"s":"a" }`,
		`{"s":null}`, `{"n":null}`, `{"a":null}`, `{"x":1}`, `{"S":"case"}`, `{"\u0073":"escaped name"}`,
		`{"s":"tab	raw"}`, "{\"s\":\"\x1f\"}", "{\"s\":\"\xff\"}", `{"s":"\ud800"}`, `{"s":"\x"}`, `{"s":"unterminated}`,
		`{"n":01}`, `{"n":1.0}`, `{"n":1e3}`, `{"n":-}`, `{"n":9223372036854775808}`, `{"n":"1"}`, `{"b":1}`, `{"b":tru}`,
		`{"t":"2026-12-01"}`, `{"t":"2026-12-01T11:30:05\u005a"}`, `{"t":1}`,
		`{"a":["x",]}`, `{"a":["x" ]}`, `{"a":[1]}`, `{"o":[{"z":"y"}]}`, `{"s":"a",}`, `{,}`,
	}
	for _, in := range read {
		got, ok := readRecord([]byte(in))
		var want record
		if err := json.Unmarshal([]byte(in), &want); err != nil {
			t.Fatalf("%s: json.Unmarshal: %v", in, err)
		}
		if !ok || !reflect.DeepEqual(got, want) && !sameTimes(got, want) {
			t.Errorf("%s: read %+v (%v), json.Unmarshal %+v", in, got, ok, want)
		}
	}
	for _, in := range refused {
		if got, ok := readRecord([]byte(in)); ok {
			t.Errorf("%s: read %+v, want it left to the general decoder", in, got)
		}
	}
}

// sameTimes is DeepEqual but for times, compared as instants in the same
// offset (a parsed offset's zone is a new Location each time).
func sameTimes(a, b record) bool {
	_, oa := a.T.Zone()
	_, ob := b.T.Zone()
	if !a.T.Equal(b.T) || oa != ob {
		return false
	}
	a.T, b.T = time.Time{}, time.Time{}
	return reflect.DeepEqual(a, b)
}

package audit

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"
)

// A record is stored exactly as json.Marshal encodes it, whatever its
// strings and times (the export writes stored records as they are), under
// the key fmt built before; a prepared record too.
func TestEncodeRecordIsJSONMarshal(t *testing.T) {
	// encodeRecord writes Record's 9 fields by hand (the second case below
	// sets them all): a new field must be taught to it, and set here.
	if n := reflect.TypeFor[Record]().NumField(); n != 9 {
		t.Fatalf("Record has %d fields, encodeRecord writes 9: add the new one to encodeRecord and to this test", n)
	}
	at := time.Date(2026, 12, 1, 11, 30, 5, 123456789, time.UTC)
	for _, r := range []Record{
		{},
		{Seq: 1<<64 - 1, Time: at, RequestID: "R20261201-01", Actor: "slack:U1", Surface: "slack", Action: "expire",
			From: "pending", To: "expired", Detail: `approval "R-1": <nobody> & \ decided within 1 h`},
		{Seq: 7, Time: time.Unix(0, 1).UTC(), Actor: "system:ttl", Action: "x", Detail: "hé · — \x01 \u2028 \xff \x7f"},
		{Seq: 12, Time: at.In(time.FixedZone("x", 5*3600+1800)), Actor: "日本", Action: "decision_refused", To: "t"},
	} {
		want, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := encodeRecord(&r); err != nil || string(got) != string(want) {
			t.Errorf("encodeRecord:\n got %s (%v)\nwant %s", got, err, want)
		}
		// Prepared (the record Append writes: its time in UTC), then given
		// its sequence number.
		u := r
		u.Time = r.Time.UTC()
		want, _ = json.Marshal(u)
		p, err := Prepare(r)
		if got := p.rec.With(r.Seq); err != nil || string(got) != string(want) {
			t.Errorf("Prepare:\n got %s (%v)\nwant %s", got, err, want)
		}
		if got, want := key(r.Time.UnixMilli(), r.Seq), fmt.Sprintf("%013d-%012d", r.Time.UnixMilli(), r.Seq); got != want {
			t.Errorf("key = %q, want %q", got, want)
		}
	}
	if err := (Prepared{}).AppendTx(nil); err == nil {
		t.Error("a record not prepared was appended")
	}
}

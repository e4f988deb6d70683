package audit_test

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"testing"
	"time"

	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/store"
)

// The export reads records in place; its output is byte for byte what
// encoding/json and encoding/csv write from the decoded records, for every
// field shape (escapes, HTML, quotes, newlines, leading spaces, `\.`,
// omitted fields, odd times), with and without time bounds, and a stored
// record of another shape (white space, an unknown key) is decoded instead;
// CSV cells that would be a spreadsheet formula begin with a quote (asText).
func TestExportInPlaceMatchesTheEncoders(t *testing.T) {
	db := openDB(t)
	recs := append([]audit.Record{}, tricky...)
	for i, d := range []string{`<b>&amp;</b>`, ` leading space`, "\ttab", `\.`, `back\slash`, "cr\rlf", "\u2028 sep", "", `"`, "é,\"x\""} {
		recs = append(recs, audit.Record{Time: t0.Add(time.Duration(3+i)*time.Second + time.Duration(i)*time.Microsecond),
			RequestID: "R20261129-0" + string(rune('3'+i%5)), Actor: "slack:U<" + d + ">", Action: "note", Detail: d, To: d})
	}
	appendAll(t, db, recs...)
	odd := t0.Add(20 * time.Second)
	if err := db.Update(context.Background(), func(tx store.Tx) error {
		return tx.Put("audit", "0000000000000-000000000000", []byte(` {"seq": 99, "time":"`+odd.Format(time.RFC3339Nano)+`","actor":"x","action":"odd","extra":1}`))
	}); err != nil {
		t.Fatal(err)
	}
	for _, q := range []audit.Query{
		{}, {Since: t0.Add(1500 * time.Millisecond)}, {Since: t0.Add(1500*time.Millisecond + 1), Until: t0.Add(2*time.Second + 123456790)},
		{RequestID: "R20261129-01"}, {Until: t0.Add(5*time.Second + 2*time.Microsecond)},
	} {
		want := list(t, db, q)
		var wantJSON, wantCSV bytes.Buffer
		enc := json.NewEncoder(&wantJSON)
		cw := csv.NewWriter(&wantCSV)
		_ = cw.Write(audit.CSVHeader)
		for _, r := range want {
			_ = enc.Encode(&r)
			_ = cw.Write([]string{itoa(r.Seq), r.Time.Format(time.RFC3339Nano), asText(r.RequestID), asText(r.Actor),
				asText(r.Surface), asText(r.Action), asText(r.From), asText(r.To), asText(r.Detail)})
		}
		cw.Flush()
		for f, w := range map[audit.Format]*bytes.Buffer{audit.JSONL: &wantJSON, audit.CSV: &wantCSV} {
			var got bytes.Buffer
			n, err := audit.Export(context.Background(), db, q, f, &got, nil)
			if err != nil || int(n) != len(want) {
				t.Errorf("%+v %s: %d records, %v; want %d", q, f, n, err, len(want))
			}
			if got.String() != w.String() {
				t.Errorf("%+v %s:\ngot  %q\nwant %q", q, f, got.String(), w.String())
			}
		}
	}
}

func itoa(n uint64) string { b, _ := json.Marshal(n); return string(b) }

package audit_test

import (
	"bytes"
	"context"
	"encoding/csv"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/store"
)

// TestExportCSVNeutralisesFormulas: a CSV cell a spreadsheet would run as a
// formula (it begins with =, +, -, @, a tab or a CR) is written with a
// single quote before it, in every column, for records read in place and
// for those decoded the long way; other cells, and the JSONL export, are
// written as stored.
func TestExportCSVNeutralisesFormulas(t *testing.T) {
	db := openDB(t)
	var recs []audit.Record
	for i, d := range []string{"=HYPERLINK(\"http://evil\",\"x\")", "+1+1", "-2+3", "@SUM(A1)", "\t=1", "\r=1", "'=already quoted"} {
		recs = append(recs, audit.Record{Time: t0.Add(time.Duration(i) * time.Second), RequestID: d, Actor: d,
			Surface: d, Action: d, From: d, To: d, Detail: d})
	}
	recs = append(recs, audit.Record{Time: t0.Add(10 * time.Second), Actor: "slack:U1", Action: "note", Detail: "a=b, x-1 @home +",
		From: " =1"})
	appendAll(t, db, recs...)
	if err := db.Update(context.Background(), func(tx store.Tx) error { // not the stored shape: decoded
		return tx.Put("audit", "0000000000000-000000000000",
			[]byte(` {"seq": 99, "time":"`+t0.Add(20*time.Second).Format(time.RFC3339Nano)+`","actor":"=cmd|' /C calc'!A0","action":"-x","extra":1}`))
	}); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if _, err := audit.Export(context.Background(), db, audit.Query{}, audit.CSV, &out, nil); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(&out).ReadAll()
	if err != nil {
		t.Fatalf("CSV does not parse: %v\n%s", err, out.String())
	}
	want := list(t, db, audit.Query{})
	if len(rows) != len(want)+1 || !slices.Equal(rows[0], audit.CSVHeader) {
		t.Fatalf("rows %q", rows)
	}
	for i, w := range want {
		stored := []string{w.RequestID, w.Actor, w.Surface, w.Action, w.From, w.To, w.Detail}
		for j, s := range stored {
			stored[j] = asText(s)
		}
		if got := rows[i+1][2:]; !slices.Equal(got, stored) {
			t.Errorf("row %d: %q\nwant %q", i+1, got, stored)
		}
	}
	out.Reset()
	if _, err := audit.Export(context.Background(), db, audit.Query{}, audit.JSONL, &out, nil); err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(out.Bytes(), []byte(`"actor":"=cmd|' /C calc'!A0"`)) || !bytes.Contains(out.Bytes(), []byte(`"detail":"@SUM(A1)"`)) {
		t.Errorf("JSONL export changed the stored values:\n%s", out.String())
	}
}

// asText is s as the CSV export writes it: with a single quote before it
// if it begins with a character that makes a spreadsheet read a formula.
func asText(s string) string {
	if s != "" && strings.ContainsAny(s[:1], "=+-@\t\r") {
		return "'" + s
	}
	return s
}

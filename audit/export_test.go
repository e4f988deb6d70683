package audit_test

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/roombridge/roombridge/audit"
)

func TestParseFormat(t *testing.T) {
	for in, want := range map[string]audit.Format{"": audit.JSONL, "jsonl": audit.JSONL, "csv": audit.CSV, "CSV": audit.CSV, "JsonL": audit.JSONL} {
		if got, err := audit.ParseFormat(in); err != nil || got != want {
			t.Errorf("ParseFormat(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"xml", "json", "tsv", "jsonl ", "csv,jsonl"} {
		if got, err := audit.ParseFormat(in); err == nil {
			t.Errorf("ParseFormat(%q) = %q; want an error", in, got)
		}
	}
}

// progressLog records Progress calls.
type progressLog struct {
	calls []string
}

func (p *progressLog) fn(n uint64, done bool) {
	p.calls = append(p.calls, strconv.FormatUint(n, 10)+map[bool]string{true: " done", false: ""}[done])
}

// tricky holds field values that need quoting or escaping.
var tricky = []audit.Record{
	{Time: t0, RequestID: "R20261129-01", Actor: "slack:U1", Surface: "slack", Action: "create", To: "pending", Detail: `plain`},
	{Time: t0.Add(time.Second), RequestID: "R20261129-01", Actor: "feishu:ou_x", Action: "approve", From: "pending", To: "approved", Detail: "comma, \"quotes\"\nand a newline"},
	{Time: t0.Add(1500 * time.Millisecond), Actor: "system:outbox", Action: "delivery_failed", Detail: "ünïcødé ✓, =1+1"},
	{Time: t0.Add(2*time.Second + 123456789), RequestID: "R20261129-02", Actor: "api:ci", Surface: "api", Action: "create", To: "approved", Detail: ""},
}

func TestExportJSONL(t *testing.T) {
	db := openDB(t)
	appendAll(t, db, tricky...)
	want := list(t, db, audit.Query{})
	var buf bytes.Buffer
	var p progressLog
	n, err := audit.Export(context.Background(), db, audit.Query{}, audit.JSONL, &buf, p.fn)
	if err != nil || n != 4 {
		t.Fatalf("Export = %d, %v", n, err)
	}
	dec := json.NewDecoder(&buf)
	dec.DisallowUnknownFields()
	var got []audit.Record
	for {
		var r audit.Record
		err := dec.Decode(&r)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("line %d: %v", len(got)+1, err)
		}
		got = append(got, r)
	}
	if len(got) != len(want) {
		t.Fatalf("%d lines, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d: %+v\nwant %+v", i+1, got[i], want[i])
		}
	}
	if !slices.Equal(p.calls, []string{"4 done"}) {
		t.Errorf("progress calls %v", p.calls)
	}
}

func TestExportJSONLOneObjectPerLine(t *testing.T) {
	db := openDB(t)
	appendAll(t, db, tricky...)
	var buf bytes.Buffer
	if _, err := audit.Export(context.Background(), db, audit.Query{}, audit.JSONL, &buf, nil); err != nil {
		t.Fatal(err)
	}
	lines := bytes.Split(bytes.TrimSuffix(buf.Bytes(), []byte("\n")), []byte("\n"))
	if len(lines) != 4 {
		t.Fatalf("%d lines", len(lines))
	}
	for i, l := range lines {
		var m map[string]any
		if err := json.Unmarshal(l, &m); err != nil {
			t.Errorf("line %d %q: %v", i+1, l, err)
		}
	}
}

func TestExportCSV(t *testing.T) {
	db := openDB(t)
	appendAll(t, db, tricky...)
	want := list(t, db, audit.Query{})
	var buf bytes.Buffer
	var p progressLog
	n, err := audit.Export(context.Background(), db, audit.Query{}, audit.CSV, &buf, p.fn)
	if err != nil || n != 4 {
		t.Fatalf("Export = %d, %v", n, err)
	}
	rows, err := csv.NewReader(&buf).ReadAll()
	if err != nil {
		t.Fatalf("CSV does not parse: %v\n%s", err, buf.String())
	}
	if len(rows) != 5 || !slices.Equal(rows[0], audit.CSVHeader) {
		t.Fatalf("rows %q", rows)
	}
	wantHeader := []string{"seq", "time", "request_id", "actor", "surface", "action", "from", "to", "detail"}
	if !slices.Equal(audit.CSVHeader, wantHeader) {
		t.Errorf("header %v", audit.CSVHeader)
	}
	for i, row := range rows[1:] {
		w := want[i]
		seq, err := strconv.ParseUint(row[0], 10, 64)
		if err != nil || seq != w.Seq {
			t.Errorf("row %d seq %q", i+1, row[0])
		}
		tm, err := time.Parse(time.RFC3339Nano, row[1])
		if err != nil || !tm.Equal(w.Time) {
			t.Errorf("row %d time %q, want %v", i+1, row[1], w.Time)
		}
		if got := row[2:]; !slices.Equal(got, []string{w.RequestID, w.Actor, w.Surface, w.Action, w.From, w.To, w.Detail}) {
			t.Errorf("row %d: %q\nwant %+v", i+1, got, w)
		}
	}
	if !slices.Equal(p.calls, []string{"4 done"}) {
		t.Errorf("progress calls %v", p.calls)
	}
}

func TestExportQueryAndEmpty(t *testing.T) {
	db := fixture(t)
	for _, f := range []audit.Format{audit.CSV, audit.JSONL} {
		var buf bytes.Buffer
		n, err := audit.Export(context.Background(), db, audit.Query{Since: t0.Add(2 * time.Second), Until: t0.Add(4 * time.Second)}, f, &buf, nil)
		if err != nil || n != 4 { // a2 a3 b3 c3
			t.Errorf("%s: %d, %v", f, n, err)
		}
		buf.Reset()
		var p progressLog
		n, err = audit.Export(context.Background(), db, audit.Query{RequestID: "nope"}, f, &buf, p.fn)
		if err != nil || n != 0 || !slices.Equal(p.calls, []string{"0 done"}) {
			t.Errorf("%s empty: %d, %v, progress %v", f, n, err, p.calls)
		}
		if f == audit.CSV {
			rows, err := csv.NewReader(&buf).ReadAll()
			if err != nil || len(rows) != 1 {
				t.Errorf("empty CSV: %q, %v (want just the header)", rows, err)
			}
		} else if buf.Len() != 0 {
			t.Errorf("empty JSONL: %q", buf.String())
		}
	}
	var buf bytes.Buffer
	var p progressLog
	if _, err := audit.Export(context.Background(), db, audit.Query{}, "xml", &buf, p.fn); err == nil || buf.Len() != 0 || len(p.calls) != 0 {
		t.Errorf("xml: %v, wrote %q, progress %v", err, buf.String(), p.calls)
	}
}

// TestExportProgress: progress every 8192 records, then once with done.
func TestExportProgress(t *testing.T) {
	db := openDB(t)
	const n = 20000
	recs := make([]audit.Record, n)
	for i := range recs {
		recs[i] = audit.Record{Time: t0.Add(time.Duration(i) * time.Millisecond), RequestID: "R20261129-01", Actor: "t", Action: "x"}
	}
	appendAll(t, db, recs...)
	for _, f := range []audit.Format{audit.CSV, audit.JSONL} {
		var p progressLog
		cw := &countWriter{}
		got, err := audit.Export(context.Background(), db, audit.Query{}, f, cw, p.fn)
		if err != nil || got != n {
			t.Fatalf("%s: %d, %v", f, got, err)
		}
		if want := []string{"8192", "16384", "20000 done"}; !slices.Equal(p.calls, want) {
			t.Errorf("%s progress %v, want %v", f, p.calls, want)
		}
		if cw.lines != n+map[audit.Format]int{audit.CSV: 1, audit.JSONL: 0}[f] {
			t.Errorf("%s: %d lines", f, cw.lines)
		}
	}
}

type countWriter struct{ lines int }

func (c *countWriter) Write(p []byte) (int, error) {
	c.lines += bytes.Count(p, []byte("\n"))
	return len(p), nil
}

type failWriter struct{ after int }

func (f *failWriter) Write(p []byte) (int, error) {
	if f.after -= len(p); f.after < 0 {
		return 0, errors.New("disk full")
	}
	return len(p), nil
}

func TestExportWriteError(t *testing.T) {
	db := openDB(t)
	recs := make([]audit.Record, 5000)
	for i := range recs {
		recs[i] = audit.Record{Time: t0, Actor: "t", Action: "x", Detail: "some detail to fill the buffer"}
	}
	appendAll(t, db, recs...)
	for _, f := range []audit.Format{audit.CSV, audit.JSONL} {
		for _, after := range []int{0, 100 << 10} { // fails at the first flush, or midway
			var p progressLog
			_, err := audit.Export(context.Background(), db, audit.Query{}, f, &failWriter{after: after}, p.fn)
			if err == nil {
				t.Errorf("%s, failing after %d bytes: no error", f, after)
			}
			for _, c := range p.calls {
				if bytes.HasSuffix([]byte(c), []byte("done")) {
					t.Errorf("%s: progress said done after a failed write", f)
				}
			}
		}
	}
}

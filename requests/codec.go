package requests

import (
	"fmt"

	"github.com/roombridge/roombridge/internal/jsonx"
)

// encode is r's JSON record, exactly as json.Marshal writes it (the
// fields in order, with their tags; TestEncodeIsMarshal holds it to
// that), without reflection: every transition rewrites the request.
func encode(r *Request) ([]byte, error) {
	// About its length (one allocation, no growth): names, times and
	// numbers (~400 bytes), strings, references, usage.
	size := 400 + len(r.Owner) + len(r.Agent) + len(r.Room) + len(r.Surface) + len(r.Requester) +
		len(r.Ask) + len(r.Session) + len(r.Activity) + len(r.Reason) + len(r.Result) + 24*len(r.References)
	if !r.Usage.IsZero() {
		size += 200
	}
	o := jsonx.NewObject(size)
	o.String("id", r.ID.String(), false)
	o.String("owner", r.Owner, false)
	o.String("agent", r.Agent, false)
	o.String("room", r.Room, true)
	o.String("surface", r.Surface, false)
	o.String("requester", r.Requester, false)
	o.String("ask", r.Ask, false)
	o.String("state", r.State.String(), false)
	o.Int("version", r.Version, false)
	o.String("retry_of", r.RetryOf.String(), true)
	if len(r.References) > 0 {
		o.Append("references", r.appendReferences)
	}
	o.String("delegated_by", r.DelegatedBy.String(), true)
	o.String("session", r.Session, true)
	o.Bool("cancel_requested", r.CancelRequested, true)
	o.Int("progress", int64(r.Progress), true)
	o.String("activity", r.Activity, true)
	o.String("reason", r.Reason, true)
	o.String("result", r.Result, true)
	o.Time("created", r.Created, false)
	o.Time("updated", r.Updated, false)
	o.Time("started_at", r.StartedAt, true)
	o.Time("ended_at", r.EndedAt, true)
	if !r.Usage.IsZero() {
		o.Value("usage", r.Usage) // a dollar figure: json.Marshal's float form
	}
	b, err := o.Bytes()
	if err != nil {
		return nil, fmt.Errorf("requests: encode %s: %w", r.ID, err)
	}
	return b, nil
}

func (r *Request) appendReferences(b []byte) []byte {
	b = append(b, '[')
	for i, id := range r.References {
		if i > 0 {
			b = append(b, ',')
		}
		b = jsonx.AppendString(b, id.String())
	}
	return append(b, ']')
}

// DecodeRecord reads a record encode wrote, without reflection, and
// reports whether it could: store.Decode decodes any other form (and
// gives the same value for these) with the general decoder. A record
// with usage (its dollar figure a float) is left to it. r must be zero;
// it is left zero when DecodeRecord reports false.
func (r *Request) DecodeRecord(b []byte) bool {
	f := jsonx.ReadFields(b)
	f.Object(func(name string) { r.decodeField(&f, name) })
	if !f.Ok() {
		*r = Request{}
		return false
	}
	return true
}

func (r *Request) decodeField(f *jsonx.Fields, name string) {
	switch name {
	case "id":
		r.ID = ReadID(f)
	case "owner":
		r.Owner = f.String()
	case "agent":
		r.Agent = f.String()
	case "room":
		r.Room = f.String()
	case "surface":
		r.Surface = f.String()
	case "requester":
		r.Requester = f.String()
	case "ask":
		r.Ask = f.String()
	case "state":
		st, err := ParseState(f.String())
		if err != nil {
			f.Fail()
		}
		r.State = st
	case "version":
		r.Version = f.Int()
	case "retry_of":
		r.RetryOf = ReadID(f)
	case "references":
		r.References = make([]ID, 0, 2)
		f.Array(func() {
			r.References = append(r.References, ReadID(f))
		})
	case "delegated_by":
		r.DelegatedBy = ReadID(f)
	case "session":
		r.Session = f.String()
	case "cancel_requested":
		r.CancelRequested = f.Bool()
	case "progress":
		if n := f.Int(); int64(int(n)) == n {
			r.Progress = int(n)
		} else {
			f.Fail()
		}
	case "activity":
		r.Activity = f.String()
	case "reason":
		r.Reason = f.String()
	case "result":
		r.Result = f.String()
	case "created":
		r.Created = f.Time()
	case "updated":
		r.Updated = f.Time()
	case "started_at":
		r.StartedAt = f.Time()
	case "ended_at":
		r.EndedAt = f.Time()
	default: // usage among them
		f.Fail()
	}
}

// ReadID reads a record's ID field from f, as ID's UnmarshalText does
// ("" is the zero ID; anything else not an ID fails f).
func ReadID(f *jsonx.Fields) ID {
	s := f.String()
	if s == "" {
		return ID{}
	}
	id, err := ParseID(s)
	if err != nil {
		f.Fail()
	}
	return id
}

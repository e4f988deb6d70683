package approvals

import (
	"fmt"
	"time"

	"github.com/roombridge/roombridge/internal/jsonx"
	"github.com/roombridge/roombridge/requests"
)

// encode is a's JSON record, exactly as json.Marshal writes it (the
// fields in order, with their tags; TestEncodeIsMarshal holds it to
// that), without reflection: every decision, expiry and notice rewrites
// the approval.
func (a *Approval) encode() ([]byte, error) {
	o := jsonx.NewObject(a.size())
	o.String("id", a.ID, false)
	o.String("kind", string(a.Kind), false)
	o.String("request_id", a.RequestID.String(), false)
	o.String("root", a.Root.String(), true)
	o.String("root_room", a.RootRoom, true)
	o.String("room", a.Room, false)
	o.String("agent", a.Agent, false)
	o.String("requester", a.Requester, false)
	o.String("action", a.Action, false)
	o.String("asker", a.Asker, false)
	o.String("state", string(a.State), false)
	o.Int("version", a.Version, false)
	o.String("decided_by", a.DecidedBy, true)
	o.String("surface", a.Surface, true)
	o.Time("decided_at", a.DecidedAt, true)
	o.String("answer", a.Answer, true)
	o.String("reason", a.Reason, true)
	o.Time("created", a.Created, false)
	o.Time("expires_at", a.ExpiresAt, false)
	o.Int("ttl", int64(a.TTL), false)
	o.Time("shown_at", a.ShownAt, true)
	o.Time("notice_at", a.NoticeAt, true)
	o.Time("reminded_at", a.RemindedAt, true)
	o.String("link", a.Link, true)
	if len(a.Copies) > 0 {
		o.Append("copies", a.appendCopies)
	}
	b, err := o.Bytes()
	if err != nil {
		return nil, fmt.Errorf("approvals: encode %s: %w", a.ID, err)
	}
	return b, nil
}

// size is about the length of a's record: its names, times and numbers
// (~500 bytes), its strings, its copies (one allocation, no growth).
func (a *Approval) size() int {
	n := 512 + len(a.ID) + len(a.Room) + len(a.RootRoom) + len(a.Agent) + len(a.Requester) + len(a.Action) +
		len(a.Asker) + len(a.DecidedBy) + len(a.Answer) + len(a.Reason) + len(a.Link)
	for _, c := range a.Copies {
		n += 40 + len(c.Surface) + len(c.Request) + len(c.Ref)
	}
	return n
}

func (a *Approval) appendCopies(b []byte) []byte {
	b = append(b, '[')
	for i, c := range a.Copies {
		if i > 0 {
			b = append(b, ',')
		}
		b = jsonx.AppendString(append(b, `{"surface":`...), c.Surface)
		b = jsonx.AppendString(append(b, `,"request":`...), c.Request)
		b = append(jsonx.AppendString(append(b, `,"ref":`...), c.Ref), '}')
	}
	return append(b, ']')
}

// DecodeRecord reads a record encode wrote, without reflection, and
// reports whether it could: store.Decode decodes any other form (and
// gives the same value for these) with the general decoder, so that a
// sweep decodes its approvals in a fraction of the time. a must be zero;
// it is left zero when DecodeRecord reports false.
func (a *Approval) DecodeRecord(b []byte) bool {
	f := jsonx.ReadFields(b)
	f.Object(func(name string) { a.decodeField(&f, name) })
	if !f.Ok() {
		*a = Approval{}
		return false
	}
	return true
}

func (a *Approval) decodeField(f *jsonx.Fields, name string) {
	switch name {
	case "id":
		a.ID = f.String()
	case "kind":
		a.Kind = Kind(f.String())
	case "request_id":
		a.RequestID = requests.ReadID(f)
	case "root":
		a.Root = requests.ReadID(f)
	case "root_room":
		a.RootRoom = f.String()
	case "room":
		a.Room = f.String()
	case "agent":
		a.Agent = f.String()
	case "requester":
		a.Requester = f.String()
	case "action":
		a.Action = f.String()
	case "asker":
		a.Asker = f.String()
	case "state":
		a.State = State(f.String())
	case "version":
		a.Version = f.Int()
	case "decided_by":
		a.DecidedBy = f.String()
	case "surface":
		a.Surface = f.String()
	case "decided_at":
		a.DecidedAt = f.Time()
	case "answer":
		a.Answer = f.String()
	case "reason":
		a.Reason = f.String()
	case "created":
		a.Created = f.Time()
	case "expires_at":
		a.ExpiresAt = f.Time()
	case "ttl":
		a.TTL = time.Duration(f.Int())
	case "shown_at":
		a.ShownAt = f.Time()
	case "notice_at":
		a.NoticeAt = f.Time()
	case "reminded_at":
		a.RemindedAt = f.Time()
	case "link":
		a.Link = f.String()
	case "copies":
		a.Copies = make([]Copy, 0, 2)
		f.Array(func() {
			var c Copy
			f.Object(func(name string) {
				switch name {
				case "surface":
					c.Surface = f.String()
				case "request":
					c.Request = f.String()
				case "ref":
					c.Ref = f.String()
				default:
					f.Fail()
				}
			})
			a.Copies = append(a.Copies, c)
		})
	default:
		f.Fail()
	}
}

package approvals

import (
	"fmt"

	"github.com/roombridge/roombridge/internal/jsonx"
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

// Package runners hosts agents on other machines (docs/design.md §6): the
// wire protocol between the bridge and `bridge runner` (gRPC bidirectional
// streaming with a JSON codec, no codegen), the bridge's side (Hub: runner
// tokens, connections, which runner hosts which agent, heartbeats and the
// grace; Runtime: the agents.Runtime of a runner-hosted agent) and the
// runner's side (Runner: connects out, runs the turns locally, serves the
// agent tools on localhost).
package runners

import (
	"encoding/json"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"

	"github.com/roombridge/roombridge/agents"
)

// Frame types (see docs/design.md §6).
const (
	FrameHello     = "hello"     // r→b: runner, agents, live
	FrameWelcome   = "welcome"   // b→r: heartbeat
	FrameHeartbeat = "heartbeat" // both ways
	FrameTurn      = "turn"      // b→r: run (or re-attach to) a turn
	FrameEvent     = "event"     // r→b: session, tool, progress, message
	FrameCall      = "call"      // r→b: an exec-protocol call
	FrameReply     = "reply"     // b→r: the answer to a call
	FrameCancel    = "cancel"    // b→r: Turn.Cancel closed
	FrameDrain     = "drain"     // b→r: Turn.Drain closed
	FrameDone      = "done"      // r→b: the turn ended
	FrameAck       = "ack"       // b→r: the frames through seq are applied (no seq: the turn's end is recorded, forget it)
	FrameTask      = "task"      // b→r: start a background command
	FrameTaskStop  = "task_stop" // b→r: stop it
	FrameTaskEnd   = "task_end"  // r→b: it ended
	FrameTaskAck   = "task_ack"  // b→r: its end is recorded; forget it
)

// Frame is one message on the stream, either way.
type Frame struct {
	Type string `json:"type"`
	// Runner and Agents: the hello's runner name and the agents it hosts;
	// Live the requests whose turn is still alive on it.
	Runner string `json:"runner,omitempty"`
	// Instance names one run of the runner process: a reconnect of the
	// same instance replaces its connection; another is refused.
	Instance string   `json:"instance,omitempty"`
	Agents   []string `json:"agents,omitempty"`
	Live     []string `json:"live,omitempty"`
	// Tasks (hello) are the background commands the runner still knows,
	// by task key (owner/id): running, or ended and not acknowledged.
	Tasks []string `json:"tasks,omitempty"`
	// Job is a background command (task, task_stop, task_end, task_ack).
	Job *Job `json:"job,omitempty"`
	// Heartbeat is the period both sides send heartbeats at (welcome).
	Heartbeat time.Duration `json:"heartbeat,omitempty"`
	// Request is the request the frame is about; Seq the frame's number
	// within its turn (event, call, done).
	Request string `json:"request,omitempty"`
	Seq     int    `json:"seq,omitempty"`
	// Number (ack) is the number of the turn acknowledged (Turn.Number):
	// an ack of another turn of the request is ignored.
	Number int   `json:"number,omitempty"`
	Turn   *Turn `json:"turn,omitempty"`
	// Event is an event or a call (its ID names the call).
	Event    *agents.TurnEvent `json:"event,omitempty"`
	Response *agents.Response  `json:"response,omitempty"`
	Outcome  *agents.Outcome   `json:"outcome,omitempty"`
	// Error is a failed turn's reason; Interrupted: it was cut by a drain.
	Error       string `json:"error,omitempty"`
	Interrupted bool   `json:"interrupted,omitempty"`
	// Ended (cancel): the turn's request has ended and no turn of the
	// bridge's holds it (Hub.stopEnded): the runner stops the turn and
	// forgets it, as nobody will record or acknowledge its end.
	Ended bool `json:"ended,omitempty"`
}

// Turn is an agents.Turn on the wire (without its channels), with the
// turn's tool token and the last frame the bridge applied.
type Turn struct {
	RequestID string         `json:"request_id"`
	Agent     string         `json:"agent"`
	Session   string         `json:"session,omitempty"`
	Resumed   bool           `json:"resumed,omitempty"`
	Input     []agents.Input `json:"input,omitempty"`
	MCPToken  string         `json:"mcp_token,omitempty"`
	// After is the last Seq the bridge applied, as its store says (any
	// leader knows it: it is written with each applied report): a live
	// turn resends the frames after it (and its calls not answered yet); a
	// new one numbers its frames from it.
	After int `json:"after,omitempty"`
	// Number is the scheduler's number of the request's turn
	// (agents.Turn.Number): the runner re-attaches only to a turn of the
	// same number it keeps (running, or ended and its end not yet
	// recorded); any other it keeps is over, and this one starts.
	Number int `json:"number,omitempty"`
}

// Job is a background command of a runner-hosted agent (delegation's
// background_run), run on the runner: Key names it (owner/id, see
// delegation.TaskKey); task_end carries State (succeeded, failed,
// stopped), Reason and Output.
type Job struct {
	Key     string   `json:"key"`
	Agent   string   `json:"agent,omitempty"`
	Command []string `json:"command,omitempty"`
	State   string   `json:"state,omitempty"`
	Reason  string   `json:"reason,omitempty"`
	Output  string   `json:"output,omitempty"`
}

// codec is gRPC's codec for Frame: JSON (content subtype "json").
type codec struct{}

func (codec) Marshal(v any) ([]byte, error)   { return json.Marshal(v) }
func (codec) Unmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }
func (codec) Name() string                    { return codecName }

const codecName = "json"

func init() { encoding.RegisterCodec(codec{}) }

// connectServer is what the service's handler is registered on.
type connectServer interface {
	connect(stream grpc.ServerStream) error
}

// ServiceName and connectMethod name the runner service on the wire.
const (
	ServiceName   = "roombridge.runner.v1.Runner"
	connectMethod = "/" + ServiceName + "/Connect"
)

var serviceDesc = grpc.ServiceDesc{
	ServiceName: ServiceName,
	HandlerType: (*connectServer)(nil),
	Streams: []grpc.StreamDesc{{
		StreamName:    "Connect",
		ServerStreams: true,
		ClientStreams: true,
		Handler: func(srv any, stream grpc.ServerStream) error {
			return srv.(connectServer).connect(stream)
		},
	}},
}

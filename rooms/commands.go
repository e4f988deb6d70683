package rooms

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/roombridge/roombridge/approvals"
	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/delegation"
	"github.com/roombridge/roombridge/internal/clip"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store"
)

// Tasks is what the "tasks" and "dismiss ID" commands need of background
// tasks (*delegation.Service).
type Tasks interface {
	// Running lists the tasks of room that its listing shows.
	Running(ctx context.Context, room string) ([]delegation.Task, error)
	// DismissTask clears ended task id from its room's listing for actor.
	DismissTask(ctx context.Context, id, actor, surface string) (*delegation.Task, error)
}

// help lists the chat commands.
const help = "commands: @agent ask | web | inbox | tasks | dismiss TASK | approve ID | deny ID | answer ID TEXT | cancel ID | retry ID | show ID | revoke USER"

// Shapes of the arguments of commands typed in a mention (IsCommand).
var (
	refRE  = regexp.MustCompile(`^[RT](?:[0-9]{8})?-[0-9]+(?:\.q?[0-9]+)?$`)
	userRE = regexp.MustCompile(`^[a-z]+:[^\s:]+$`)
)

// IsCommand reports whether text (a mention of the bot, an ask) is a
// command rather than an ask: a command's verb alone (help, inbox, tasks),
// or followed by exactly what it takes (an ID: "approve R-07", "dismiss
// T-3"; an ID and text: "answer R-07.q1 yes"; a user: "revoke slack:U1").
// Anything else is an ask of the room's first agent ("show me the logs");
// naming the agent ("@bridge coder tasks") always asks it.
func IsCommand(text string) bool {
	f := strings.Fields(text)
	if len(f) == 0 {
		return false
	}
	switch f[0] {
	case "help", "inbox", "tasks", "web":
		return len(f) == 1
	case "dismiss", "approve", "deny", "cancel", "retry", "show":
		return len(f) == 2 && refRE.MatchString(f[1])
	case "answer":
		return len(f) >= 3 && refRE.MatchString(f[1])
	case "revoke":
		return len(f) == 2 && userRE.MatchString(f[1])
	}
	return false
}

// commandDedupeTTL is how long a command's event ID is remembered
// (commandOnce): as long as an ask's (requests), longer than any platform
// delivers an event again.
const commandDedupeTTL = 24 * time.Hour

// changesState reports whether verb is a command that changes state, which
// a platform's redelivery must not run again (commandOnce). retry is not
// among them: it dedupes itself, under the same key
// (requests.Service.RetryEvent).
func changesState(verb string) bool {
	switch verb {
	case "cancel", "approve", "deny", "answer", "revoke", "dismiss":
		return true
	}
	return false
}

// commandOnce carries out a command, one that changes state at most once
// per platform event: its outcome (the answer, or the refusal) is recorded
// under the event's dedupe key, the key an ask of the event would take
// ("ask:slack:Ev1", requests.Ask.EventKey), so that a redelivery is a
// duplicate (requests.ErrDuplicate: acknowledged, nobody told, nothing
// audited), after a restart or on another instance too. The connectors
// remember answered events in memory only (internal/handled). The key is
// written in a transaction after the command's: a crash between the two
// runs the command again at the redelivery. Commands that only read run
// again, answering what is true then.
func (rt *Router) commandOnce(ctx context.Context, ev chat.Event) (string, error) {
	verb, _, _ := strings.Cut(strings.TrimSpace(ev.Text), " ")
	key := eventKey(ev)
	if key == "" || !changesState(verb) {
		return rt.command(ctx, ev)
	}
	key = "ask:" + key
	st := rt.svc.Store()
	var told []byte
	var seen bool
	err := st.View(ctx, func(tx store.Tx) (err error) {
		told, seen, err = store.Recall(tx, key, rt.svc.Clock().Now())
		return err
	})
	switch {
	case err != nil:
		return "", fmt.Errorf("rooms: command %s: %w", verb, err)
	case seen:
		rt.log.InfoContext(ctx, "redelivered command not run again", "surface", ev.Surface, "event_id", ev.ID,
			"verb", verb, "answered", string(told))
		return "", fmt.Errorf("rooms: command %s: %w %s", verb, requests.ErrDuplicate, key)
	}
	msg, err := rt.command(ctx, ev)
	if ours(ctx, err) {
		return msg, err
	}
	outcome := msg
	if err != nil {
		outcome = userMessage(err)
	}
	if rerr := st.Update(ctx, func(tx store.Tx) error {
		return store.Remember(tx, key, []byte(outcome), rt.svc.Clock().Now(), commandDedupeTTL)
	}); rerr != nil {
		rt.log.WarnContext(ctx, "recording a command's event failed: a redelivery would run it again", "surface", ev.Surface,
			"event_id", ev.ID, "verb", verb, "error", rerr)
	}
	return msg, err
}

// command carries out a typed command (the console's lines, a mention that
// IsCommand): every surface's commands are parsed and authorised here. A
// command other than help must come from a channel bound to a room.
func (rt *Router) command(ctx context.Context, ev chat.Event) (string, error) {
	verb, arg, _ := strings.Cut(strings.TrimSpace(ev.Text), " ")
	arg = strings.TrimSpace(arg)
	if verb == "help" {
		return help, nil
	}
	room, ok := rt.rooms.Room(ev.Surface, ev.Channel)
	if !ok {
		return "", fmt.Errorf("%s %s is not bound to a room", ev.Surface, ev.Channel)
	}
	switch verb {
	case "web":
		if rt.SignIn == nil {
			return "", fmt.Errorf("the web room is not enabled")
		}
		return rt.SignIn(ctx, ev.User, ev.Surface)
	case "inbox":
		in, err := rt.appr.Inbox(ctx, room.Name)
		if err != nil {
			return "", err
		}
		return in.Text(), nil
	case "tasks":
		return rt.tasksText(ctx, room.Name)
	case "dismiss":
		return rt.dismiss(ctx, arg, ev.User, ev.Surface)
	case "revoke":
		ids, err := rt.appr.Revoke(ctx, arg, ev.User, ev.Surface)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("%s revoked: %d waiting request(s) cancelled %v; running ones finish", arg, len(ids), ids), nil
	case "approve", "deny":
		a, err := rt.Decide(ctx, arg, verb == "approve", ev.User, ev.Surface)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("%s %s", a.ID, a.State), nil
	case "answer":
		id, text, _ := strings.Cut(arg, " ")
		q, err := rt.Answer(ctx, id, text, ev.User, ev.Surface)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("%s answered; %s gets your answer", q.ID, approvals.QuestionAsker(q)), nil
	case "cancel", "retry", "show":
		return rt.requestCommand(ctx, verb, arg, ev)
	}
	return "", fmt.Errorf("unknown command %q (try help)", verb)
}

// requestCommand carries out a command on request arg: cancel, retry, show.
func (rt *Router) requestCommand(ctx context.Context, verb, arg string, ev chat.Event) (string, error) {
	id, err := requests.ParseRef(arg, rt.svc.Clock().Now())
	if err != nil {
		return "", err
	}
	switch verb {
	case "cancel":
		r, err := rt.Cancel(ctx, id, ev.User, ev.Surface)
		if err != nil {
			return "", err
		}
		if r.State == requests.Running {
			return fmt.Sprintf("%s will stop at its next safe point", r.ID), nil
		}
		return fmt.Sprintf("%s cancelled", r.ID), nil
	case "retry":
		r, err := rt.retry(ctx, id, ev.User, ev.Surface, eventKey(ev))
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("%s → %s (%s), retry of %s", r.ID, r.Agent, r.State, id), nil
	}
	r, err := rt.svc.Get(ctx, id)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%s · %s · %s · asked by %s: %s", r.ID, r.Agent, r.State, r.Requester, r.Ask), nil
}

// errNoTasks: the bridge runs no background tasks.
var errNoTasks = fmt.Errorf("background tasks are not available")

// tasksText answers "tasks": the background tasks of room, as lines.
func (rt *Router) tasksText(ctx context.Context, room string) (string, error) {
	if rt.tasks == nil {
		return "", errNoTasks
	}
	ts, err := rt.tasks.Running(ctx, room)
	if err != nil {
		return "", err
	}
	return TasksText(ts), nil
}

// dismiss answers "dismiss ID": it clears ended task id from its room's
// listing on behalf of user (who may do so wherever the tasks are listed,
// as through the HTTP API; delegation audits it).
func (rt *Router) dismiss(ctx context.Context, id, user, surface string) (string, error) {
	if id == "" || strings.Contains(id, " ") {
		return "", fmt.Errorf("dismiss needs one task ID (dismiss T-3)")
	}
	if rt.tasks == nil {
		return "", errNoTasks
	}
	t, err := rt.tasks.DismissTask(ctx, id, user, surface)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%s dismissed (by %s)", t.Line(), t.DismissedBy), nil
}

// TasksText renders a room's task listing (delegation.Service.Running) for
// the "tasks" command.
func TasksText(ts []delegation.Task) string {
	if len(ts) == 0 {
		return "no background tasks running"
	}
	running := 0
	for _, t := range ts {
		if t.State == delegation.TaskRunning {
			running++
		}
	}
	head := fmt.Sprintf("%d background task(s) running", running)
	if ended := len(ts) - running; ended > 0 {
		head += fmt.Sprintf(", %d failed or interrupted (\"dismiss ID\" clears one)", ended)
	}
	lines := []string{head + ":"}
	for _, t := range ts {
		when := "since " + t.Started.Format(time.TimeOnly)
		if t.State != delegation.TaskRunning {
			when = t.State + " at " + t.Ended.Format(time.TimeOnly)
			if t.Reason != "" {
				when += ": " + clip.Text(t.Reason, 80, clip.Bytes)
			}
		}
		lines = append(lines, fmt.Sprintf("%s %s (%s for %s, %s): %s", t.ID, t.Name, t.Agent, t.Request, when, clip.Text(t.What(), 80, clip.Bytes)))
	}
	return strings.Join(lines, "\n")
}

// Package console is a chat room in the terminal: people type asks and
// commands on stdin and see each request's thread as lines on stdout.
package console

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/roombridge/roombridge/chat"
)

// Connector is the console surface. It implements chat.DirectMessenger.
type Connector struct {
	in   io.Reader
	room string

	mu     sync.Mutex
	out    io.Writer
	user   string
	self   string            // who started the console; "/as" alone comes back to them
	status map[string]string // last status printed per message
	seq    int
	live   bool // a live line (live.go) is open: the next line ends it
}

var _ chat.DirectMessenger = (*Connector)(nil)

// maxStatuses bounds the statuses the console remembers, which serve only
// to skip printing a message's unchanged status again: forgetting them
// costs at most one repeated status line.
const maxStatuses = 1024

// New returns a console room named room, read from in and written to out,
// where user types (without the console: prefix).
func New(in io.Reader, out io.Writer, room, user string) *Connector {
	return &Connector{in: in, out: out, room: room, user: user, self: user, status: map[string]string{}}
}

// Surface implements chat.Connector.
func (c *Connector) Surface() string { return chat.Console }

func (c *Connector) printf(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.endLive()
	fmt.Fprintf(c.out, format+"\n", args...)
}

// commands is what can be typed, for the banner and for help.
const commands = "type @agent <ask>, web, inbox, tasks, dismiss <task>, approve|deny|cancel|retry|show <ID>, " +
	"answer <ID> <text>, revoke <user>, /as <user> (act as someone else), /as (back to yourself), help"

// Run reads lines until in ends or ctx is done. The end of input is not an
// error: the bridge keeps serving its other surfaces.
func (c *Connector) Run(ctx context.Context, h chat.Handler) error {
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(c.in)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			case <-ctx.Done():
				return
			}
		}
	}()
	c.printf("console room %q, you are console:%s: %s", c.room, c.user, commands)
	for {
		select {
		case <-ctx.Done():
			return nil
		case line, ok := <-lines:
			if !ok {
				return nil
			}
			c.handle(ctx, h, line)
		}
	}
}

func (c *Connector) handle(ctx context.Context, h chat.Handler, line string) {
	line = strings.TrimSpace(line)
	if line == "" {
		return
	}
	c.mu.Lock()
	user := c.user
	c.mu.Unlock()
	ev := chat.Event{Surface: chat.Console, Channel: c.room, User: chat.Console + ":" + user, Text: line}
	switch {
	case line == "help":
		c.printf("* %s", commands)
		return
	case line == "/as" || strings.HasPrefix(line, "/as "):
		who := strings.TrimSpace(strings.TrimPrefix(line, "/as"))
		if who == "" {
			who = c.self
		}
		if strings.ContainsAny(who, " :") {
			c.printf("! /as needs a user name without spaces or colons")
			return
		}
		c.mu.Lock()
		c.user = who
		c.mu.Unlock()
		c.printf("* you are now console:%s", who)
		return
	case strings.HasPrefix(line, "@"):
		ev.Kind = chat.Ask
	default:
		ev.Kind = chat.Command
	}
	resp := h.Handle(ctx, ev)
	switch {
	case resp.Retry: // no platform here to deliver it again
		c.printf("! not taken: the bridge could not store it; send it again")
	case resp.Text == "":
	case resp.Error:
		c.printf("! %s", strings.ReplaceAll(resp.Text, "\n", "\n  "))
	default:
		// Multi-line answers (the inbox) continue indented under their "*".
		c.printf("* %s", strings.ReplaceAll(resp.Text, "\n", "\n  "))
	}
}

// StartThread prints the thread's title and first status.
func (c *Connector) StartThread(_ context.Context, channel string, m chat.Message) (chat.ThreadRef, chat.MessageRef, error) {
	c.printf("== %s ==", title(m))
	ref := chat.MessageRef{Surface: chat.Console, Channel: channel, ID: m.Request + "/parent"}
	c.printStatus(ref, m)
	return chat.ThreadRef{Surface: chat.Console, Channel: channel, ID: m.Request}, ref, nil
}

// Reply prints a line of the thread.
func (c *Connector) Reply(_ context.Context, t chat.ThreadRef, m chat.Message) (chat.MessageRef, error) {
	c.mu.Lock()
	c.seq++
	ref := chat.MessageRef{Surface: chat.Console, Channel: t.Channel, ID: fmt.Sprintf("%s/%d", t.ID, c.seq)}
	c.mu.Unlock()
	c.printCard(t.ID, m)
	return ref, nil
}

// Update prints the message's new status, if it changed.
func (c *Connector) Update(_ context.Context, ref chat.MessageRef, m chat.Message) error {
	if m.Card != nil && len(m.Card.Buttons) == 0 && m.Kind == "approval" {
		c.printf("   %s | %s", m.Request, firstNonEmpty(m.Card.Status, m.Text))
		return nil
	}
	c.printStatus(ref, m)
	return nil
}

// Direct prints a message addressed to one person.
func (c *Connector) Direct(_ context.Context, user string, m chat.Message) (chat.MessageRef, error) {
	c.mu.Lock()
	c.seq++
	ref := chat.MessageRef{Surface: chat.Console, Channel: "@" + user, ID: fmt.Sprintf("dm/%d", c.seq)}
	c.mu.Unlock()
	c.printCard("@"+user, m)
	return ref, nil
}

func (c *Connector) printStatus(ref chat.MessageRef, m chat.Message) {
	status := m.Text
	if m.Card != nil {
		status = m.Card.Status
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.status[ref.ID] == status {
		return
	}
	if len(c.status) >= maxStatuses {
		clear(c.status) // a long run must not keep one entry per message ever shown
	}
	c.status[ref.ID] = status
	c.endLive()
	fmt.Fprintf(c.out, "   %s | status: %s\n", m.Request, status)
}

func (c *Connector) printCard(prefix string, m chat.Message) {
	switch {
	case m.Card != nil:
		lines := []string{title(m)}
		if m.Card.Text != "" {
			lines = append(lines, m.Card.Text)
		}
		for _, f := range m.Card.Fields {
			lines = append(lines, f.Label+": "+f.Value)
		}
		if m.Card.Status != "" {
			lines = append(lines, m.Card.Status)
		}
		var buttons []string
		for _, b := range m.Card.Buttons {
			buttons = append(buttons, b.ActionID+" "+b.Value)
		}
		if len(buttons) > 0 {
			lines = append(lines, "type: "+strings.Join(buttons, " | "))
		}
		c.printf("   %s | %s", prefix, strings.Join(lines, "\n   "+prefix+" | "))
	case m.Kind == "final":
		c.printf("   %s | final: %s", prefix, indent(m.Text, prefix))
	default:
		c.printf("   %s | %s", prefix, indent(m.Text, prefix))
	}
}

func indent(text, prefix string) string {
	return strings.ReplaceAll(text, "\n", "\n   "+prefix+" | ")
}

func title(m chat.Message) string {
	if m.Card != nil && m.Card.Title != "" {
		return m.Card.Title
	}
	return m.Text
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

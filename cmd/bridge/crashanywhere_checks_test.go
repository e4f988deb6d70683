package main

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/connectors/slack/slacktest"
	"github.com/roombridge/roombridge/delegation"
	"github.com/roombridge/roombridge/requests"
)

// checkStore checks the store of the dead bridge: request IDs consecutive
// per day from 1, no half-written request, each request's audit trail an
// unbroken chain ending in its state, task IDs unique. It returns the
// number of requests.
func (c *crashRun) checkStore(when string) int {
	c.t.Helper()
	st := openStore(c.t, c.data)
	defer st.close()
	all, err := st.svc.List(context.Background(), requests.Filter{})
	if err != nil {
		c.t.Fatal(err)
	}
	next := map[string]int{}
	for _, r := range all {
		day := r.ID.String()[:9]
		if next[day]++; r.ID.Seq() != next[day] {
			c.t.Fatalf("%s: request %s: IDs of %s are not consecutive from 1 (want seq %d)", when, r.ID, day, next[day])
		}
		if r.Agent == "" || r.Ask == "" || r.State == 0 || r.Version == 0 {
			c.t.Fatalf("%s: half-written request: %+v", when, r)
		}
		auditTrail(c.t, st.db, r)
	}
	st.taskStates()
	return len(all)
}

// checkEnd checks the settled run: each job's requests where the job puts
// them (none missing, none doubled), one thread parent per request in the
// fake Slack, every task's result delivered.
func (c *crashRun) checkEnd() {
	t := c.t
	st := openStore(t, c.data)
	defer st.close()
	ctx := context.Background()
	all, err := st.svc.List(ctx, requests.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	tasks, err := st.del.Tasks(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	tasksOf := map[requests.ID][]string{}
	for _, tk := range tasks {
		tasksOf[tk.Request] = append(tasksOf[tk.Request], tk.ID)
	}
	accounted := map[requests.ID]bool{}
	want := func(j *crashJob, r *requests.Request, state requests.State, what string) {
		t.Helper()
		accounted[r.ID] = true
		if r.State != state {
			t.Errorf("%s (%s): %s %s is %s (%s %q), want %s", j.tag, j.kind, what, r.ID, r.State, r.Reason, r.Result, state)
		}
	}
	// delegated checks a delegation by root: exactly one delegated request,
	// in state rb; if done, root's answer is B's, B's the task's result.
	delegated := func(j *crashJob, root *requests.Request, rb requests.State) {
		t.Helper()
		rbs := delegatedBy(all, root.ID)
		for _, b := range rbs {
			accounted[b.ID] = true
		}
		switch {
		case len(rbs) == 0:
			t.Errorf("%s (%s): %s delegated nothing", j.tag, j.kind, root.ID)
			return
		case len(rbs) > 1:
			t.Errorf("%s (%s): %s delegated %d requests %v, want 1 (a resumed turn repeats no call of its cut turn)",
				j.tag, j.kind, root.ID, len(rbs), ids(rbs))
		}
		// B: the one whose answer A got (the first, if A got none).
		b := rbs[0]
		for _, x := range rbs {
			if strings.HasPrefix(root.Result, "got answer "+x.ID.String()+": ") {
				b = x
			}
		}
		want(j, b, rb, "B's request")
		if ts := tasksOf[b.ID]; len(ts) != 1 {
			t.Errorf("%s (%s): B's request %s started tasks %v, want 1", j.tag, j.kind, b.ID, ts)
		}
		for _, x := range rbs {
			if !x.State.Terminal() {
				t.Errorf("%s (%s): B's request %s is %s", j.tag, j.kind, x.ID, x.State)
			}
		}
		answer := "got answer " + b.ID.String() + ": " + b.Result
		if root.State == requests.Done && (!strings.HasPrefix(b.Result, "got task_result T-") ||
			root.Result != answer && (len(rbs) == 1 || !strings.HasPrefix(root.Result, answer))) {
			t.Errorf("%s (%s): A %s answered %q, B %s %q: want B's answer from its task's result", j.tag, j.kind,
				root.ID, root.Result, b.ID, b.Result)
		}
	}
	for _, j := range c.jobs {
		var roots []*requests.Request
		for _, r := range all {
			if r.Ask == j.ask && r.RetryOf.IsZero() && r.DelegatedBy.IsZero() {
				roots = append(roots, r)
			}
		}
		if len(roots) != 1 {
			t.Errorf("%s (%s): %d requests %v for its event, want 1", j.tag, j.kind, len(roots), ids(roots))
			continue
		}
		root := roots[0]
		switch j.kind {
		case crashOwner, crashApprove:
			want(j, root, requests.Done, "the request")
			if root.Result != j.tag+"-done" {
				t.Errorf("%s (%s): %s answered %q", j.tag, j.kind, root.ID, root.Result)
			}
		case crashDeny:
			want(j, root, requests.Cancelled, "the request")
			if root.Reason != "denied by slack:UOWNER" {
				t.Errorf("%s (deny): %s reason %q", j.tag, root.ID, root.Reason)
			}
		case crashExpire:
			want(j, root, requests.Expired, "the request")
		case crashCancel:
			want(j, root, requests.Cancelled, "the request")
		case crashRetry, crashDelegateCancel:
			first, state := requests.Failed, requests.Failed
			if j.kind == crashDelegateCancel {
				first, state = requests.Cancelled, requests.Done
			}
			want(j, root, first, "the request")
			var retries []*requests.Request
			for _, r := range all {
				if r.RetryOf == root.ID {
					retries = append(retries, r)
				}
			}
			if len(retries) != 1 {
				t.Errorf("%s (%s): %d retries %v of %s, want 1", j.tag, j.kind, len(retries), ids(retries), root.ID)
				continue
			}
			want(j, retries[0], state, "the retry")
			if j.kind == crashDelegateCancel {
				delegated(j, root, requests.Cancelled)
				delegated(j, retries[0], requests.Done)
			}
		case crashDelegate:
			want(j, root, requests.Done, "A's request")
			delegated(j, root, requests.Done)
		case crashStream:
			want(j, root, requests.Done, "the request")
			c.checkStreamed(j, root)
		}
	}
	for _, r := range all {
		if !accounted[r.ID] {
			t.Errorf("request %s (%s, %s, %q) belongs to no job", r.ID, r.Agent, r.State, r.Ask)
		}
	}

	// One thread parent per request: a top-level post of the bot whose
	// text starts with the request's ID.
	parents := map[string]int{}
	rx := regexp.MustCompile(`^(R\d{8}-\d+) · `)
	for _, m := range c.fake.Messages() {
		if sub := rx.FindStringSubmatch(m.Text); m.ThreadTS == "" && m.User == slacktest.BotUserID && sub != nil {
			parents[sub[1]]++
		}
	}
	for _, r := range all {
		if n := parents[r.ID.String()]; n != 1 {
			t.Errorf("%s: %d thread parents posted in the fake Slack, want 1", r.ID, n)
		}
	}

	// Every task ended, and its result reached the request that started
	// it: an input of one of its turns, or (that request had ended) an
	// audit record that it arrived after the end; a task stopped because
	// its request was cancelled has nobody to tell.
	log, err := os.ReadFile(c.agentLog)
	if err != nil {
		t.Fatal(err)
	}
	for _, tk := range tasks {
		if tk.State == delegation.TaskRunning {
			t.Errorf("task %s (%s of %s) still runs", tk.ID, tk.Name, tk.Request)
			continue
		}
		input := regexp.MustCompile(`(?m)^\S+ input ` + regexp.QuoteMeta(tk.Request.String()) + ` task_result ` + regexp.QuoteMeta(tk.ID) + `: `)
		switch {
		case input.Match(log):
		case tk.State == delegation.TaskStopped && tk.Reason == "its request was cancelled":
		case auditHas(t, st, tk.Request, "undelivered", "the result of task "+tk.ID+" "),
			auditHas(t, st, tk.Request, "undelivered", "task_result arrived after the last turn: task "+tk.ID+" "):
		default:
			r := st.get(tk.Request)
			var lines []string
			for l := range strings.Lines(string(log)) {
				if strings.Contains(l, " "+r.ID.String()) {
					lines = append(lines, "  "+l)
				}
			}
			t.Errorf("task %s (%s of %s, %s: %s): its result reached no turn of %s (%s: %s) and is not recorded as undelivered; its audit:\n%sits agent's log:\n%s",
				tk.ID, tk.Name, tk.Request, tk.State, tk.Reason, r.ID, r.State, r.Reason, auditText(t, st, r.ID), strings.Join(lines, ""))
		}
	}
}

// streamedAnswer is the answer a stream job's agent writes word by word.
func streamedAnswer(tag string) string {
	return fmt.Sprintf("%[1]s-a %[1]s-b %[1]s-c %[1]s-d %[1]s-e %[1]s-f %[1]s-g %[1]s-h", tag)
}

// checkStreamed checks a stream job's thread in the fake Slack: its answer
// is the stored one and is shown exactly once (the live message the last
// turn streamed, or a reply), and every live message is closed: the one
// of a turn cut by a kill as interrupted.
func (c *crashRun) checkStreamed(j *crashJob, r *requests.Request) {
	t := c.t
	t.Helper()
	answer := streamedAnswer(j.tag)
	if r.Result != answer {
		t.Errorf("%s (stream): %s answered %q, want %q", j.tag, r.ID, r.Result, answer)
	}
	shown := 0
	for _, m := range c.fake.Messages() {
		if m.User != slacktest.BotUserID || m.ThreadTS == "" || !strings.Contains(m.Text, j.tag+"-a") &&
			!strings.Contains(m.Text, "interrupted") {
			continue
		}
		if parent, ok := c.fake.Message(m.Channel, m.ThreadTS); !ok || !strings.HasPrefix(parent.Text, r.ID.String()+" · ") {
			continue
		}
		if m.Streaming {
			t.Errorf("%s (stream): live message %s of %s was never closed (text %q)", j.tag, m.TS, r.ID, m.Text)
		}
		if m.Text == answer {
			shown++
		}
		if strings.HasPrefix(m.Text, "(interrupted") {
			c.interrupted++
		}
	}
	if shown != 1 {
		t.Errorf("%s (stream): the answer of %s is shown %d times in its thread, want once", j.tag, r.ID, shown)
	}
}

// auditText is request id's audit trail, a record a line.
func auditText(t *testing.T, st *offlineStore, id requests.ID) string {
	t.Helper()
	recs, err := audit.List(context.Background(), st.db, audit.Query{RequestID: id.String()}, 0)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, r := range recs {
		fmt.Fprintf(&b, "  %s %s %s %s→%s %s\n", r.Time.Format("15:04:05.000"), r.Actor, r.Action, r.From, r.To, r.Detail)
	}
	return b.String()
}

// auditHas reports whether request id has an audit record of action whose
// detail starts with prefix.
func auditHas(t *testing.T, st *offlineStore, id requests.ID, action, prefix string) bool {
	t.Helper()
	recs, err := audit.List(context.Background(), st.db, audit.Query{RequestID: id.String()}, 0)
	if err != nil {
		t.Fatal(err)
	}
	return slices.ContainsFunc(recs, func(r audit.Record) bool { return r.Action == action && strings.HasPrefix(r.Detail, prefix) })
}

// askOf is the request made by an ask event: not a retry, not delegated.
func askOf(reqs []*requests.Request, ask string) *requests.Request {
	for _, r := range reqs {
		if r.Ask == ask && r.RetryOf.IsZero() && r.DelegatedBy.IsZero() {
			return r
		}
	}
	return nil
}

// retryOf is the (first) retry of request id.
func retryOf(reqs []*requests.Request, id requests.ID) *requests.Request {
	for _, r := range reqs {
		if r.RetryOf == id {
			return r
		}
	}
	return nil
}

// delegatedBy lists the requests that request id delegated.
func delegatedBy(reqs []*requests.Request, id requests.ID) []*requests.Request {
	var out []*requests.Request
	for _, r := range reqs {
		if r.DelegatedBy == id {
			out = append(out, r)
		}
	}
	return out
}

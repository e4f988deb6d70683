// Package failpoint lets crash tests kill the bridge at exact points of its
// work: between a commit and what follows it, where a SIGKILL from outside
// would land only by luck. Hit kills where it is called; AtCommit kills
// when the transaction that called it commits, before anyone (not even
// the caller of Update) hears of the commit: the store hands each
// committed transaction's topics to Committed before it signals a
// subscriber. It exists for those tests (cmd/bridge's
// delegation crash test, and issue 9's crash-anywhere test) and is inert
// unless the environment variable ROOMBRIDGE_FAILPOINTS is set: then Hit
// costs one nil map check.
//
// ROOMBRIDGE_FAILPOINTS is read once, at start. It lists failpoint names,
// comma-separated; "name" kills the process at the first hit of name,
// "name@N" at the Nth. A malformed list stops the process at start with a
// message that says why. At the chosen hit, the process writes
// "failpoint NAME@N: killing the process" to stderr and SIGKILLs itself
// (on systems without signals it exits with status 137).
//
// The failpoints (names are stable: tests refer to them):
//
//	turn_started   (Hit) agents/scheduler.go, Scheduler.run: right after
//	               the transaction that starts, resumes or wakes a request
//	               for a turn committed, before its agent runs.
//	turn_ending    (Hit) agents/scheduler.go, Scheduler.end: in the
//	               transaction that records how a request's turn ended
//	               (final answer, failure or stop), before it commits:
//	               for a runner-hosted agent, its done frame has arrived
//	               and is not recorded yet.
//	task_ended     (AtCommit) delegation/tasks.go, Service.EndTaskTx: at
//	               the commit of a transaction that ended a background task
//	               (its result queued in its request's inbox), before that
//	               request's agent can be woken. One hit per commit.
//	request_ended  (AtCommit) agents/scheduler.go, Scheduler.end: at the
//	               commit of the transaction that ends a request after its
//	               turn (final answer, failure or stop). For a delegated
//	               request, that transaction also closed the rendezvous and
//	               queued the answer in the asker's inbox: a hit there is
//	               "B answered, A not yet woken".
//	runner_frame_received  (Hit) runners/runtime.go, turnRun.apply: a
//	               runner's report (an event frame) the leader has received
//	               and not applied yet. One hit per new report.
//	runner_frame_applied   (AtCommit) agents/mark.go, sink.markTx: at the
//	               commit of the transaction that applied a runner's report
//	               (its mark stored with it), before the bridge
//	               acknowledges it to the runner.
//	migrate_batch  (AtCommit) store/migrate, Batch: at the commit of each
//	               batch of a migration step, before the next.
//	migrate_done   (AtCommit) store/migrate, finish: at the commit of the
//	               transaction that moves the store's format and audits
//	               the step, before the bridge goes on.
package failpoint

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
)

// EnvVar is the environment variable that arms failpoints.
const EnvVar = "ROOMBRIDGE_FAILPOINTS"

// The failpoints (see the package doc for where each is).
const (
	TurnStarted  = "turn_started"
	TurnEnding   = "turn_ending"
	TaskEnded    = "task_ended"
	RequestEnded = "request_ended"
	// FrameReceived and FrameApplied are a runner's report received by the
	// leader, and applied (committed), both not yet acknowledged.
	FrameReceived = "runner_frame_received"
	FrameApplied  = "runner_frame_applied"
	// MigrateBatch and MigrateDone are a migration step's batch, and its
	// end, committed.
	MigrateBatch = "migrate_batch"
	MigrateDone  = "migrate_done"
)

// point is an armed failpoint: it fires at hit number at.
type point struct {
	at   int64
	hits atomic.Int64
}

// armed is nil unless EnvVar is set: then Hit is a nil map check.
var armed map[string]*point

func init() {
	spec, ok := os.LookupEnv(EnvVar)
	if !ok || spec == "" {
		return
	}
	var err error
	if armed, err = parse(spec); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
}

// parse reads a failpoint list: "name,other@3".
func parse(spec string) (map[string]*point, error) {
	out := map[string]*point{}
	for entry := range strings.SplitSeq(spec, ",") {
		entry = strings.TrimSpace(entry)
		name, n, hasN := strings.Cut(entry, "@")
		at := int64(1)
		if hasN {
			var err error
			if at, err = strconv.ParseInt(n, 10, 64); err != nil || at < 1 {
				return nil, fmt.Errorf("failpoint: %s: bad entry %q: want name or name@N with N a whole number from 1", EnvVar, entry)
			}
		}
		if name == "" {
			return nil, fmt.Errorf("failpoint: %s: bad entry %q: no name", EnvVar, entry)
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("failpoint: %s: %q is listed twice", EnvVar, name)
		}
		out[name] = &point{at: at}
	}
	return out, nil
}

// topicPrefix prefixes the notification topics of AtCommit.
const topicPrefix = "failpoint:"

// AtCommit arms failpoint name for the commit of transaction tx (a
// store.Tx): if name is armed, tx notifies a topic of it, and the store
// hits it once tx has committed, before it signals any subscriber (see
// Committed). It does nothing when name is not armed.
func AtCommit(tx interface{ Notify(topic string) }, name string) {
	if armed == nil || armed[name] == nil {
		return
	}
	tx.Notify(topicPrefix + name)
}

// Committed hits the failpoints that a committed transaction's topics name
// (see AtCommit). Store backends call it, through store.Notifier.Publish,
// after each commit and before they signal its subscribers.
func Committed(topics []string) {
	if armed == nil {
		return
	}
	for _, t := range topics {
		if name, ok := strings.CutPrefix(t, topicPrefix); ok {
			Hit(name)
		}
	}
}

// Hit marks failpoint name: if it is armed and this is the hit it waits
// for, the process kills itself with SIGKILL (no deferred function runs, no
// buffer is flushed: as if the machine lost power, apart from the disk).
func Hit(name string) {
	if armed == nil {
		return
	}
	p := armed[name]
	if p == nil || p.hits.Add(1) != p.at {
		return
	}
	fmt.Fprintf(os.Stderr, "failpoint %s@%d: killing the process\n", name, p.at)
	kill()
}

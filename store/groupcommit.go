package store

import (
	"context"
	"fmt"
	"runtime"
	"sync"
)

// Call is one queued Update of a GroupCommit.
type Call struct {
	Ctx context.Context
	Fn  func(Tx) error
	// Topics collects what Fn notified, for the backend to publish once the
	// call committed.
	Topics Topics
	err    chan error
}

// Done answers the caller of the Update.
func (c *Call) Done(err error) { c.err <- err }

// Run runs the call's Fn on tx, turning a panic into an error for this call
// alone.
func (c *Call) Run(tx Tx) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("store: transaction panicked: %v", r)
		}
	}()
	return c.Fn(tx)
}

// GroupCommit queues concurrent Update calls and hands them, in batches, to
// one committing goroutine: while a commit is being made durable, the calls
// that arrive queue up and then share the next commit. A sequential caller
// never waits for a batch to fill. Backends (bolt, etcd) supply the commit.
type GroupCommit struct {
	calls  chan *Call
	done   chan struct{}
	wg     sync.WaitGroup
	max    int
	commit func([]*Call)

	mu     sync.RWMutex // held for reading while a call is queued
	closed bool
}

// NewGroupCommit starts the committer. commit must answer every call of its
// batch with Done.
func NewGroupCommit(maxBatch int, commit func([]*Call)) *GroupCommit {
	g := &GroupCommit{calls: make(chan *Call, maxBatch), done: make(chan struct{}), max: maxBatch, commit: commit}
	g.wg.Add(1)
	go g.loop()
	return g
}

// Update queues fn and waits for its outcome. Once queued, a call is always
// answered (committed, refused or ErrClosed), even if ctx ends meanwhile, so
// the caller never mistakes a commit for a failure.
func (g *GroupCommit) Update(ctx context.Context, fn func(Tx) error) error {
	c := &Call{Ctx: ctx, Fn: fn, err: make(chan error, 1)}
	g.mu.RLock()
	if g.closed {
		g.mu.RUnlock()
		return ErrClosed
	}
	select {
	case g.calls <- c:
		g.mu.RUnlock()
	case <-ctx.Done():
		g.mu.RUnlock()
		return ctx.Err()
	}
	return <-c.err
}

// Closed reports whether Close was called.
func (g *GroupCommit) Closed() bool {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return g.closed
}

// Close stops the committer after the batch in progress; calls still queued
// get ErrClosed. It reports false if it was closed already.
func (g *GroupCommit) Close() bool {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return false
	}
	g.closed = true
	close(g.done)
	g.mu.Unlock()
	g.wg.Wait()
	return true
}

func (g *GroupCommit) loop() {
	defer g.wg.Done()
	for {
		var batch []*Call
		select {
		case c := <-g.calls:
			batch = append(batch, c)
		case <-g.done:
			for {
				select {
				case c := <-g.calls:
					c.Done(ErrClosed)
				default:
					return
				}
			}
		}
		// Let the callers the last commit answered, runnable now, queue
		// their next calls before the batch is taken (on a busy machine
		// they would otherwise miss it and wait a whole commit): a yield,
		// not a wait, so a lone caller is not delayed.
		runtime.Gosched()
	fill:
		for len(batch) < g.max {
			select {
			case c := <-g.calls:
				batch = append(batch, c)
			default:
				break fill
			}
		}
		g.commit(batch)
	}
}

// Stopping is closed when Close is called.
func (g *GroupCommit) Stopping() <-chan struct{} { return g.done }

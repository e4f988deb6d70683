// Package lanes runs queued jobs on a fixed number of workers, concurrently
// except where order matters: jobs added under the same key run one after
// the other, in the order they were added (a lane); jobs of different keys,
// and jobs without a key, run at the same time. The connectors use it to
// hand inbound events to the core in order per thread (or per card) while
// events that need no mutual order share the store's group commit instead of
// waiting for each other's fsync.
package lanes

import "sync"

// Lanes is a bounded queue of jobs of type J, in lanes by key. The zero value
// is not usable; call New.
type Lanes[J any] struct {
	mu     sync.Mutex
	limit  int
	queued int                 // jobs added and not yet finished
	keyed  map[string]*lane[J] // lanes with a job waiting or running, by key
	// ready holds the lanes whose first job waits for a worker; a lane is
	// in it at most once and never while its job runs, so it holds at most
	// limit lanes and a send under mu never blocks.
	ready chan *lane[J]
}

type lane[J any] struct {
	key  string
	jobs []J // jobs[0] waits in ready or runs
}

// New returns lanes that hold at most limit jobs (at least 1) queued or
// running.
func New[J any](limit int) *Lanes[J] {
	limit = max(limit, 1)
	return &Lanes[J]{limit: limit, keyed: map[string]*lane[J]{}, ready: make(chan *lane[J], limit)}
}

// Add queues j behind the jobs of key; key "" orders j with no other job.
// It never blocks, and reports false (queuing nothing) when the lanes hold
// their limit of jobs.
func (l *Lanes[J]) Add(key string, j J) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.queued >= l.limit {
		return false
	}
	l.queued++
	if ln, ok := l.keyed[key]; ok && key != "" {
		ln.jobs = append(ln.jobs, j)
		return true
	}
	ln := &lane[J]{key: key, jobs: []J{j}}
	if key != "" {
		l.keyed[key] = ln
	}
	l.ready <- ln
	return true
}

// Run runs the queued jobs by do on workers goroutines until quit is closed,
// then runs what is still queued (jobs added meanwhile included) and returns
// once the workers have finished. A lane's jobs run one at a time, in order;
// a lane with more jobs goes to the back of the ready lanes after each, so a
// long lane does not hold a worker from the others. do should not panic: a
// panic leaves its lane's later jobs queued.
func (l *Lanes[J]) Run(workers int, quit <-chan struct{}, do func(J)) {
	var wg sync.WaitGroup
	for range max(workers, 1) {
		wg.Go(func() { l.work(quit, do) })
	}
	wg.Wait()
}

func (l *Lanes[J]) work(quit <-chan struct{}, do func(J)) {
	for {
		var ln *lane[J]
		select {
		case ln = <-l.ready:
		case <-quit:
			select {
			case ln = <-l.ready:
			default:
				// Empty: a lane requeued later is requeued by the
				// worker that ran it, which then takes it here.
				return
			}
		}
		l.mu.Lock()
		j := ln.jobs[0]
		l.mu.Unlock()
		do(j)
		l.finish(ln)
	}
}

// finish retires ln's first job and puts ln back in ready if it has more.
func (l *Lanes[J]) finish(ln *lane[J]) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var zero J
	ln.jobs[0] = zero
	ln.jobs = ln.jobs[1:]
	l.queued--
	switch {
	case len(ln.jobs) > 0:
		l.ready <- ln
	case ln.key != "":
		delete(l.keyed, ln.key)
	}
}

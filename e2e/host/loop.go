package host

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// A loop is one worker thread's event loop, the counterpart of an Envoy
// worker's Event::Dispatcher: a single goroutine that runs, one at a time
// and to completion, every task posted to it. All guest code of the
// worker's VMs (stream callbacks, ticks, http-call replies, queue
// notifications, start-up and shutdown) runs as such tasks, so a VM is only
// ever touched by its loop's goroutine and needs no lock.
//
// A Runtime owns the loops; worker i of every plugin runs on loop i, as
// every filter of an Envoy worker runs on that worker's dispatcher.
type loop struct {
	id int

	// mu guards only the queue; it is never held while a task runs, so
	// posting never waits for guest code.
	mu      sync.Mutex
	queue   []task
	stopped bool
	wake    chan struct{} // capacity 1: "the queue may be non-empty"
	exited  chan struct{}

	// batch[pos:] is what the loop took off the queue and has yet to run.
	// Only the loop's goroutine touches them; they are fields so that a
	// task waiting on the loop (a stream served there and parked, see
	// waitResume) runs the next tasks in the same order the loop would.
	batch []task
	pos   int
}

// A task is work for a loop. It is an interface rather than a func so
// a stream can post itself without allocating a closure per turn.
type task interface{ run() }

type taskFunc func()

func (f taskFunc) run() { f() }

// errLoopStopped means the runtime is closed: its loops run nothing more.
var errLoopStopped = errors.New("runtime is closed")

func newLoop(id int) *loop {
	l := &loop{id: id, wake: make(chan struct{}, 1), exited: make(chan struct{})}
	go l.run()
	return l
}

// post queues t and returns at once; t runs on the loop after every task
// posted before it. It reports false (and drops t) once the loop stopped.
// Loops post to each other and to themselves, so post must never block.
func (l *loop) post(t task) bool {
	l.mu.Lock()
	if l.stopped {
		l.mu.Unlock()
		return false
	}
	l.queue = append(l.queue, t)
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
	return true
}

// do runs f on the loop and waits for it. It must not be called from a
// task (the loop would wait for itself).
func (l *loop) do(f func()) error {
	done := make(chan struct{})
	if !l.post(taskFunc(func() { f(); close(done) })) {
		return errLoopStopped
	}
	<-done
	return nil
}

func (l *loop) run() {
	defer close(l.exited)
	for {
		t := l.next(true)
		if t == nil {
			return
		}
		t.run()
	}
}

// next takes the loop's next task. With wait, it waits for one and
// returns nil only once the loop is stopped and drained; without, it
// returns nil when nothing is queued. Loop goroutine only.
func (l *loop) next(wait bool) task {
	for {
		if l.pos < len(l.batch) {
			t := l.batch[l.pos]
			l.batch[l.pos] = nil
			l.pos++
			return t
		}
		l.mu.Lock()
		if len(l.queue) == 0 {
			stopped := l.stopped
			l.mu.Unlock()
			if !wait || stopped {
				return nil
			}
			<-l.wake
			continue
		}
		// Take the whole queue: posters then append to a fresh slice while
		// the batch runs, and the lock is taken once per batch.
		l.batch, l.queue, l.pos = l.queue, l.batch[:0], 0
		l.mu.Unlock()
	}
}

// runNext runs the loop's next queued task, if there is one, and reports
// whether it did. Only a task of this loop may call it: it is how a task
// that waits for other tasks (a parked stream served on the loop) lets
// the loop go on meanwhile.
func (l *loop) runNext() bool {
	t := l.next(false)
	if t == nil {
		return false
	}
	t.run()
	return true
}

// stop runs what is already queued, then ends the loop.
func (l *loop) stop() {
	l.mu.Lock()
	l.stopped = true
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
	<-l.exited
}

// loops returns the first n worker loops, starting any that do not run yet.
func (r *Runtime) loops(n int) ([]*loop, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, errLoopStopped
	}
	for len(r.workerLoops) < n {
		r.workerLoops = append(r.workerLoops, newLoop(len(r.workerLoops)))
	}
	return r.workerLoops[:n:n], nil
}

// onLoopKey marks a context given to a function running on a loop.
type onLoopKey struct{}

// OnWorker runs f on worker's loop as one task and waits for it, as the
// code of an Envoy worker thread runs on that thread. The ctx f gets says
// so: Serve called with it (or a context derived from it) for a request
// on that worker drives the stream right there, on the loop's goroutine,
// with no goroutine handoff between its callbacks; the same turns run in
// the same order as when Serve is called off the loop, but the upstream
// (Upstream) is called on the loop too, so it must answer without waiting
// for this worker. While a stream served so is parked, the loop runs its
// other tasks (ticks, http-call replies, other streams) until the plugin
// resumes it; otherwise nothing else runs on the worker until f returns.
//
// Benchmarks use it to measure a stream's callbacks as Envoy runs them,
// without the cost of crossing goroutines that Serve pays off the loop.
// f must not wait for this worker by any other way (Plugin.Tick, OnWorker
// on the same worker), nor serve a request of another worker with ctx.
func (r *Runtime) OnWorker(ctx context.Context, worker int, f func(ctx context.Context)) error {
	if worker < 0 {
		return fmt.Errorf("worker %d out of range", worker)
	}
	ls, err := r.loops(worker + 1)
	if err != nil {
		return err
	}
	l := ls[worker]
	return l.do(func() { f(context.WithValue(ctx, onLoopKey{}, l)) })
}

// loopOf is the loop ctx says its holder runs on, or nil.
func loopOf(ctx context.Context) *loop {
	l, _ := ctx.Value(onLoopKey{}).(*loop)
	return l
}

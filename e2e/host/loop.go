package host

import (
	"errors"
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
	var batch []task
	for {
		l.mu.Lock()
		for len(l.queue) == 0 {
			if l.stopped {
				l.mu.Unlock()
				return
			}
			l.mu.Unlock()
			<-l.wake
			l.mu.Lock()
		}
		// Take the whole queue: posters then append to a fresh slice while
		// the batch runs, and the lock is taken once per batch.
		batch, l.queue = l.queue, batch[:0]
		l.mu.Unlock()
		for i, t := range batch {
			batch[i] = nil
			t.run()
		}
	}
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

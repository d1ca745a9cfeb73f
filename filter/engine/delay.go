package engine

import (
	"time"

	"github.com/sluice-proxy/sluice/filter/config"
	"github.com/sluice-proxy/sluice/limiter"
)

// delay is a shaped request's state (on_limit delay): it waits until
// until, and never past deadline.
type delay struct {
	active   bool
	until    time.Time
	deadline time.Time
}

// shape decides whether a request started at start and denied by l with
// res at now waits for the limit rather than being answered: true when it
// does, until d.until.
func (d *delay) shape(l *limitRuntime, res limiter.Result, start, now time.Time) bool {
	if l.cfg.OnLimit.Action != config.ActionDelay || res.RetryAfter <= 0 {
		return false
	}
	if !d.active {
		d.deadline = start.Add(l.cfg.OnLimit.MaxDelay)
	}
	wakeAt := now.Add(res.RetryAfter)
	if wakeAt.After(d.deadline) {
		return false
	}
	if !d.active {
		d.active = true
		l.metrics.delayed.Increment(1)
	}
	d.until = wakeAt
	return true
}

package distributed

import (
	"fmt"
	"math"
	"time"

	"github.com/sluice-proxy/sluice/filter/backend"
	"github.com/sluice-proxy/sluice/filter/config"
	"github.com/sluice-proxy/sluice/limiter"
	"github.com/sluice-proxy/sluice/limiter/store"
)

// Key is one key of a global or hybrid limit, as a decision, a lease or
// a charge needs it.
type Key struct {
	// RKey is the bucket's key in Redis.
	RKey string
	// FP tells the key's record from another key's in a shared slot.
	FP uint64
	// Slot is the shared-data key of its negative cache and lease.
	Slot string
	Lim  limiter.Limit
}

// Denied records a global denial of k at now in the negative cache, until
// its retry time.
func (b *Backend) Denied(k *Key, res limiter.Result, now time.Time) {
	if !res.Allowed && res.RetryAfter > 0 {
		b.SetDenied(k, now.UnixNano()+int64(res.RetryAfter))
	}
}

// CachedDenial is the decision a negative cache entry until (ns) stands
// for at ns. A fixed window is denied until its window ends, when the key
// is back to its full allowance, so that is its reset time too, and a
// calendar's period is the one ns is in, as Redis's reply said.
func (k *Key) CachedDenial(ns, until int64) limiter.Result {
	res := limiter.Result{Limit: k.Lim.Rate, RetryAfter: time.Duration(until - ns), Reason: limiter.ReasonLimited}
	if k.Lim.Algorithm == limiter.FixedWindow {
		res.ResetAfter = res.RetryAfter
		res.Period, _ = k.Lim.WindowAt(ns)
	}
	return res
}

// Slots bounds the shared-data keys of one remote limit; keys that
// collide share a slot and the later one evicts the earlier one's lease,
// which can only under-admit.
const Slots = 4096

// Limit is the shared-data side of one global or hybrid limit.
type Limit struct {
	name  string
	slots *store.SlotNames
}

// NewLimit is the remote state of the limit called name. Its slots are
// "sluice.dl.<name>.<i>".
func NewLimit(name string) *Limit {
	return &Limit{name: name, slots: store.NewSlotNames("sluice.dl."+name+".", Slots)}
}

// Key is the remote key of key under lim. The Redis key comes from
// backend.Key, the one place every global, hybrid, charge and shadow call
// gets its key from.
func (l *Limit) Key(key string, lim limiter.Limit) Key {
	rkey := backend.Key(l.name, lim.Algorithm, key)
	fp := limiter.Hash(0, rkey)
	return Key{RKey: rkey, FP: fp, Slot: l.slots.Name(fp % Slots), Lim: lim}
}

// CheckRate says whether the Redis scripts of mode can decide lim.
func CheckRate(mode config.Mode, lim limiter.Limit) error {
	var err error
	if mode == config.ModeHybrid {
		_, err = backend.Lease(lim, "k", 1, leaseAhead)
	} else {
		_, err = backend.Decide(lim, "k", 1)
	}
	if err != nil {
		return fmt.Errorf("mode %s: %v", mode, err)
	}
	return nil
}

// Decide sends the global decision of cost units of k. done runs once,
// with the decision or the error that ended the call, unless the call is
// cancelled. A request still waiting for it puts a denial into the
// negative cache (Denied); a late reply, to a request decided without it,
// does not. The error is only for a command that cannot be built.
func (b *Backend) Decide(k *Key, cost int64, now time.Time, done func(at time.Time, res limiter.Result, err error)) (*Call, error) {
	cmd, err := backend.Decide(k.Lim, k.RKey, cost)
	if err != nil {
		return nil, err
	}
	lim := k.Lim
	c := b.NewCall(cmd, now, nil)
	// Set after NewCall so that the closure holds c by value: one
	// allocation fewer per decision than capturing a variable set later.
	c.onDone = func(at time.Time, r backend.Reply, err error) {
		if err != nil {
			done(at, limiter.Result{}, err)
			return
		}
		res := r.Result(lim.Rate)
		res.Period = windowOf(lim, r)
		if lim.Algorithm == limiter.FixedWindow {
			// A window ends at an instant of Redis's clock, which Redis
			// read between the call's sending and at: measured from the
			// sending, less the millisecond the reply rounds up, its end
			// is never later than the true one, so the negative cache
			// and the headers end with the window, not up to a call's
			// latency after it.
			lag := at.Sub(c.sentAt) + time.Millisecond
			res.RetryAfter = max(res.RetryAfter-lag, 0)
			res.ResetAfter = max(res.ResetAfter-lag, 0)
		}
		done(at, res, nil)
	}
	b.Send(c, now)
	return c, nil
}

// windowOf is the window a reply of lim was decided in, for the headers:
// Period, or a calendar's period at the Redis clock the script used, so a
// February reports its 28 or 29 days as the local mode does. A reply's
// clock is whatever Redis sent; saturated, it still names some period.
func windowOf(lim limiter.Limit, r backend.Reply) time.Duration {
	if lim.Calendar == limiter.NoCalendar {
		return lim.Period
	}
	length, _ := lim.WindowAt(min(r.ServerMicros, math.MaxInt64/1000) * 1000)
	return length
}

// Shadow decides cost units of a shadow limit's key in the background,
// from the tick: counted runs with the verdict of a reply, never after a
// failure.
func (b *Backend) Shadow(lim limiter.Limit, rkey string, cost int64, now time.Time, counted func(allowed bool)) {
	cmd, err := backend.Decide(lim, rkey, cost)
	if err != nil {
		return
	}
	b.Enqueue(b.NewCall(cmd, now, func(_ time.Time, r backend.Reply, err error) {
		if err == nil {
			counted(r.Allowed())
		}
	}))
}

// Charge takes n more units of k in the background, from the tick. A key
// the charge leaves without a unit goes into the negative cache until one
// is back when negative is set, so neither mode asks Redis meanwhile
// (hybrid still serves tokens this Envoy already leased). failed runs when
// Redis cannot take the charge. The error is only for a command that
// cannot be built.
func (b *Backend) Charge(k Key, n int64, negative bool, now time.Time, failed func(at time.Time)) error {
	cmd, err := backend.Charge(k.Lim, k.RKey, n)
	if err != nil {
		return err
	}
	b.Enqueue(b.NewCall(cmd, now, func(at time.Time, r backend.Reply, err error) {
		if err != nil {
			failed(at)
			return
		}
		if wait := backend.ChargeRetryAfter(k.Lim, r); wait > 0 && negative {
			b.SetDenied(&k, at.UnixNano()+int64(wait))
		}
	}))
	return nil
}

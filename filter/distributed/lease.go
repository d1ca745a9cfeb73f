package distributed

// Hybrid mode: a worker takes a lease of several tokens from the global
// bucket in one atomic script call and keeps it in shared data, where every
// worker of this Envoy serves requests from it with CAS.
//
//   - One lease call per key is in flight per Envoy: the slot records when
//     a call started, and a worker only starts one after claiming that
//     field with CAS. A claim older than the call budget is stale (its
//     reply was lost) and can be taken over.
//   - Lease calls are sent from the tick, in the root context: the SDK
//     drops the reply of a call made from a stream that has ended, and a
//     lease reply must never be dropped (Redis has already granted it).
//   - A lease may reserve up to leaseAhead of refill beyond the empty
//     bucket (limiter.Limit.Lease). Its tokens become spendable one refill
//     interval apart, the last at the time Redis reports, and none is
//     spent earlier: leases never admit more than the bucket itself.
//   - Below its limit (the whole lease granted and spendable at once) a
//     key's lease is the demand seen since the previous call (admitted or
//     not) scaled to leaseHorizon, between the request cost and the
//     capacity, renewed in the background when half of it is left: about
//     one call per leaseHorizon per Envoy, and requests rarely wait.
//   - Over its limit (less granted than asked, or some of it reserved) the
//     refill is shared by every Envoy asking for it. Each Envoy then calls
//     when one batch will have accrued to it (saturatedInterval), judging
//     its share by what its last call got for the time since its previous
//     one: all Envoys together make about rate/batch calls per second,
//     whatever their number or the offered load. The batch is as large as
//     the lag it causes allows (saturatedBatch): tokens become spendable at
//     the key's whole rate but an Envoy spends them at its own demand, and
//     what it holds spendable but unspent is admitted later than a single
//     bucket would. Meanwhile requests without a spendable token are
//     rejected locally (negative cache). No Envoy waits longer than
//     capacity/rate + leaseAhead between calls, so refill accruing in
//     Redis is never capped by the bucket while an Envoy has traffic.
//   - Leased tokens expire leaseTTL after the last of them became
//     spendable and are not returned. An Envoy holds at most one and a
//     half leases of a key (renewal starts below half of one), so when its
//     traffic for the key stops it loses at most that: 1.5 × the lease
//     size, itself at most the capacity.
//   - Over-admission: every admitted request spends a token Redis granted,
//     no earlier than a decision of the bucket would have allowed it, so
//     over any period starting at the bucket's creation the Envoys
//     together admit at most capacity + rate × elapsed. Over an arbitrary
//     window [a, b] the tokens that became spendable before a and are
//     spent after it add at most what each Envoy held at a.
//   - A request waiting for a lease call, its own or one another worker
//     started, gives up within its own budget (CallBudget): the failure
//     policy then applies.

import (
	"encoding/binary"
	"errors"
	"math/bits"
	"time"

	"github.com/sluice-proxy/sluice/filter/backend"
	"github.com/sluice-proxy/sluice/limiter"
	"github.com/sluice-proxy/sluice/limiter/store"
)

const (
	leaseHorizon = 500 * time.Millisecond
	// leaseInterval is the shortest wait between lease calls of an
	// overloaded key.
	leaseInterval = 100 * time.Millisecond
	// batchTime bounds one lease call's batch for an overloaded key: at
	// most this much of the key's refill.
	batchTime = 750 * time.Millisecond
	// lagBudget bounds the leased tokens an Envoy holds spendable but not
	// yet spent while the key is over its limit, as this much of its
	// share of the refill (see saturatedInterval).
	lagBudget = 150 * time.Millisecond
	// leaseAhead is how far beyond the empty bucket a lease may reserve.
	leaseAhead = time.Second
	// maxSaturatedInterval bounds an Envoy's wait between calls for an
	// overloaded key, and so how long it takes to notice the key is no
	// longer over its limit.
	maxSaturatedInterval = 2 * time.Second
	leaseTTL             = time.Second
	// failureHold stops new lease calls for a key right after one failed,
	// so an outage costs at most one call per key per Envoy per hold.
	failureHold  = 100 * time.Millisecond
	slotCASTries = 16
)

// slotRecord is the shared-data state of one remote key in this Envoy.
type slotRecord struct {
	fp uint64
	// tokens are the leased tokens not spent yet, including reserved ones
	// that are not spendable yet (see pendingTokens).
	tokens int64
	// ready is when the last of them becomes spendable (ns).
	ready       int64
	expires     int64 // ns; tokens are void after it
	inflight    int64 // ns the current lease call started; 0 when none
	lastCall    int64 // ns the last lease call started
	nextCall    int64 // ns before which no lease call may start
	demand      int64 // units requested since lastCall
	want        int64 // size of the last lease asked for
	deniedUntil int64 // ns; the negative cache
	failedAt    int64 // ns the last lease call failed
	// interval is the wait between calls while the key is over its limit
	// (ns); 0 when the last lease was granted in full and spendable now.
	interval int64
	// batch is the size a call should bring while the key is over its
	// limit; a lease asks for little more, leaving the rest of the refill
	// to the other Envoys.
	batch int64
	// windowEnd is, for a fixed window (a calendar quota), when the window
	// the tokens were leased from ends (ns), no later than Redis's end of
	// it; 0 for a token bucket. The tokens expire by then.
	windowEnd int64
}

const slotRecordFields = 14

const slotRecordLen = 8 * slotRecordFields

func (r *slotRecord) encode() []byte {
	b := make([]byte, slotRecordLen)
	vals := [slotRecordFields]uint64{r.fp, uint64(r.tokens), uint64(r.ready), uint64(r.expires), uint64(r.inflight),
		uint64(r.lastCall), uint64(r.nextCall), uint64(r.demand), uint64(r.want), uint64(r.deniedUntil),
		uint64(r.failedAt), uint64(r.interval), uint64(r.batch), uint64(r.windowEnd)}
	for i, v := range vals {
		binary.LittleEndian.PutUint64(b[i*8:], v)
	}
	return b
}

// decodeSlot reads a record; anything that is not one (another version,
// garbage) reads as absent, which can only cost a lease, never admit more.
func decodeSlot(b []byte) (slotRecord, bool) {
	if len(b) != slotRecordLen {
		return slotRecord{}, false
	}
	var v [slotRecordFields]int64
	for i := range v {
		v[i] = int64(binary.LittleEndian.Uint64(b[i*8:]))
	}
	r := slotRecord{fp: uint64(v[0]), tokens: v[1], ready: v[2], expires: v[3], inflight: v[4], lastCall: v[5],
		nextCall: v[6], demand: v[7], want: v[8], deniedUntil: v[9], failedAt: v[10], interval: v[11], batch: v[12],
		windowEnd: v[13]}
	if r.tokens < 0 || r.demand < 0 || r.want < 0 || r.interval < 0 || r.batch < 0 {
		return slotRecord{}, false
	}
	return r, true
}

// pendingTokens is how many of r.tokens are not spendable at ns: reserved
// tokens become spendable one refill interval (Period/Rate) apart, the
// last at r.ready, so ⌈(ready − ns) × Rate/Period⌉ of them are still
// pending. Rounding up and a ready time measured from the reply's arrival
// make this never smaller than the truth.
func pendingTokens(r *slotRecord, l limiter.Limit, ns int64) int64 {
	if r.ready <= ns || r.tokens == 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(r.ready-ns), uint64(l.Rate))
	if hi >= uint64(l.Period) {
		return r.tokens
	}
	q, rem := bits.Div64(hi, lo, uint64(l.Period))
	if rem != 0 {
		q++
	}
	if q >= uint64(r.tokens) {
		return r.tokens
	}
	return int64(q)
}

// spendableAt is the first instant at which n of r.tokens (n ≤ tokens)
// are spendable: pending ≤ tokens − n once ready − t ≤ (tokens − n) ×
// Period/Rate, taken rounded down.
func spendableAt(r *slotRecord, l limiter.Limit, n int64) int64 {
	hi, lo := bits.Mul64(uint64(r.tokens-n), uint64(l.Period))
	if hi >= uint64(l.Rate) {
		return r.ready
	}
	q, _ := bits.Div64(hi, lo, uint64(l.Rate))
	if q > uint64(r.ready) {
		return 0
	}
	return r.ready - int64(q)
}

// loadSlot returns the key's record: zero with its fingerprint when the
// slot is empty or holds another key.
func (b *Backend) loadSlot(k *Key) slotRecord {
	v, _, _, err := store.Load(b.store, k.Slot)
	if err != nil {
		b.log.Warnf("sluice: remote slot: %v", err)
	}
	return recordOf(k.FP, v)
}

// recordOf is the record of key fp in a slot's value.
func recordOf(fp uint64, v []byte) slotRecord {
	rec, ok := decodeSlot(v)
	if !ok || rec.fp != fp {
		return slotRecord{fp: fp}
	}
	return rec
}

// updateSlot applies f to the record under CAS. f returns false to write
// nothing.
func (b *Backend) updateSlot(k *Key, f func(*slotRecord) bool) bool {
	err := store.Update(b.store, k.Slot, slotCASTries, func(v []byte, readErr error) ([]byte, bool) {
		if readErr != nil {
			b.log.Warnf("sluice: remote slot: %v", readErr)
		}
		rec := recordOf(k.FP, v)
		if !f(&rec) {
			return nil, false
		}
		return rec.encode(), true
	})
	if err != nil && !errors.Is(err, store.ErrContended) {
		b.log.Warnf("sluice: remote slot: %v", err)
	}
	return err == nil
}

// DeniedUntil is when k's negative cache entry ends (ns): until then k is
// known over its limit and is denied without a call.
func (b *Backend) DeniedUntil(k *Key) int64 { return b.loadSlot(k).deniedUntil }

// SetDenied puts k into the negative cache until (ns).
func (b *Backend) SetDenied(k *Key, until int64) {
	b.updateSlot(k, func(r *slotRecord) bool {
		if r.deniedUntil >= until {
			return false
		}
		r.deniedUntil = until
		return true
	})
}

// ReturnTokens gives n leased tokens of k back, taken by a request that
// was then denied by another limit.
func (b *Backend) ReturnTokens(k *Key, n int64) {
	b.updateSlot(k, func(r *slotRecord) bool {
		r.tokens += n
		return true
	})
}

// LeaseOutcome is what TryLease decided for one request.
type LeaseOutcome uint8

const (
	// LeaseTaken: the request spent cost tokens of the lease.
	LeaseTaken LeaseOutcome = iota
	// LeaseWait: a lease call is out; try again when it settles (the
	// backend's onLease) or from the tick.
	LeaseWait
	// LeaseDenied: the key is over its limit (the negative cache).
	LeaseDenied
	// LeaseFailed: the lease call failed, or the request's budget ran out
	// waiting; its failure policy applies.
	LeaseFailed
)

// ErrLeaseFailed is TryLease's error when the lease call failed.
var ErrLeaseFailed = errors.New("lease call failed")

// TryLease serves cost units of k from the lease in shared data, or
// arranges a lease call. waitSince is when the request started waiting
// for k (ns), whoever made the call it waits for; first is true on its
// first try, which counts its demand. res is the decision for LeaseTaken
// and LeaseDenied, err the failure for LeaseFailed.
func (b *Backend) TryLease(k *Key, cost, waitSince int64, first bool, now time.Time) (out LeaseOutcome, res limiter.Result, err error) {
	ns := now.UnixNano()
	var cl leaseClaim
	var expired, left, until, windowEnd int64
	ok := b.updateSlot(k, func(r *slotRecord) bool {
		cl, expired, windowEnd = leaseClaim{}, 0, r.windowEnd
		if first {
			r.demand += cost
		}
		if r.expires <= ns && r.tokens > 0 {
			expired, r.tokens = r.tokens, 0
		}
		if r.inflight != 0 && ns-r.inflight > int64(b.Budget+leaseInterval) {
			r.inflight = 0 // its reply was lost
		}
		canCall := r.inflight == 0 && ns >= r.nextCall && (r.failedAt == 0 || ns-r.failedAt >= int64(failureHold))
		usable := r.tokens - pendingTokens(r, k.Lim, ns)
		switch {
		case usable >= cost:
			r.tokens -= cost
			out, left = LeaseTaken, usable-cost
			if canCall && r.tokens*2 < r.want {
				cl = claimLease(r, k, cost, ns)
			}
		case r.deniedUntil > ns:
			out, until = LeaseDenied, r.deniedUntil
		case r.tokens >= cost:
			// Reserved tokens will cover it: until then the bucket would
			// not admit it either. A new lease could only come later.
			out, until = LeaseDenied, spendableAt(r, k.Lim, cost)
			if canCall && r.tokens*2 < r.want {
				cl = claimLease(r, k, cost, ns)
			}
		case r.failedAt >= waitSince && r.failedAt != 0, r.failedAt != 0 && ns-r.failedAt < int64(failureHold) && r.inflight == 0:
			out = LeaseFailed
		case r.inflight != 0:
			out = LeaseWait
		case ns < r.nextCall:
			out, until = LeaseDenied, r.nextCall
		default:
			out = LeaseWait
			cl = claimLease(r, k, cost, ns)
		}
		return true
	})
	if !ok {
		// Shared data is failing: treat it like the backend failing.
		out, cl, expired = LeaseFailed, leaseClaim{}, 0
	}
	if expired > 0 {
		b.Metrics.leaseExpired.Increment(uint64(expired))
	}
	if cl.want > 0 {
		b.startLease(k, cl, now)
	}
	// The budget runs from when the request started waiting, whoever
	// made the call it waits for; the tick that sees it next may be one
	// TickPeriod later.
	overBudget := ns-waitSince+int64(TickPeriod) > int64(b.Budget)
	if out == LeaseWait && overBudget {
		out = LeaseFailed
	}
	switch out {
	case LeaseTaken:
		res := limiter.Result{Allowed: true, Limit: k.Lim.Rate, Remaining: left}
		if k.Lim.Calendar != limiter.NoCalendar {
			// The headers' period and reset: the window the tokens came
			// from, which ends by windowEnd.
			res.Period, _ = k.Lim.WindowAt(ns)
			res.ResetAfter = time.Duration(max(windowEnd-ns, 0))
		}
		return out, res, nil
	case LeaseDenied:
		b.Metrics.NegativeHits.Increment(1)
		return out, k.CachedDenial(ns, until), nil
	case LeaseFailed:
		if overBudget {
			return out, limiter.Result{}, backend.Timeout()
		}
		return out, limiter.Result{}, ErrLeaseFailed
	}
	return out, limiter.Result{}, nil
}

// maxInterval is the longest wait between lease calls for an overloaded
// key: within maxSaturatedInterval, and short enough that an Envoy left
// alone with the key calls before Redis's bucket is full again and its
// refill starts being capped (capacity/rate + leaseAhead after a call).
func maxInterval(l limiter.Limit) time.Duration {
	refill := float64(l.Capacity())*float64(l.Period)/float64(l.Rate) + float64(leaseAhead)
	return time.Duration(min(max(refill, float64(leaseInterval)), float64(maxSaturatedInterval)))
}

// saturatedBatch is what one lease call should bring an Envoy while the
// key is over its limit, given the demand it saw over elapsed.
//
// Leased tokens become spendable at the key's whole rate r, one batch
// after another, but this Envoy spends them at its own demand λ: when
// λ < r a batch of g leaves up to g × (1 − λ/r) spendable and unspent,
// g² (1 − λ/r) / (2λ) token-seconds per batch, admitted later than a
// single bucket would (tokens still held when traffic stops are lost).
// An Envoy with share s of the refill takes a batch every g/s, so it
// holds s × g (1 − λ/r) / (2λ) on average; keeping that within s ×
// lagBudget gives g ≤ 2 λ lagBudget / (1 − λ/r), whatever the number of
// Envoys (their shares add up to r: together they hold r × lagBudget).
// Bigger batches mean fewer calls, so the batch is that, within one
// batchTime of the key's refill and the capacity.
func saturatedBatch(l limiter.Limit, demand int64, elapsed time.Duration) float64 {
	rate := float64(l.Rate) / float64(l.Period) // tokens per ns
	batch := rate * float64(batchTime)
	if demand > 0 && elapsed > 0 {
		lambda := float64(demand) / float64(elapsed)
		if rho := lambda / rate; rho < 1 {
			batch = min(batch, 2*lambda*float64(lagBudget)/(1-rho))
		}
	}
	return min(max(batch, 1), float64(l.Capacity()))
}

// saturatedInterval is how long an Envoy waits between lease calls while
// the key is over its limit, so that each call brings about batch: its
// last call got granted tokens for the elapsed time since its previous
// one, so at that share of the refill a batch accrues to it every batch ×
// elapsed / granted. N Envoys each wait about N batches' worth of the
// refill: the key costs about rate / batch calls per second in total,
// whatever the number of Envoys or the offered load. One call's grant
// depends on when the other Envoys happened to call, so the interval
// moves at most twofold per call, starting from batchTime.
func saturatedInterval(l limiter.Limit, prev, elapsed time.Duration, granted int64, batch float64) time.Duration {
	if prev <= 0 {
		prev = batchTime
	}
	next := 2 * prev
	if granted > 0 && elapsed > 0 {
		next = time.Duration(batch * float64(elapsed) / float64(granted))
	}
	next = min(max(next, prev/2), 2*prev)
	return min(max(next, leaseInterval), maxInterval(l))
}

// leaseClaim is one lease call this Envoy claimed: its size, the demand
// seen since the previous call and when that one and this one started.
type leaseClaim struct {
	want, demand, prevCall, start int64
}

// claimLease marks a lease call in flight in r.
func claimLease(r *slotRecord, k *Key, cost int64, ns int64) leaseClaim {
	capacity := k.Lim.Capacity()
	want := capacity / 20
	if k.Lim.Algorithm == limiter.FixedWindow {
		// A window's leased units are taken from its count for good, and
		// those an Envoy does not spend are lost until the window ends: a
		// first call takes only what the request needs.
		want = 0
	}
	// Over its limit the key gets no lease before the next call: the
	// lease must cover the demand until then.
	horizon := leaseHorizon + time.Duration(r.interval)
	if r.lastCall != 0 {
		elapsed := ns - r.lastCall
		if elapsed < int64(time.Millisecond) {
			elapsed = int64(time.Millisecond)
		}
		// demand/elapsed scaled to the horizon, rounded up; computed in
		// float64 because demand × horizon can exceed int64 for huge costs.
		want = int64(float64(r.demand)*float64(horizon)/float64(elapsed)) + 1
	}
	if r.interval > 0 && r.batch > 0 {
		// A little over the batch: a call after a long gap leaves the
		// rest of the refill to the next caller.
		want = min(want, r.batch+r.batch/5+1)
	}
	if want < cost {
		want = cost
	}
	if want > capacity {
		want = capacity
	}
	c := leaseClaim{want: want, demand: r.demand, prevCall: r.lastCall, start: ns}
	r.inflight = ns
	r.lastCall = ns
	r.demand = 0
	r.want = want
	return c
}

// startLease queues the lease call for the tick.
func (b *Backend) startLease(k *Key, cl leaseClaim, now time.Time) {
	key := *k // the request may be gone when the reply comes
	cmd, err := backend.Lease(k.Lim, k.RKey, cl.want, leaseAhead)
	if err != nil {
		b.leaseDone(key, cl, now, 0, backend.Reply{}, err)
		return
	}
	c := b.NewCall(cmd, now, nil)
	c.onDone = func(at time.Time, r backend.Reply, err error) {
		b.leaseDone(key, cl, at, c.sentAt.UnixNano(), r, err)
	}
	c.lease = true
	b.Enqueue(c)
}

// leaseDone records a lease reply to the call sent at sent (ns), whose
// reply Redis made after that.
func (b *Backend) leaseDone(k Key, cl leaseClaim, now time.Time, sent int64, r backend.Reply, err error) {
	ns := now.UnixNano()
	var expired int64
	written := b.updateSlot(&k, func(rec *slotRecord) bool {
		expired = 0
		rec.inflight = 0
		if err != nil {
			rec.failedAt = ns
			return true
		}
		if rec.expires <= ns && rec.tokens > 0 {
			expired, rec.tokens = rec.tokens, 0
		}
		if r.Granted > 0 {
			rec.tokens += r.Granted
			// Measured from the reply's arrival, the ready time can only
			// be late. Merged with reserved tokens still pending, the
			// later one stands for both, which is also only late: the
			// older tokens precede the new ones in the bucket.
			rec.ready = max(rec.ready, ns+int64(r.RetryAfter))
			rec.expires = max(rec.ready, ns) + int64(leaseTTL)
			if k.Lim.Algorithm == limiter.FixedWindow {
				// Units of a window spent after it ended would be
				// admitted on top of the next window's limit. Redis
				// decided after the call was sent, so its window ends
				// no earlier than the sending plus the reply's reset
				// time (rounded up to the millisecond, taken off):
				// the lease never outlives the window, whatever this
				// Envoy's clock reads against Redis's.
				rec.windowEnd = sent + int64(r.ResetAfter-time.Millisecond)
				rec.expires = min(rec.expires, rec.windowEnd)
			}
		}
		if k.Lim.Algorithm == limiter.FixedWindow && r.Remaining == 0 {
			// The window is used up: nothing can be leased before it
			// ends, so no call is made and requests beyond the tokens
			// held are denied until then (measured as windowEnd is).
			end := sent + int64(r.ResetAfter-time.Millisecond)
			rec.nextCall = max(rec.nextCall, end)
			rec.deniedUntil = max(rec.deniedUntil, end)
			return true
		}
		if r.Granted >= cl.want && r.RetryAfter == 0 {
			rec.interval, rec.batch, rec.nextCall = 0, 0, 0
			return true
		}
		// Less than asked, or some of it only reserved: the bucket is
		// empty, the key over its limit.
		var elapsed time.Duration
		if cl.prevCall != 0 {
			elapsed = time.Duration(cl.start - cl.prevCall)
		}
		batch := saturatedBatch(k.Lim, cl.demand, elapsed)
		iv := saturatedInterval(k.Lim, time.Duration(rec.interval), elapsed, r.Granted, batch)
		rec.interval, rec.batch = int64(iv), int64(batch)
		rec.nextCall = max(cl.start+int64(iv), ns)
		if r.Granted == 0 {
			retryAt := ns + int64(r.RetryAfter)
			if k.Lim.Algorithm == limiter.FixedWindow {
				// The window's end, measured as windowEnd is: the
				// denial ends with the window.
				retryAt = sent + int64(r.RetryAfter-time.Millisecond)
			}
			rec.nextCall = max(rec.nextCall, retryAt)
			rec.deniedUntil = rec.nextCall
		}
		return true
	})
	if written && expired > 0 {
		b.Metrics.leaseExpired.Increment(uint64(expired))
	}
	if !written && err == nil && r.Granted > 0 {
		// Shared data refused the grant: those tokens are lost, which can
		// only under-admit.
		b.Metrics.leaseExpired.Increment(uint64(r.Granted))
	}
	if b.onLease != nil {
		b.onLease(now)
	}
}

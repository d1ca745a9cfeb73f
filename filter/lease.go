package filter

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
//   - Renewal starts when the lease falls below half of its last size, so
//     steady traffic rarely waits.
//   - Size: the demand seen since the previous call, scaled to leaseHorizon,
//     between the request cost and the bucket capacity. At steady state a
//     key therefore costs about one call per leaseHorizon/2 per Envoy.
//   - When Redis grants less than asked, the bucket is empty: the next call
//     waits exhaustedInterval (capacity / (2 × rate), between 100ms and
//     300ms), and requests finding no tokens meanwhile are rejected locally
//     (negative cache). Tokens refilling in Redis meanwhile stay there for
//     the next lease: the wait lets at most half the capacity refill, so
//     nothing is lost to the bucket's cap. Overloaded keys thus cost one
//     call per wait per Envoy, however high the offered load.
//   - Leased tokens expire leaseTTL after the grant and are not returned:
//     each expiry can under-admit by what was left of one lease, at most
//     the lease size (≤ capacity, normally ≈ rate × leaseHorizon / Envoys).
//   - Over-admission: every admitted request spends a token Redis granted,
//     and Redis grants what one bucket admits, so over any period starting
//     at the bucket's creation the Envoys together admit at most capacity +
//     rate × elapsed. Over an arbitrary window [a, b] the tokens leased
//     before a and used after it add at most one lease per Envoy.

import (
	"encoding/binary"
	"errors"
	"time"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"

	"github.com/sluice-proxy/sluice/filter/backend"
	"github.com/sluice-proxy/sluice/limiter"
	"github.com/sluice-proxy/sluice/limiter/store"
)

const (
	leaseHorizon  = 250 * time.Millisecond
	leaseInterval = 100 * time.Millisecond
	maxInterval   = 300 * time.Millisecond
	leaseTTL      = time.Second
	// failureHold stops new lease calls for a key right after one failed,
	// so an outage costs at most one call per key per Envoy per hold.
	failureHold  = 100 * time.Millisecond
	slotCASTries = 16
)

// slotRecord is the shared-data state of one remote key in this Envoy.
type slotRecord struct {
	fp          uint64
	tokens      int64
	expires     int64 // ns; tokens are void after it
	inflight    int64 // ns the current lease call started; 0 when none
	lastCall    int64 // ns the last lease call started
	nextCall    int64 // ns before which no lease call may start
	demand      int64 // units requested since lastCall
	want        int64 // size of the last lease asked for
	deniedUntil int64 // ns; the negative cache
	failedAt    int64 // ns the last lease call failed
}

const slotRecordLen = 8 * 10

func (r *slotRecord) encode() []byte {
	b := make([]byte, slotRecordLen)
	vals := [...]uint64{r.fp, uint64(r.tokens), uint64(r.expires), uint64(r.inflight), uint64(r.lastCall),
		uint64(r.nextCall), uint64(r.demand), uint64(r.want), uint64(r.deniedUntil), uint64(r.failedAt)}
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
	var v [10]int64
	for i := range v {
		v[i] = int64(binary.LittleEndian.Uint64(b[i*8:]))
	}
	r := slotRecord{fp: uint64(v[0]), tokens: v[1], expires: v[2], inflight: v[3], lastCall: v[4],
		nextCall: v[5], demand: v[6], want: v[7], deniedUntil: v[8], failedAt: v[9]}
	if r.tokens < 0 || r.demand < 0 || r.want < 0 {
		return slotRecord{}, false
	}
	return r, true
}

// loadSlot returns the key's record (zero with its fingerprint when the
// slot is empty or holds another key) and the CAS to write it back.
func (b *backendRuntime) loadSlot(rr *remoteReq) (slotRecord, uint32) {
	v, cas, err := b.store.Get(rr.slot)
	if err != nil {
		if !errors.Is(err, store.ErrNotFound) {
			proxywasm.LogWarnf("sluice: remote slot: %v", err)
		}
		return slotRecord{fp: rr.fp}, createSlotCAS
	}
	rec, ok := decodeSlot(v)
	if !ok || rec.fp != rr.fp {
		return slotRecord{fp: rr.fp}, cas
	}
	return rec, cas
}

// createSlotCAS: see breaker's createCAS; a value the host has not handed
// out turns a creation race into a CAS mismatch.
const createSlotCAS = 1<<32 - 1

// updateSlot applies f to the record under CAS. f returns false to write
// nothing.
func (b *backendRuntime) updateSlot(rr *remoteReq, f func(*slotRecord) bool) bool {
	for range slotCASTries {
		rec, cas := b.loadSlot(rr)
		if !f(&rec) {
			return true
		}
		err := b.store.Set(rr.slot, rec.encode(), cas)
		if err == nil {
			return true
		}
		if !errors.Is(err, store.ErrCASMismatch) {
			proxywasm.LogWarnf("sluice: remote slot: %v", err)
			return false
		}
	}
	return false
}

func (b *backendRuntime) setDenied(rr *remoteReq, until int64) {
	b.updateSlot(rr, func(r *slotRecord) bool {
		if r.deniedUntil >= until {
			return false
		}
		r.deniedUntil = until
		return true
	})
}

func (b *backendRuntime) returnTokens(rr *remoteReq, n int64) {
	b.updateSlot(rr, func(r *slotRecord) bool {
		r.tokens += n
		return true
	})
}

type leaseOutcome uint8

const (
	leaseTaken leaseOutcome = iota
	leaseWait
	leaseDenied
	leaseFailed
)

// tryLease serves remote limit i from the lease, or arranges for one.
func (h *httpContext) tryLease(i int, now time.Time, first bool) {
	p := h.plugin
	b := p.backend
	rr := &h.remote[i]
	ns := now.UnixNano()
	if first {
		rr.waitSince = ns
	}
	var out leaseOutcome
	var rec slotRecord
	var sendWant, expired int64
	ok := b.updateSlot(rr, func(r *slotRecord) bool {
		sendWant, expired = 0, 0
		if first {
			r.demand += rr.cost
		}
		if r.expires <= ns {
			expired, r.tokens = r.tokens, 0
		}
		if r.inflight != 0 && ns-r.inflight > int64(b.budget+leaseInterval) {
			r.inflight = 0 // its reply was lost
		}
		switch {
		case r.tokens >= rr.cost:
			r.tokens -= rr.cost
			out = leaseTaken
			if r.inflight == 0 && r.tokens*2 < r.want && ns >= r.nextCall && ns-r.failedAt >= int64(failureHold) {
				sendWant = b.claimLease(r, rr, ns)
			}
		case r.deniedUntil > ns:
			out = leaseDenied
		case r.failedAt >= rr.waitSince && r.failedAt != 0, r.failedAt != 0 && ns-r.failedAt < int64(failureHold) && r.inflight == 0:
			out = leaseFailed
		case r.inflight != 0:
			out = leaseWait
		case ns < r.nextCall:
			out = leaseDenied
			r.deniedUntil = r.nextCall
		default:
			out = leaseWait
			sendWant = b.claimLease(r, rr, ns)
		}
		rec = *r
		return true
	})
	if !ok {
		// Shared data is failing: treat it like the backend failing.
		out, sendWant, expired = leaseFailed, 0, 0
	}
	if expired > 0 {
		b.metrics.leaseExpired.Increment(uint64(expired))
	}
	if sendWant > 0 {
		b.startLease(rr, sendWant, now)
	}
	switch out {
	case leaseTaken:
		rr.taken = rr.cost
		delete(b.leaseWaiters, h.id)
		h.resolveLease(i, now, limiter.Result{Allowed: true, Limit: rr.lim.Rate, Remaining: rec.tokens})
	case leaseDenied:
		delete(b.leaseWaiters, h.id)
		b.metrics.negativeHits.Increment(1)
		h.resolveLease(i, now, rr.cachedDenial(ns, rec.deniedUntil))
	case leaseFailed:
		delete(b.leaseWaiters, h.id)
		h.resolve(i, now, backend.Reply{}, errLeaseFailed)
	case leaseWait:
		if ns-rr.waitSince > int64(b.budget+leaseInterval) {
			delete(b.leaseWaiters, h.id)
			h.resolve(i, now, backend.Reply{}, backend.Timeout())
			return
		}
		rr.state = remoteWaitLease
		b.leaseWaiters[h.id] = h
		p.ensureTick()
	}
}

var errLeaseFailed = errors.New("lease call failed")

func (h *httpContext) resolveLease(i int, now time.Time, res limiter.Result) {
	rr := &h.remote[i]
	if rr.state != remotePending && rr.state != remoteWaitLease {
		return
	}
	rr.res = res
	if res.Allowed {
		rr.state = remoteAllowed
	} else {
		rr.state = remoteDenied
	}
	h.pending--
	if h.pending > 0 || h.starting {
		return
	}
	h.resumeAfterRemote(now)
}

// exhaustedInterval is how long an Envoy waits before asking again for
// tokens from a bucket it found empty: long enough to make the call worth
// it, short enough that the refill meanwhile (at most half the capacity)
// cannot overflow the bucket.
func exhaustedInterval(l limiter.Limit) time.Duration {
	half := float64(l.Capacity()) * float64(l.Period) / float64(l.Rate) / 2
	d := time.Duration(half)
	if half > float64(maxInterval) {
		d = maxInterval
	}
	if d < leaseInterval {
		d = leaseInterval
	}
	return d
}

// claimLease marks a lease call in flight in r and returns its size.
func (b *backendRuntime) claimLease(r *slotRecord, rr *remoteReq, ns int64) int64 {
	capacity := rr.lim.Capacity()
	want := capacity / 20
	horizon := leaseHorizon
	if r.nextCall != 0 {
		// The bucket was empty last time: the lease must last until the
		// next call is allowed.
		horizon = 2 * exhaustedInterval(rr.lim)
	}
	if r.lastCall != 0 {
		elapsed := ns - r.lastCall
		if elapsed < int64(time.Millisecond) {
			elapsed = int64(time.Millisecond)
		}
		// demand/elapsed scaled to the horizon, rounded up; computed in
		// float64 because demand × horizon can exceed int64 for huge costs.
		want = int64(float64(r.demand)*float64(horizon)/float64(elapsed)) + 1
	}
	if want < rr.cost {
		want = rr.cost
	}
	if want > capacity {
		want = capacity
	}
	r.inflight = ns
	r.lastCall = ns
	r.demand = 0
	r.want = want
	return want
}

// startLease queues the lease call for the tick.
func (b *backendRuntime) startLease(rr *remoteReq, want int64, now time.Time) {
	cmd, err := backend.Lease(rr.lim, rr.rkey, want)
	if err != nil {
		b.leaseDone(*rr, want, now, backend.Reply{}, err)
		return
	}
	key := *rr // the request may be gone when the reply comes
	c := b.newCall(cmd, now, func(at time.Time, r backend.Reply, err error) {
		b.leaseDone(key, want, at, r, err)
	})
	c.lease = true
	b.enqueue(c)
}

func (b *backendRuntime) leaseDone(rr remoteReq, want int64, now time.Time, r backend.Reply, err error) {
	ns := now.UnixNano()
	var expired int64
	written := b.updateSlot(&rr, func(rec *slotRecord) bool {
		expired = 0
		rec.inflight = 0
		if err != nil {
			rec.failedAt = ns
			return true
		}
		if rec.expires <= ns {
			expired, rec.tokens = rec.tokens, 0
		}
		rec.tokens += r.Granted
		rec.expires = ns + int64(leaseTTL)
		rec.nextCall = 0
		if r.Granted < want {
			interval := exhaustedInterval(rr.lim)
			rec.nextCall = ns + int64(interval)
			if r.Granted == 0 {
				wait := r.RetryAfter
				if wait < interval {
					wait = interval
				}
				rec.deniedUntil = ns + int64(wait)
				rec.nextCall = rec.deniedUntil
			}
		}
		return true
	})
	if written && expired > 0 {
		b.metrics.leaseExpired.Increment(uint64(expired))
	}
	if !written && err == nil && r.Granted > 0 {
		// Shared data refused the grant: those tokens are lost, which can
		// only under-admit.
		b.metrics.leaseExpired.Increment(uint64(r.Granted))
	}
	if len(b.leaseWaiters) > 0 {
		b.pollLeaseWaiters(now)
	}
}

// pollLeaseWaiters retries the streams waiting for a lease.
func (b *backendRuntime) pollLeaseWaiters(now time.Time) {
	for id, h := range b.leaseWaiters {
		if h.done {
			delete(b.leaseWaiters, id)
			continue
		}
		for i := range h.remote {
			if h.remote[i].state == remoteWaitLease {
				h.tryLease(i, now, false)
			}
		}
	}
}

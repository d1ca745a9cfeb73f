// Package external is the external limits' cache and lookups: which
// token bucket a limits service says applies to a request, cached in a
// bounded shared-data slot table, looked up with callouts, one lookup per
// key in flight across the workers, and a breaker per lookup key. It has
// no proxy-wasm import: it reaches the proxy through package host, and its
// tests run natively against hosttest's fakes. What the answer is then
// enforced with is the request path's (package filter).
//
// External limits: a limits service, reached through an Envoy cluster with
// proxy_http_call, or proxy_grpc_call with external.grpc (grpc.go), says
// which token bucket applies to a request, and the answer is enforced like
// one more limit (config.External.Limit), locally or in Redis as
// configured.
//
//   - Lookup key: the values of config.External.CacheKey (absent parts
//     empty). It names the cached answer, the lookup in flight and the
//     breaker, all in one shared-data entry (limitsvc.Entry) of a bounded
//     slot table: max_cached slots, two candidate slots per key, a
//     fingerprint telling keys apart.
//   - A fresh entry answers without a call. Otherwise one request claims the
//     lookup with CAS (Inflight), so one lookup per key is in flight across
//     the workers of an Envoy; other requests wait for the entry's Seq to
//     change. Waiters of the claiming worker are resumed when the reply is
//     written, those of other workers from their next tick. A claim older
//     than claimTTL is from a worker that will not answer and is taken over.
//   - Lookups are sent from the tick, in the root context: the SDK drops
//     the reply of a call made from a stream that has ended, and other
//     streams wait for this reply.
//   - A lookup that fails (timeout, 5xx, any other status, malformed answer)
//     leaves the last answer in place; its waiters use it while it is
//     within stale_ttl past its freshness, and the fallback rate and key
//     otherwise. So does every request while the key's breaker is open:
//     lookupBreakerThreshold consecutive failures open it for
//     lookupOpenTimeout, then one probe lookup is let through.
//   - Answers with different rates share the limit's slot table
//     (limiter.Table.WithLimit): the number of tenants and plans does not
//     change the memory the limit can use.
package external

import (
	"errors"
	"fmt"
	"time"
	"unsafe"

	"github.com/sluice-proxy/sluice/breaker"
	"github.com/sluice-proxy/sluice/filter/backend"
	"github.com/sluice-proxy/sluice/filter/config"
	"github.com/sluice-proxy/sluice/filter/host"
	"github.com/sluice-proxy/sluice/filter/limitsvc"
	"github.com/sluice-proxy/sluice/limiter"
	"github.com/sluice-proxy/sluice/limiter/store"
)

const (
	// The per-lookup-key breaker: consecutive failed lookups that open it,
	// how long it stays open, and one probe to close it.
	lookupBreakerThreshold = 5
	lookupOpenTimeout      = 30 * time.Second
	// entryCASTries bounds the CAS retries of one entry update.
	entryCASTries = 16
)

// Bucket keys of the external limit start with a tag, so a tenant_key, a
// lookup key and a fallback key never share a bucket by accident.
const (
	BucketTenant   = 't'
	BucketLookup   = 'c'
	BucketFallback = 'f'
)

// Cache is the external block's cache and lookups in one worker.
type Cache struct {
	cfg    *config.External
	caller host.Caller
	store  store.Store
	log    host.Log
	clock  host.Clock

	machine *breaker.Machine
	fresh   breaker.Record
	seed    uint64
	slots   uint64
	// claimTTL is how long a claimed lookup may stay unanswered before
	// another request takes it over and its waiters give up on it.
	claimTTL time.Duration
	headers  [][2]string

	slotNames *store.SlotNames
	inflight  map[*lookup]struct{}
	queued    []*lookup
	metrics   metrics
	entryBuf  []byte
	// permitKey is the shared-data key of the lookup permits (permits.go);
	// permitBuf is scratch for their value.
	permitKey string
	permitBuf []byte
	// wake asks for the tick; settled runs when a lookup has finished, so
	// that the requests waiting for one are polled (Settle).
	wake    func()
	settled func(now time.Time)
	// grpc is set when the service is reached over gRPC (grpc.go).
	grpc *grpcLookups
}

// New is the cache of cfg over hc. tickPeriod is the tick's period, which
// a claim's time to live allows for.
func New(hc *host.Host, cfg *config.External, tickPeriod time.Duration, wake func(), settled func(now time.Time)) (*Cache, error) {
	x := &Cache{
		cfg: cfg, caller: hc.Caller, store: hc.Store, log: hc.Log, clock: hc.Clock,
		seed:      limiter.Hash(0, "sluice.ext."+cfg.Limit.Name),
		slots:     uint64(cfg.MaxCached),
		claimTTL:  cfg.Timeout + host.WatchdogSlack + 2*tickPeriod,
		slotNames: store.NewSlotNames("sluice.ext."+cfg.Limit.Name+".", uint64(cfg.MaxCached)),
		permitKey: "sluice.ext." + cfg.Limit.Name + ".permits",
		inflight:  map[*lookup]struct{}{},
		metrics:   defineMetrics(hc.Metrics),
		wake:      wake,
		settled:   settled,
		headers: [][2]string{
			{":method", "POST"}, {":path", cfg.Path}, {":authority", cfg.Authority},
			{"content-type", "application/json"}, {"accept", "application/json"},
		},
	}
	if err := x.configureGrpc(hc.Caller); err != nil {
		return nil, err
	}
	var err error
	x.machine, err = breaker.NewMachine(breaker.Settings{
		FailureThreshold: lookupBreakerThreshold,
		OpenTimeout:      lookupOpenTimeout,
		SuccessThreshold: 1,
		// A probe whose reply never comes must not wedge half-open.
		ProbeTimeout: x.claimTTL + time.Second,
	})
	if err != nil {
		return nil, fmt.Errorf("external: %v", err)
	}
	x.machine.Reset(&x.fresh)
	return x, nil
}

// lookup is one call to the limits service.
type lookup struct {
	fp        uint64
	slot      uint64
	claimedAt int64
	// permit is the index of the lookup's permit, claimed at claimedAt;
	// -1 when none was needed.
	permit int
	ticket breaker.Ticket
	body   []byte
	sentAt time.Time
	done   bool
}

// State is where a request stands with its lookup.
type State uint8

const (
	Unresolved State = iota
	Waiting
	Resolved
)

// Request is a request's part in the external limit.
type Request struct {
	State     State
	fp        uint64
	slot      uint64
	seq       uint32
	waitSince time.Time
	// lookupKey is kept only when the bucket may need it (no tenant_key).
	lookupKey string
	// What applies once resolved: nothing (skip), the fallback, or an
	// answer's limit in the bucket tag+bucket.
	Skip     bool
	Fallback bool
	Limit    limiter.Limit
	Tag      byte
	Bucket   string
	Policy   limitsvc.Policy
	// FailureCode is the answer's failure_code; zero for none.
	FailureCode int
	// Route is the answer's backend_url, one of allowed_routes when the
	// answer was received; "" for none, and after the fallback.
	Route string
}

// slotName is the shared-data key of cache slot i.
func (x *Cache) slotName(i uint64) string { return x.slotNames.Name(i) }

// candidate is the i-th slot a lookup key may live in (store.Probe).
func (x *Cache) candidate(fp uint64, i int) uint64 { return store.Probe(fp, i) % x.slots }

// readEntry reads slot i. ok is false when the slot is empty or holds
// something unreadable, which then counts as empty.
func (x *Cache) readEntry(i uint64, e *limitsvc.Entry) (cas uint32, exists, ok bool) {
	v, cas, found, err := store.Load(x.store, x.slotName(i))
	if err != nil {
		x.log.Warnf("sluice: external cache: %v", err)
		return store.CreateCAS, false, false
	}
	if !found {
		return cas, false, false
	}
	return cas, true, e.Decode(v) == nil
}

// writeEntry writes e into slot i with CAS; false on a CAS mismatch or a
// store error.
func (x *Cache) writeEntry(i uint64, e *limitsvc.Entry, cas uint32) bool {
	x.entryBuf = e.Encode(x.entryBuf[:0])
	err := x.store.Set(x.slotName(i), x.entryBuf, cas)
	if err != nil && !errors.Is(err, store.ErrCASMismatch) {
		x.log.Warnf("sluice: external cache: %v", err)
	}
	return err == nil
}

// locate finds the key's slot, or chooses one for it: an empty or
// unreadable one, else one whose entry is past its stale time and has no
// live lookup, else the one that goes stale first. e is the key's entry
// (a fresh one when it has none) and cas what to write it back with.
func (x *Cache) locate(fp uint64, ns int64, e *limitsvc.Entry) (slot uint64, cas uint32) {
	var best uint64
	var bestCAS uint32
	bestRank, bestStale := 4, int64(0)
	for i := 0; i < 2; i++ {
		s := x.candidate(fp, i)
		c, exists, ok := x.readEntry(s, e)
		if ok && e.FP == fp {
			return s, c
		}
		rank, stale := 3, int64(0)
		switch {
		case !exists:
			rank = 0
		case !ok:
			rank = 1
		case e.StaleUntil <= ns && (e.Inflight == 0 || ns-e.Inflight >= int64(x.claimTTL)):
			rank = 2
		default:
			stale = e.StaleUntil
		}
		if rank < bestRank || (rank == 3 && bestRank == 3 && stale < bestStale) {
			best, bestCAS, bestRank, bestStale = s, c, rank, stale
		}
	}
	if bestRank == 3 {
		x.metrics.evictions.Increment(1)
	}
	*e = limitsvc.Entry{FP: fp, Breaker: x.fresh}
	return best, bestCAS
}

type claimOutcome uint8

const (
	claimHit claimOutcome = iota
	claimWait
	claimStart
	claimRejected // breaker open, or the entry could not be written
	claimLimited  // max_concurrent_requests lookups are in flight
)

// Resolve settles which limit the external block applies to request r
// with the lookup key key (its bytes are copied if kept). false means r
// waits for a lookup: the caller keeps it with its waiters and polls it
// with Settle from the tick and whenever a lookup settles. body renders
// the lookup, and is called only when r starts one.
func (x *Cache) Resolve(r *Request, key []byte, body func() []byte, now time.Time) bool {
	switch r.State {
	case Resolved:
		return true
	case Waiting:
		return false
	}
	ns := now.UnixNano()
	fp := limiter.Hash(x.seed, unsafeString(key))
	r.fp = fp
	var e limitsvc.Entry
	var t breaker.Ticket
	out := claimRejected
	var slot uint64
	permit, permitHeld := -1, false
	for range entryCASTries {
		var cas uint32
		slot, cas = x.locate(fp, ns, &e)
		if e.HasAnswer && ns < e.FreshUntil {
			out = claimHit
			break
		}
		if e.Inflight != 0 && ns-e.Inflight < int64(x.claimTTL) {
			out = claimWait
			break
		}
		if !permitHeld {
			// Taken before the breaker, whose half-open probes must not
			// be spent on lookups that are then not sent.
			var err error
			if permit, err = x.acquirePermit(ns); err != nil {
				out = claimLimited
				break
			}
			permitHeld = true
		}
		var d breaker.Decision
		var changed bool
		t, d, changed = x.machine.Check(&e.Breaker, now)
		if !d.Allowed {
			if changed && !x.writeEntry(slot, &e, cas) {
				continue
			}
			x.recordTransition(d.Transition)
			x.metrics.breakerRejected.Increment(1)
			out = claimRejected
			break
		}
		e.Inflight = ns
		if x.writeEntry(slot, &e, cas) {
			x.recordTransition(d.Transition)
			out = claimStart
			break
		}
	}
	r.slot = slot
	if permitHeld && out != claimStart {
		x.releasePermit(permit, ns)
	}
	if (e.HasAnswer && e.Answer.TenantKey == "") || out == claimWait || out == claimStart {
		// The bucket of an answer without tenant_key is the lookup key,
		// and it cannot be rebuilt once the request waits.
		r.lookupKey = string(key)
	}
	switch out {
	case claimHit:
		x.metrics.cacheHits.Increment(1)
		r.apply(&e.Answer)
		return true
	case claimRejected:
		x.metrics.cacheMisses.Increment(1)
		r.failed(x, &e, fp, ns)
		return true
	case claimLimited:
		// Like a failed lookup: the stale answer, else the fallback.
		x.metrics.cacheMisses.Increment(1)
		x.metrics.lookupsLimited.Increment(1)
		r.failed(x, &e, fp, ns)
		return true
	case claimStart:
		x.metrics.cacheMisses.Increment(1)
		msg := body()
		if x.grpc != nil {
			msg = x.grpc.message(msg)
		}
		x.start(&lookup{fp: fp, slot: slot, claimedAt: ns, permit: permit, ticket: t, body: msg})
	default:
		x.metrics.cacheMisses.Increment(1)
		x.metrics.waits.Increment(1)
	}
	r.State = Waiting
	r.seq = e.Seq
	r.waitSince = now
	x.wake()
	return false
}

// apply resolves the request with an answer.
func (r *Request) apply(a *limitsvc.Answer) {
	r.State = Resolved
	switch {
	case a.Unlimited:
		r.Skip = true
	case a.TenantKey != "":
		r.Tag, r.Bucket = BucketTenant, a.TenantKey
	default:
		r.Tag, r.Bucket = BucketLookup, r.lookupKey
	}
	r.Limit = a.Limit()
	r.Policy = a.Policy
	r.FailureCode = a.FailureCode
	r.Route = a.BackendURL
}

// failed resolves the request after a failed or impossible lookup: with
// the entry's answer while it is fresh or within its stale time, with the
// fallback otherwise. e is nil when the key has no entry left.
func (r *Request) failed(x *Cache, e *limitsvc.Entry, fp uint64, ns int64) {
	if e != nil && e.FP == fp && e.HasAnswer && ns < e.StaleUntil {
		if ns >= e.FreshUntil {
			x.metrics.staleUsed.Increment(1)
		}
		r.apply(&e.Answer)
		return
	}
	x.metrics.fallbackUsed.Increment(1)
	r.State = Resolved
	r.Fallback = true
}

// start queues a lookup for the tick.
func (x *Cache) start(l *lookup) {
	x.queued = append(x.queued, l)
	x.wake()
}

func (x *Cache) send(l *lookup, now time.Time) {
	l.sentAt = now
	x.inflight[l] = struct{}{}
	x.metrics.lookups.Increment(1)
	if x.grpc != nil {
		x.sendGrpc(l, now)
		return
	}
	err := x.caller.Call(x.cfg.Cluster, x.headers, l.body, x.cfg.Timeout, func(status int, body []byte, err error) {
		x.onReply(l, status, body, err)
	})
	if err != nil {
		x.finish(l, now, limitsvc.Answer{}, &backend.Error{Kind: backend.KindUnavailable, Detail: "proxy_http_call: " + err.Error()})
	}
}

func (x *Cache) onReply(l *lookup, status int, body []byte, err error) {
	if l.done {
		return // the watchdog gave up on it
	}
	now := x.clock()
	x.recordLatency(l, now)
	if err != nil {
		x.finish(l, now, limitsvc.Answer{}, err)
		return
	}
	var cc limitsvc.CacheControl
	if rh, ok := x.caller.(host.ReplyHeaders); ok && status == 200 {
		if v, ok := rh.ReplyHeader("cache-control"); ok {
			cc = limitsvc.ParseCacheControl(v)
		}
	}
	// The header applies where the answer's body is silent, read in the
	// same pass as the body.
	a, err := limitsvc.ParseWith(status, body, cc)
	if err == nil && cc.Invalid {
		x.metrics.invalidCacheControl.Increment(1)
	}
	x.answered(l, now, a, err)
}

func (x *Cache) recordLatency(l *lookup, now time.Time) {
	if lat := now.Sub(l.sentAt); lat >= 0 {
		x.metrics.latency.Record(uint64(lat / time.Millisecond))
	}
}

// answered finishes a lookup whose reply was read, over either transport.
func (x *Cache) answered(l *lookup, now time.Time, a limitsvc.Answer, err error) {
	if err == nil && a.BackendURL != "" && !x.cfg.RouteAllowed(a.BackendURL) {
		// Counted and logged once per answer, and never cached: a
		// compromised service must not pick a cluster the config does
		// not list. The rest of the answer stands.
		x.metrics.routesDisallowed.Increment(1)
		x.log.Warnf("sluice: external: ignoring backend_url %q: not in external.allowed_routes", a.BackendURL)
		a.BackendURL = ""
	}
	x.finish(l, now, a, err)
}

// finish records a lookup's outcome in its entry and wakes this worker's
// waiters; other workers' waiters see it from their tick.
func (x *Cache) finish(l *lookup, now time.Time, a limitsvc.Answer, err error) {
	if l.done {
		return
	}
	l.done = true
	delete(x.inflight, l)
	x.releasePermit(l.permit, l.claimedAt)
	ns := now.UnixNano()
	if err != nil {
		x.metrics.errorOf(backend.KindOf(err)).Increment(1)
		x.log.Debugf("sluice: external lookup failed: %v", err)
	}
	var e limitsvc.Entry
	for range entryCASTries {
		cas, _, ok := x.readEntry(l.slot, &e)
		if !ok || e.FP != l.fp {
			if err != nil {
				break // a failure has nothing worth a slot another key holds
			}
			e = limitsvc.Entry{FP: l.fp, Breaker: x.fresh}
		}
		e.Seq++
		if e.Inflight == l.claimedAt {
			e.Inflight = 0
		}
		tr, _ := x.machine.Report(&e.Breaker, l.ticket, breaker.Outcome{Failure: err != nil, Duration: now.Sub(l.sentAt)}, now)
		if err != nil {
			e.Failed = true
		} else {
			e.Failed, e.HasAnswer = false, true
			ttl := x.cfg.CacheTTL
			if a.MaxAge > 0 {
				ttl = a.MaxAge
			}
			e.FreshUntil, e.StaleUntil = ns+int64(ttl), ns+int64(ttl+x.cfg.StaleTTL)
			if a.NoCache {
				e.FreshUntil = ns
			}
			if a.NoStore {
				e.FreshUntil, e.StaleUntil = ns, ns
			}
			a.MaxAge, a.NoStore, a.NoCache = 0, false, false
			e.Answer = a
		}
		if x.writeEntry(l.slot, &e, cas) {
			x.recordTransition(tr)
			break
		}
	}
	x.settled(now)
}

func (x *Cache) recordTransition(tr breaker.Transition) {
	switch tr {
	case breaker.Opened, breaker.Reopened:
		x.metrics.breakerOpens.Increment(1)
	case breaker.Recovered:
		x.metrics.breakerCloses.Increment(1)
	}
}

// Tick sends queued lookups and times out lost replies.
func (x *Cache) Tick(now time.Time) {
	for l := range x.inflight {
		if now.Sub(l.sentAt) >= x.cfg.Timeout+host.WatchdogSlack {
			x.finish(l, now, limitsvc.Answer{}, backend.Timeout())
		}
	}
	if len(x.queued) > 0 {
		q := x.queued
		x.queued = nil
		for _, l := range q {
			x.send(l, now)
		}
	}
}

// Busy reports whether lookups are out or queued: the tick must go on.
func (x *Cache) Busy() bool { return len(x.inflight) > 0 || len(x.queued) > 0 }

// Settle polls a waiting request: true once its lookup has finished,
// failed or outlived its claim, and r is resolved.
func (x *Cache) Settle(r *Request, now time.Time) bool {
	ns := now.UnixNano()
	var e limitsvc.Entry
	_, _, ok := x.readEntry(r.slot, &e)
	switch {
	case !ok || e.FP != r.fp:
		r.failed(x, nil, r.fp, ns) // the entry was evicted
	case e.Seq != r.seq && !e.Failed && e.HasAnswer:
		r.apply(&e.Answer)
	case e.Seq != r.seq, e.Inflight == 0, ns-e.Inflight >= int64(x.claimTTL), now.Sub(r.waitSince) >= x.claimTTL:
		r.failed(x, &e, r.fp, ns)
	default:
		return false
	}
	return true
}

type metrics struct {
	lookups, cacheHits, cacheMisses, waits, staleUsed, fallbackUsed, evictions host.Counter
	// invalidCacheControl counts replies whose Cache-Control had an
	// unreadable directive, ignored.
	invalidCacheControl host.Counter
	// lookupsLimited counts lookups not made because
	// max_concurrent_requests were in flight.
	lookupsLimited host.Counter
	// routesDisallowed counts answers whose backend_url is not one of
	// allowed_routes, ignored.
	routesDisallowed                             host.Counter
	breakerOpens, breakerCloses, breakerRejected host.Counter
	// errTimeout … errOther count failed lookups by backend.Kind.
	errTimeout, errUnavailable, errHTTPStatus, errMalformed, errOther host.Counter
	latency                                                           host.Histogram
}

const metricPrefix = "sluice.external."

func defineMetrics(hm host.Metrics) metrics {
	p := metricPrefix
	return metrics{
		lookups:             hm.Counter(p + "lookups"),
		invalidCacheControl: hm.Counter(p + "invalid_cache_control"),
		lookupsLimited:      hm.Counter(p + "lookups_limited"),
		routesDisallowed:    hm.Counter(p + "routes_disallowed"),
		cacheHits:           hm.Counter(p + "cache_hits"),
		cacheMisses:         hm.Counter(p + "cache_misses"),
		waits:               hm.Counter(p + "waits"),
		staleUsed:           hm.Counter(p + "stale_used"),
		fallbackUsed:        hm.Counter(p + "fallback_used"),
		evictions:           hm.Counter(p + "evictions"),
		breakerOpens:        hm.Counter(p + "breaker.opens"),
		breakerCloses:       hm.Counter(p + "breaker.closes"),
		breakerRejected:     hm.Counter(p + "breaker.rejected"),
		errTimeout:          hm.Counter(p + "errors." + backend.KindTimeout.String()),
		errUnavailable:      hm.Counter(p + "errors." + backend.KindUnavailable.String()),
		errHTTPStatus:       hm.Counter(p + "errors." + backend.KindHTTPStatus.String()),
		errMalformed:        hm.Counter(p + "errors." + backend.KindMalformed.String()),
		errOther:            hm.Counter(p + "errors.other"),
		latency:             hm.Histogram(p + "latency_ms"),
	}
}

func (m *metrics) errorOf(k backend.Kind) host.Counter {
	switch k {
	case backend.KindTimeout:
		return m.errTimeout
	case backend.KindUnavailable:
		return m.errUnavailable
	case backend.KindHTTPStatus:
		return m.errHTTPStatus
	case backend.KindMalformed:
		return m.errMalformed
	}
	return m.errOther
}

// unsafeString views b as a string for hashing, without a copy.
func unsafeString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

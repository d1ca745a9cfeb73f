package filter

// External limits: a limits service, reached through an Envoy cluster with
// proxy_http_call, says which token bucket applies to a request, and the
// answer is enforced like one more limit (config.External.Limit), locally
// or in Redis as configured.
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

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/sluice-proxy/sluice/breaker"
	"github.com/sluice-proxy/sluice/filter/backend"
	"github.com/sluice-proxy/sluice/filter/config"
	"github.com/sluice-proxy/sluice/filter/distributed"
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
	// maxRateTables bounds this worker's table views (one per distinct
	// answered rate); past it they are dropped and made again on demand.
	maxRateTables = 256
)

// Bucket keys of the external limit start with a tag, so a tenant_key, a
// lookup key and a fallback key never share a bucket by accident.
const (
	bucketTenant   = 't'
	bucketLookup   = 'c'
	bucketFallback = 'f'
)

type externalRuntime struct {
	p      *pluginContext
	cfg    *config.External
	lim    *limitRuntime
	index  int // of lim in p.limits
	caller host.Caller
	store  store.Store
	log    host.Log

	machine *breaker.Machine
	fresh   breaker.Record
	seed    uint64
	slots   uint64
	// claimTTL is how long a claimed lookup may stay unanswered before
	// another request takes it over and its waiters give up on it.
	claimTTL time.Duration
	headers  [][2]string

	slotNames *store.SlotNames
	tables    map[limiter.Limit]*limiter.Table
	fallbacks map[limiter.Limit]*limiter.Table
	// fallbackBase holds failure_policy local decisions of global and
	// hybrid answers, apart from the limit's own slots.
	fallbackBase *limiter.Table

	inflight map[*lookup]struct{}
	queued   []*lookup
	waiters  map[uint32]*httpContext
	metrics  externalMetrics
	keyBuf   []byte
	entryBuf []byte
}

// lookup is one call to the limits service.
type lookup struct {
	fp        uint64
	slot      uint64
	claimedAt int64
	ticket    breaker.Ticket
	body      []byte
	sentAt    time.Time
	done      bool
}

// extState is where a request stands with its lookup.
type extState uint8

const (
	extUnresolved extState = iota
	extWaiting
	extResolved
)

// extRequest is a request's part in the external limit.
type extRequest struct {
	state     extState
	fp        uint64
	slot      uint64
	seq       uint32
	waitSince time.Time
	// lookupKey is kept only when the bucket may need it (no tenant_key).
	lookupKey string
	// What applies once resolved: nothing (skip), the fallback, or an
	// answer's limit in the bucket tag+bucket.
	skip     bool
	fallback bool
	limit    limiter.Limit
	tag      byte
	bucket   string
	policy   limitsvc.Policy
}

func (p *pluginContext) configureExternal(cfg *config.External) error {
	l, err := newLimitRuntime(p.host, &cfg.Limit, len(p.limits), config.FieldPath("external", "fallback"))
	if err != nil {
		return err
	}
	l.keyKinds = "tenant_key"
	if err := p.ensureBackend(l, "external.mode"); err != nil {
		return err
	}
	x := &externalRuntime{
		p: p, cfg: cfg, lim: l, index: len(p.limits), caller: p.host.Caller, store: p.host.Store, log: p.host.Log,
		seed:      limiter.Hash(0, "sluice.ext."+cfg.Limit.Name),
		slots:     uint64(cfg.MaxCached),
		claimTTL:  cfg.Timeout + distributed.WatchdogSlack + 2*delayTick,
		slotNames: store.NewSlotNames("sluice.ext."+cfg.Limit.Name+".", uint64(cfg.MaxCached)),
		tables:    map[limiter.Limit]*limiter.Table{},
		fallbacks: map[limiter.Limit]*limiter.Table{},
		inflight:  map[*lookup]struct{}{},
		waiters:   map[uint32]*httpContext{},
		metrics:   defineExternalMetrics(p.host.Metrics),
		headers: [][2]string{
			{":method", "POST"}, {":path", cfg.Path}, {":authority", cfg.Authority},
			{"content-type", "application/json"}, {"accept", "application/json"},
		},
	}
	x.machine, err = breaker.NewMachine(breaker.Settings{
		FailureThreshold: lookupBreakerThreshold,
		OpenTimeout:      lookupOpenTimeout,
		SuccessThreshold: 1,
		// A probe whose reply never comes must not wedge half-open.
		ProbeTimeout: x.claimTTL + time.Second,
	})
	if err != nil {
		return fmt.Errorf("external: %v", err)
	}
	x.machine.Reset(&x.fresh)
	if cfg.Limit.Mode != config.ModeLocal {
		x.fallbackBase, err = newTable(p.host.Store, &cfg.Limit, cfg.Limit.Rate,
			"sluice.rlf."+cfg.Limit.Name+".", cfg.Limit.Name+"\x00fallback")
		if err != nil {
			return fmt.Errorf("%s: %v", config.FieldPath("external", "fallback"), err)
		}
	}
	l.ext = x
	p.external = x
	p.limits = append(p.limits, l)
	p.matchNeeds |= matchNeedsOf(&cfg.Limit.Match)
	return nil
}

// slotName is the shared-data key of cache slot i.
func (x *externalRuntime) slotName(i uint64) string { return x.slotNames.Name(i) }

// candidate is the i-th slot a lookup key may live in (store.Probe).
func (x *externalRuntime) candidate(fp uint64, i int) uint64 { return store.Probe(fp, i) % x.slots }

// readEntry reads slot i. ok is false when the slot is empty or holds
// something unreadable, which then counts as empty.
func (x *externalRuntime) readEntry(i uint64, e *limitsvc.Entry) (cas uint32, exists, ok bool) {
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
func (x *externalRuntime) writeEntry(i uint64, e *limitsvc.Entry, cas uint32) bool {
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
func (x *externalRuntime) locate(fp uint64, ns int64, e *limitsvc.Entry) (slot uint64, cas uint32) {
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

// appendLookupKey appends the lookup key of the request to dst.
func (x *externalRuntime) appendLookupKey(dst []byte, info *requestInfo) []byte {
	for i := range x.cfg.CacheKey {
		if i > 0 {
			dst = append(dst, keySeparator)
		}
		dst, _, _ = info.appendKey(dst, x.cfg.CacheKey[i:i+1], &x.p.cfg.ClientIP, -1)
	}
	return dst
}

type claimOutcome uint8

const (
	claimHit claimOutcome = iota
	claimWait
	claimStart
	claimRejected // breaker open, or the entry could not be written
)

// resolveExternal settles which limit the external block applies to the
// request. false means the request waits for a lookup and is resumed by
// evaluate from the tick or the reply.
func (h *httpContext) resolveExternal(now time.Time) bool {
	switch h.ext.state {
	case extResolved:
		return true
	case extWaiting:
		return false
	}
	x := h.plugin.external
	ns := now.UnixNano()
	x.keyBuf = x.appendLookupKey(x.keyBuf[:0], &h.info)
	fp := limiter.Hash(x.seed, arenaString(x.keyBuf))
	h.ext.fp = fp
	var e limitsvc.Entry
	var t breaker.Ticket
	out := claimRejected
	var slot uint64
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
	h.ext.slot = slot
	if (e.HasAnswer && e.Answer.TenantKey == "") || out == claimWait || out == claimStart {
		// The bucket of an answer without tenant_key is the lookup key,
		// and it cannot be rebuilt once the request waits.
		h.ext.lookupKey = string(x.keyBuf)
	}
	switch out {
	case claimHit:
		x.metrics.cacheHits.Increment(1)
		h.ext.apply(&e.Answer)
		return true
	case claimRejected:
		x.metrics.cacheMisses.Increment(1)
		h.ext.failed(x, &e, fp, ns)
		return true
	case claimStart:
		x.metrics.cacheMisses.Increment(1)
		x.start(&lookup{fp: fp, slot: slot, claimedAt: ns, ticket: t, body: x.requestBody(&h.info)})
	default:
		x.metrics.cacheMisses.Increment(1)
		x.metrics.waits.Increment(1)
	}
	h.ext.state = extWaiting
	h.ext.seq = e.Seq
	h.ext.waitSince = now
	x.waiters[h.id] = h
	h.plugin.ensureTick()
	return false
}

// apply resolves the request with an answer.
func (r *extRequest) apply(a *limitsvc.Answer) {
	r.state = extResolved
	switch {
	case a.Unlimited:
		r.skip = true
	case a.TenantKey != "":
		r.tag, r.bucket = bucketTenant, a.TenantKey
	default:
		r.tag, r.bucket = bucketLookup, r.lookupKey
	}
	r.limit = a.Limit()
	r.policy = a.Policy
}

// failed resolves the request after a failed or impossible lookup: with
// the entry's answer while it is fresh or within its stale time, with the
// fallback otherwise. e is nil when the key has no entry left.
func (r *extRequest) failed(x *externalRuntime, e *limitsvc.Entry, fp uint64, ns int64) {
	if e != nil && e.FP == fp && e.HasAnswer && ns < e.StaleUntil {
		if ns >= e.FreshUntil {
			x.metrics.staleUsed.Increment(1)
		}
		r.apply(&e.Answer)
		return
	}
	x.metrics.fallbackUsed.Increment(1)
	r.state = extResolved
	r.fallback = true
}

// requestBody renders the lookup: {"method", "path", "headers"}. The path
// is sent without its query, which can carry credentials.
func (x *externalRuntime) requestBody(info *requestInfo) []byte {
	info.loadHeaders()
	b := make([]byte, 0, 256)
	b = append(b, `{"method":`...)
	b = appendJSONString(b, info.method)
	b = append(b, `,"path":`...)
	b = appendJSONString(b, info.pathOnly())
	b = append(b, `,"headers":{`...)
	first := true
	field := func(name, value string) {
		if !first {
			b = append(b, ',')
		}
		first = false
		b = appendJSONString(b, name)
		b = append(b, ':')
		b = appendJSONString(b, value)
	}
	named := x.cfg.ForwardHeaders
	for _, name := range named {
		if v, ok := info.header(name); ok {
			field(name, v)
		} else if name == "host" && info.authority != "" {
			field(name, info.authority)
		}
	}
	if x.cfg.ForwardAll {
		var seen []string
		for _, kv := range info.headers {
			name := kv[0]
			if name == "" || name[0] == ':' || slices.Contains(named, name) || slices.Contains(seen, name) ||
				config.IsSensitiveHeader(name) {
				continue
			}
			seen = append(seen, name)
			v, _ := info.header(name)
			field(name, v)
		}
	}
	return append(b, "}}"...)
}

// start queues a lookup for the tick.
func (x *externalRuntime) start(l *lookup) {
	x.queued = append(x.queued, l)
	x.p.ensureTick()
}

func (x *externalRuntime) send(l *lookup, now time.Time) {
	l.sentAt = now
	x.inflight[l] = struct{}{}
	x.metrics.lookups.Increment(1)
	err := x.caller.Call(x.cfg.Cluster, x.headers, l.body, x.cfg.Timeout, func(status int, body []byte, err error) {
		x.onReply(l, status, body, err)
	})
	if err != nil {
		x.finish(l, now, limitsvc.Answer{}, &backend.Error{Kind: backend.KindUnavailable, Detail: "proxy_http_call: " + err.Error()})
	}
}

func (x *externalRuntime) onReply(l *lookup, status int, body []byte, err error) {
	if l.done {
		return // the watchdog gave up on it
	}
	now := x.p.host.Clock()
	if lat := now.Sub(l.sentAt); lat >= 0 {
		x.metrics.latency.Record(uint64(lat / time.Millisecond))
	}
	if err != nil {
		x.finish(l, now, limitsvc.Answer{}, err)
		return
	}
	a, err := limitsvc.Parse(status, body)
	x.finish(l, now, a, err)
}

// finish records a lookup's outcome in its entry and wakes this worker's
// waiters; other workers' waiters see it from their tick.
func (x *externalRuntime) finish(l *lookup, now time.Time, a limitsvc.Answer, err error) {
	if l.done {
		return
	}
	l.done = true
	delete(x.inflight, l)
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
			if a.NoStore {
				e.FreshUntil, e.StaleUntil = ns, ns
			}
			a.MaxAge, a.NoStore = 0, false
			e.Answer = a
		}
		if x.writeEntry(l.slot, &e, cas) {
			x.recordTransition(tr)
			break
		}
	}
	if len(x.waiters) > 0 {
		x.pollWaiters(now)
	}
}

func (x *externalRuntime) recordTransition(tr breaker.Transition) {
	switch tr {
	case breaker.Opened, breaker.Reopened:
		x.metrics.breakerOpens.Increment(1)
	case breaker.Recovered:
		x.metrics.breakerCloses.Increment(1)
	}
}

// tick sends queued lookups, times out lost replies and polls waiters.
func (x *externalRuntime) tick(now time.Time) {
	for l := range x.inflight {
		if now.Sub(l.sentAt) >= x.cfg.Timeout+distributed.WatchdogSlack {
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
	if len(x.waiters) > 0 {
		x.pollWaiters(now)
	}
}

func (x *externalRuntime) busy() bool {
	return len(x.inflight) > 0 || len(x.queued) > 0 || len(x.waiters) > 0
}

// pollWaiters resumes the requests whose lookup has finished, failed or
// outlived its claim.
func (x *externalRuntime) pollWaiters(now time.Time) {
	ns := now.UnixNano()
	var e limitsvc.Entry
	for id, h := range x.waiters {
		r := &h.ext
		_, _, ok := x.readEntry(r.slot, &e)
		switch {
		case !ok || e.FP != r.fp:
			r.failed(x, nil, r.fp, ns) // the entry was evicted
		case e.Seq != r.seq && !e.Failed && e.HasAnswer:
			r.apply(&e.Answer)
		case e.Seq != r.seq, e.Inflight == 0, ns-e.Inflight >= int64(x.claimTTL), now.Sub(r.waitSince) >= x.claimTTL:
			r.failed(x, &e, r.fp, ns)
		default:
			continue
		}
		delete(x.waiters, id)
		h.resumeAfterExternal(now)
	}
}

// resumeAfterExternal finishes evaluating a request whose lookup settled.
func (h *httpContext) resumeAfterExternal(now time.Time) {
	if h.done {
		return
	}
	if err := h.plugin.host.Stream.Select(h.id); err != nil {
		return // the stream is gone
	}
	if h.evaluate(now) == types.ActionContinue {
		if err := h.plugin.host.Stream.Resume(); err != nil {
			h.plugin.log.Warnf("sluice: resuming a request: %v", err)
		}
	}
}

// forgetExternal drops a finished stream from the waiters.
func (h *httpContext) forgetExternal() {
	if x := h.plugin.external; x != nil && h.ext.state == extWaiting {
		delete(x.waiters, h.id)
	}
}

// appendExternal appends the request's bucket key for the external limit
// and returns the table and rate it is decided with; ok is false when the
// fallback key is missing.
func (h *httpContext) appendExternal(dst []byte) (arena []byte, t *limiter.Table, rate config.Rate, ok bool) {
	x := h.plugin.external
	l := x.lim
	r := &h.ext
	if r.fallback {
		start := len(dst)
		dst = append(dst, bucketFallback)
		dst, _, ok = h.info.appendKey(dst, l.cfg.Key, &h.plugin.cfg.ClientIP, -1)
		if !ok {
			return dst[:start], nil, config.Rate{}, false
		}
		return dst, l.def, l.cfg.Rate, true
	}
	t, err := x.table(r.limit)
	if err != nil {
		// Parse and Decode validate every answer; this cannot happen, and
		// the fallback is the safe reading if it does.
		h.plugin.log.Warnf("sluice: external limit: %v", err)
		r.fallback = true
		return h.appendExternal(dst)
	}
	rate = config.Rate{Limit: r.limit.Rate, Window: r.limit.Period, Burst: r.limit.Burst}
	return append(append(dst, r.tag), r.bucket...), t, rate, true
}

// table is the limit's table deciding with lim.
func (x *externalRuntime) table(lim limiter.Limit) (*limiter.Table, error) {
	if t, ok := x.tables[lim]; ok {
		return t, nil
	}
	if len(x.tables) >= maxRateTables {
		clear(x.tables)
	}
	t, err := x.lim.def.WithLimit(lim)
	if err != nil {
		return nil, err
	}
	x.tables[lim] = t
	return t, nil
}

// localFallback is the table of failure_policy local for a global or
// hybrid decision: the limit divided by instances, as for limits.
func (h *httpContext) localFallback(rr *remoteReq) (*limiter.Table, error) {
	x := rr.l.ext
	if x == nil {
		return rr.l.fallbackTable(h.plugin.host.Store, rr.overrideValue)
	}
	lim := rr.k.Lim
	n := int64(max(rr.l.cfg.Instances, 1))
	lim.Rate = max(lim.Rate/n, 1)
	lim.Burst /= n
	if t, ok := x.fallbacks[lim]; ok {
		return t, nil
	}
	if len(x.fallbacks) >= maxRateTables {
		clear(x.fallbacks)
	}
	t, err := x.fallbackBase.WithLimit(lim)
	if err != nil {
		return nil, err
	}
	x.fallbacks[lim] = t
	return t, nil
}

// remotePolicy is the failure policy of a global or hybrid decision: the
// answer's, when it names one.
func (h *httpContext) remotePolicy(l *limitRuntime) config.FailurePolicy {
	if l.ext != nil {
		switch h.ext.policy {
		case limitsvc.PolicyAllow:
			return config.FailAllow
		case limitsvc.PolicyDeny:
			return config.FailDeny
		case limitsvc.PolicyLocal:
			return config.FailLocal
		}
	}
	return l.remote.policy
}

type externalMetrics struct {
	lookups, cacheHits, cacheMisses, waits, staleUsed, fallbackUsed, evictions host.Counter
	breakerOpens, breakerCloses, breakerRejected                               host.Counter
	// errTimeout … errOther count failed lookups by backend.Kind.
	errTimeout, errUnavailable, errHTTPStatus, errMalformed, errOther host.Counter
	latency                                                           host.Histogram
}

const metricPrefixExternal = "sluice.external."

func defineExternalMetrics(hm host.Metrics) externalMetrics {
	p := metricPrefixExternal
	return externalMetrics{
		lookups:         hm.Counter(p + "lookups"),
		cacheHits:       hm.Counter(p + "cache_hits"),
		cacheMisses:     hm.Counter(p + "cache_misses"),
		waits:           hm.Counter(p + "waits"),
		staleUsed:       hm.Counter(p + "stale_used"),
		fallbackUsed:    hm.Counter(p + "fallback_used"),
		evictions:       hm.Counter(p + "evictions"),
		breakerOpens:    hm.Counter(p + "breaker.opens"),
		breakerCloses:   hm.Counter(p + "breaker.closes"),
		breakerRejected: hm.Counter(p + "breaker.rejected"),
		errTimeout:      hm.Counter(p + "errors." + backend.KindTimeout.String()),
		errUnavailable:  hm.Counter(p + "errors." + backend.KindUnavailable.String()),
		errHTTPStatus:   hm.Counter(p + "errors." + backend.KindHTTPStatus.String()),
		errMalformed:    hm.Counter(p + "errors." + backend.KindMalformed.String()),
		errOther:        hm.Counter(p + "errors.other"),
		latency:         hm.Histogram(p + "latency_ms"),
	}
}

func (m *externalMetrics) errorOf(k backend.Kind) host.Counter {
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

// Package filter is the Sluice proxy-wasm plugin: it adapts Envoy's
// callbacks to the limiter and breaker cores.
//
// Per request, in order:
//  1. every limit whose match holds applies, minus the limits named in the
//     replaces of another applying limit (the most specific wins); when the
//     external block applies, the request first learns from the limits
//     service (or its cache) which bucket that limit is (external.go);
//  2. the enforcing limits are decided together with limiter.AllowAll, so a
//     request denied by any of them consumes from none (the most
//     restrictive wins); shadow limits are then decided on their own and
//     only counted. Global and hybrid limits are decided in Redis first,
//     with the request paused (distributed.go, lease.go, which state what
//     "consumes from none" still means then);
//  3. breakers guarding the request's cluster (or route) are checked; an
//     admitted request carries a ticket whose outcome is reported when the
//     stream ends, from the response code and its details;
//  4. concurrency limits (bulkheads) that apply take a slot each, given
//     back when the stream ends (concurrency.go).
//
// Tokens taken by a request that an open breaker then rejects stay taken,
// as with Envoy's own local rate limit filter in front of the router's
// circuit breaking.
//
// A limit's cost per request may come from a request header, and a limit
// with cost_from_response is charged again from the response headers
// (cost.go).
package filter

import (
	"fmt"
	"strings"
	"time"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/sluice-proxy/sluice/breaker"
	"github.com/sluice-proxy/sluice/filter/config"
	"github.com/sluice-proxy/sluice/filter/distributed"
	"github.com/sluice-proxy/sluice/filter/host"
	"github.com/sluice-proxy/sluice/limiter"
	"github.com/sluice-proxy/sluice/limiter/inflight"
	"github.com/sluice-proxy/sluice/limiter/store"
)

// NewVMContext returns the root of the plugin, registered from main's init.
func NewVMContext() types.VMContext { return NewVMContextWithClock(wallClock) }

// NewVMContextWithClock is NewVMContext with a time source, so native tests
// can step time exactly.
func NewVMContextWithClock(now func() time.Time) types.VMContext {
	return &vmContext{host: proxyHost(now)}
}

type vmContext struct {
	types.DefaultVMContext
	// host is every hostcall the filter makes (hostcalls.go).
	host host.Host
	// inflight is this VM's identity and holdings for concurrency limits,
	// shared by its plugin contexts so that streams of a context replaced
	// by a config reload are still kept alive and released. Nil until a
	// configuration has concurrency limits.
	inflight *inflight.Instance
	// ccInFlight counts this VM's requests holding a slot, per concurrency
	// limit name.
	ccInFlight map[string]*uint32
}

func (vm *vmContext) NewPluginContext(uint32) types.PluginContext {
	return &pluginContext{vm: vm, host: &vm.host, log: vm.host.Log, waiters: map[uint32]*httpContext{}, leaseWaiters: map[uint32]*httpContext{}}
}

type pluginContext struct {
	types.DefaultPluginContext
	vm   *vmContext
	host *host.Host
	log  host.Log
	cfg  *config.Config

	limits      []*limitRuntime
	breakers    []*breakerRuntime
	concurrency []*concurrencyRuntime
	// backend is nil unless some limit is global or hybrid.
	backend *distributed.Backend
	// external is nil without an external block; its limit is the last
	// of limits.
	external *externalRuntime
	requests host.Counter
	// matchNeeds is what any match reads of the request: each
	// pseudo-header it names costs one small read, and only a header match
	// costs the whole header map.
	matchNeeds requestNeeds

	// freeContexts are contexts of ended streams, for reuse.
	freeContexts []*httpContext

	// Scratch reused by every request of this worker; a VM runs one
	// callback at a time.
	keyBuf []byte
	// respHeaders and respBuf render rate-limit headers on allowed
	// responses without allocating.
	respHeaders [][2]string
	respBuf     []byte
	matched     []bool
	applied     []bool
	reqs        []limiter.Request
	reqLim      []*limitRuntime
	results     []limiter.Result
	// ccKeyBuf builds concurrency keys; nothing keeps them past a call.
	ccKeyBuf []byte
	// lastBeat is the last concurrency heartbeat.
	lastBeat time.Time

	// waiters are streams paused by on_limit delay, resumed from the tick.
	waiters map[uint32]*httpContext
	// leaseWaiters are streams waiting for a lease another call will fill.
	leaseWaiters map[uint32]*httpContext
	ticking      bool
	tickRunning  bool
}

// delayTick is how often paused requests are re-examined. A shaped request
// waits at most this much longer than it has to.
const delayTick = distributed.TickPeriod

func (p *pluginContext) OnPluginStart(int) types.OnPluginStartStatus {
	data, err := pluginConfiguration()
	if err != nil {
		p.log.Criticalf("sluice: reading plugin configuration: %v", err)
		return types.OnPluginStartStatusFailed
	}
	cfg, err := config.Parse(data)
	if err != nil {
		for _, line := range strings.Split(err.Error(), "\n") {
			p.log.Criticalf("sluice: invalid configuration: %s", line)
		}
		return types.OnPluginStartStatusFailed
	}
	if err := p.configure(cfg); err != nil {
		p.log.Criticalf("sluice: %v", err)
		return types.OnPluginStartStatusFailed
	}
	return types.OnPluginStartStatusOK
}

func (p *pluginContext) configure(cfg *config.Config) error {
	p.cfg = cfg
	p.requests = p.host.Metrics.Counter(metricRequests)
	for i := range cfg.Limits {
		path := config.IndexPath("limits", i)
		l, err := newLimitRuntime(p.host, &cfg.Limits[i], i, path)
		if err != nil {
			return err
		}
		if err := p.ensureBackend(l, config.FieldPath(path, "mode")); err != nil {
			return err
		}
		p.limits = append(p.limits, l)
		p.matchNeeds |= matchNeedsOf(&cfg.Limits[i].Match)
	}
	for i := range cfg.Breakers {
		b, err := newBreakerRuntime(p.host, &cfg.Breakers[i], i)
		if err != nil {
			return err
		}
		p.breakers = append(p.breakers, b)
		p.matchNeeds |= matchNeedsOf(&cfg.Breakers[i].Match)
	}
	if err := p.configureConcurrency(cfg); err != nil {
		return err
	}
	if cfg.External != nil {
		if err := p.configureExternal(cfg.External); err != nil {
			return err
		}
	}
	p.matched = make([]bool, len(p.limits))
	p.applied = make([]bool, len(p.limits))
	p.results = make([]limiter.Result, len(p.limits))
	return nil
}

func matchNeedsOf(m *config.Match) requestNeeds {
	var n requestNeeds
	if m.Path != "" || m.PathPrefix != "" {
		n |= needPath
	}
	if m.Methods != nil {
		n |= needMethod
	}
	if m.Hosts != nil {
		n |= needHost
	}
	if len(m.Headers) > 0 {
		n |= needHeaderMap
	}
	if m.Routes != nil {
		n |= needRoute
	}
	return n
}

// ensureBackend creates the backend the first time a global or hybrid
// limit needs it.
func (p *pluginContext) ensureBackend(l *limitRuntime, modePath string) error {
	if l.remote == nil || p.backend != nil {
		return nil
	}
	if p.cfg.Backend == nil {
		return fmt.Errorf("%s: %s needs a backend", modePath, l.cfg.Mode)
	}
	var err error
	p.backend, err = distributed.New(p.host, p.cfg.Backend, p.ensureTick, p.pollLeaseWaiters)
	return err
}

// NewHttpContext reuses the contexts of ended streams. A context is by far
// the largest allocation a request makes, and allocation volume is what
// drives the guest's garbage collector, whose work the allocating request
// pays for. The SDK calls no stream callback on a context after
// OnHttpStreamDone, but replies to calls the stream made can still arrive
// (a retry sent from the tick belongs to the plugin). Reuse is safe
// because OnHttpStreamDone cancels the stream's calls and drops it from
// every waiter map, and call callbacks also compare the generation, which
// keeps counting up across reuse.
func (p *pluginContext) NewHttpContext(contextID uint32) types.HttpContext {
	var h *httpContext
	if n := len(p.freeContexts); n > 0 {
		h = p.freeContexts[n-1]
		p.freeContexts[n-1] = nil
		p.freeContexts = p.freeContexts[:n-1]
		*h = httpContext{gen: h.gen + 1}
	} else {
		h = &httpContext{}
	}
	h.plugin, h.id, h.info.host = p, contextID, p.host.Stream
	h.tickets = h.ticketBuf[:0]
	return h
}

// maxFreeContexts bounds the contexts kept for reuse per worker: enough
// for the streams a worker ends between two of its new ones.
const maxFreeContexts = 64

func (p *pluginContext) recycle(h *httpContext) {
	if len(p.freeContexts) < maxFreeContexts {
		p.freeContexts = append(p.freeContexts, h)
	}
}

// limitRuntime is one configured limit with its tables: one for the
// default rate and one per override, each bounded by its slot count.
type limitRuntime struct {
	cfg       *config.Limit
	index     int
	def       *limiter.Table
	overrides map[string]*limiter.Table
	metrics   limitMetrics
	// keyKinds names the key's parts for logs ("client_ip+header:x-tenant"),
	// joined once here rather than on every rejection.
	keyKinds string
	// remote is nil for local limits.
	remote *remoteLimit
	// ext is set on the external block's limit only.
	ext *externalRuntime
	// tableSeen is what this worker's tables had counted at the last
	// export, so only the delta is added to the shared counters.
	tableSeen tableCounts
}

// newLimitRuntime builds limit index; ratePath is the configuration path of
// the object holding its rate, for errors. Parse has checked every rate
// against the limiter and the Redis scripts, so they are not expected.
func newLimitRuntime(hc *host.Host, cfg *config.Limit, index int, ratePath string) (*limitRuntime, error) {
	s := hc.Store
	l := &limitRuntime{cfg: cfg, index: index, metrics: defineLimitMetrics(hc.Metrics, cfg.Name)}
	l.metrics.cost = defineCostMetrics(hc.Metrics, cfg)
	kinds := make([]string, len(cfg.Key))
	for i, k := range cfg.Key {
		kinds[i] = k.String()
	}
	l.keyKinds = strings.Join(kinds, "+")
	var err error
	if cfg.Mode != config.ModeLocal {
		if l.remote, err = newRemoteLimit(cfg, ratePath); err != nil {
			return nil, err
		}
	}
	// The prefix and seed depend only on the name, so a config reload that
	// keeps the name keeps the state and the shared-data key set.
	l.def, err = newTable(s, cfg, cfg.Rate, "sluice.rl."+cfg.Name+".", cfg.Name)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", ratePath, err)
	}
	if len(cfg.Overrides) > 0 {
		l.overrides = make(map[string]*limiter.Table, len(cfg.Overrides))
		for value, rate := range cfg.Overrides {
			id := hexHash(value)
			t, err := newTable(s, cfg, rate, "sluice.rl."+cfg.Name+".o"+id+".", cfg.Name+"\x00"+value)
			if err != nil {
				return nil, fmt.Errorf("%s: %v", overridePath(ratePath, value), err)
			}
			l.overrides[value] = t
		}
	}
	return l, nil
}

// overridePath is the configuration path of the override for value.
func overridePath(limitPath, value string) string {
	return config.FieldPath(config.FieldPath(limitPath, "overrides"), value)
}

// newTable is a local table of cfg's algorithm and table size at rate r.
func newTable(s store.Store, cfg *config.Limit, r config.Rate, prefix, seedSource string) (*limiter.Table, error) {
	return limiter.NewTable(s, r.Limiter(cfg.Algorithm), limiter.TableConfig{
		Prefix:        prefix,
		Seed:          limiter.Hash(0, seedSource),
		Slots:         cfg.Slots,
		OverflowSlots: cfg.OverflowSlots,
	})
}

func (l *limitRuntime) table(overrideValue string) (*limiter.Table, config.Rate) {
	if t, ok := l.overrides[overrideValue]; ok {
		return t, l.cfg.Overrides[overrideValue]
	}
	return l.def, l.cfg.Rate
}

// tableCounts are the Stats of a limit's tables that become metrics.
type tableCounts struct{ evictions, overflow, overflowDenied uint64 }

// exportTableStats adds what this worker's tables of the limit counted
// since the last call to the limit's counters.
func (l *limitRuntime) exportTableStats() {
	var now tableCounts
	add := func(t *limiter.Table) {
		st := t.Stats()
		now.evictions += st.Evictions
		now.overflow += st.Overflow
		now.overflowDenied += st.OverflowDenied
	}
	add(l.def)
	for _, t := range l.overrides {
		add(t)
	}
	increment(l.metrics.evictions, now.evictions, l.tableSeen.evictions)
	increment(l.metrics.overflow, now.overflow, l.tableSeen.overflow)
	increment(l.metrics.overflowDenied, now.overflowDenied, l.tableSeen.overflowDenied)
	l.tableSeen = now
}

func increment(c host.Counter, total, seen uint64) {
	if total > seen {
		c.Increment(total - seen)
	}
}

// hexHash names a key by its limiter.Hash, for shared-data and Redis key
// names that must stay short and printable whatever the key holds.
func hexHash(s string) string {
	const digits = "0123456789abcdef"
	v := limiter.Hash(0, s)
	b := make([]byte, 16)
	for i := 15; i >= 0; i-- {
		b[i] = digits[v&0xf]
		v >>= 4
	}
	return string(b)
}

// breakerRuntime is one configured breaker; it keeps one breaker.Breaker
// per cluster (or route) it has seen, all sharing the same state machine.
type breakerRuntime struct {
	cfg       *config.Breaker
	machine   *breaker.Machine
	store     store.Store
	log       host.Log
	instances map[string]*breaker.Breaker
	metrics   breakerMetrics
	// slowIsFailure makes a slow call count toward the consecutive-failure
	// threshold when no failure rate is configured to weigh it against.
	slowIsFailure bool
}

// maxBreakerInstances bounds the shared-data keys one breaker can create;
// cluster and route names come from configuration, so this is only hit by
// a misconfiguration, and then the overflow shares one instance.
const maxBreakerInstances = 1024

func newBreakerRuntime(hc *host.Host, cfg *config.Breaker, index int) (*breakerRuntime, error) {
	set := breaker.Settings{
		FailureThreshold:    uint32(cfg.FailureThreshold),
		SuccessThreshold:    uint32(cfg.SuccessThreshold),
		OpenTimeout:         cfg.OpenTimeout,
		HalfOpenMaxRequests: uint32(cfg.HalfOpenMaxRequests),
	}
	switch cfg.Mode {
	case config.BreakerMetricsOnly:
		set.Mode = breaker.ModeMetricsOnly
	case config.BreakerForcedOpen:
		set.Mode = breaker.ModeForcedOpen
	case config.BreakerDisabled:
		set.Mode = breaker.ModeDisabled
	default:
		set.Mode = breaker.ModeEnforce
	}
	b := &breakerRuntime{cfg: cfg, store: hc.Store, log: hc.Log, instances: map[string]*breaker.Breaker{}, metrics: defineBreakerMetrics(hc.Metrics, cfg.Name)}
	if fr := cfg.FailureRate; fr != nil {
		set.FailureRatePercent = uint32(fr.ThresholdPercent)
		set.Window.MinimumCalls = uint32(fr.MinimumCalls)
		if fr.WindowType == config.TimeWindow {
			set.Window.Type = breaker.WindowTime
			set.Window.Duration = fr.WindowDuration
		} else {
			set.Window.Size = uint32(fr.Window)
		}
		if sc := cfg.SlowCall; sc != nil {
			set.SlowCallDuration = sc.Duration
			set.SlowCallPercent = uint32(sc.ThresholdPercent)
		}
	} else if cfg.SlowCall != nil {
		b.slowIsFailure = true
	}
	m, err := breaker.NewMachine(set)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", config.IndexPath("breakers", index), err)
	}
	b.machine = m
	return b, nil
}

func (b *breakerRuntime) instance(scope string) *breaker.Breaker {
	if br, ok := b.instances[scope]; ok {
		return br
	}
	if len(b.instances) >= maxBreakerInstances {
		scope = "overflow"
		if br, ok := b.instances[scope]; ok {
			return br
		}
	}
	br := breaker.NewBreaker(b.machine, b.store, "sluice.cb."+b.cfg.Name+"."+scope)
	if err := br.Init(); err != nil {
		b.log.Warnf("sluice: breaker %s: %v", b.cfg.Name, err)
	}
	b.instances[scope] = br
	return br
}

// recordTransition keeps the shared state gauge and counters in step.
func (b *breakerRuntime) recordTransition(tr breaker.Transition) {
	switch tr {
	case breaker.Opened, breaker.Reopened:
		b.metrics.opens.Increment(1)
		b.metrics.setState(breaker.Open)
	case breaker.Recovered:
		b.metrics.closes.Increment(1)
		b.metrics.setState(breaker.Closed)
	case breaker.HalfOpened:
		b.metrics.setState(breaker.HalfOpen)
	}
}

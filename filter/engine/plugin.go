package engine

import (
	"fmt"
	"github.com/sluice-proxy/sluice/filter/external"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/sluice-proxy/sluice/filter/config"
	"github.com/sluice-proxy/sluice/filter/distributed"
	"github.com/sluice-proxy/sluice/filter/host"
	"github.com/sluice-proxy/sluice/filter/request"
	"github.com/sluice-proxy/sluice/limiter"
	"github.com/sluice-proxy/sluice/limiter/inflight"
	"github.com/sluice-proxy/sluice/limiter/store"
)

// VM is the state one worker VM shares between its plugins, so that a
// plugin replaced by a configuration reload still serves its draining
// streams.
type VM struct {
	// host is every hostcall the engine makes.
	host host.Host
	// inflight is this VM's identity and holdings for concurrency limits,
	// shared by its plugins so that streams of a plugin replaced by a
	// config reload are still kept alive and released. Nil until a
	// configuration has concurrency limits.
	inflight *inflight.Instance
	// ccInFlight counts this VM's requests holding a slot, per concurrency
	// limit name.
	ccInFlight map[string]*uint32
}

// NewVM is the engine of one worker VM over its host.
func NewVM(hc host.Host) *VM { return &VM{host: hc} }

// NewPlugin is a plugin of the VM, to be configured with Start.
func (vm *VM) NewPlugin() *Plugin {
	return &Plugin{vm: vm, host: &vm.host, request: vm.host.Stream, log: vm.host.Log, waiting: map[uint32]*Stream{}}
}

// Begin makes s the stream id of the plugin: s is a new Stream, or one
// whose Done has run, reused. Reuse is safe because Done cancels the
// stream's calls and drops it from the waiters, and call callbacks also
// compare the generation, which keeps counting up across reuse.
func (p *Plugin) Begin(h *Stream, id uint32) {
	roll := h.roll[:0] // kept: its backing array serves the next stream
	*h = Stream{gen: h.gen + 1, roll: roll}
	h.plugin, h.id = p, id
	var clientCfg *config.ClientIP
	if p.cfg != nil {
		clientCfg = &p.cfg.ClientIP
	}
	h.info.Start(p.request, clientCfg, &p.matchScratch)
	h.breakers.tickets = h.breakers.ticketBuf[:0]
}

// Plugin is one configured plugin of a worker: its limits, breakers and
// concurrency limits, and the streams waiting.
type Plugin struct {
	vm   *VM
	host *host.Host
	// request is host.Stream as the host.Request every stream reads,
	// converted once: converting it per stream is an itab lookup in the
	// guest on every request.
	request host.Request
	log     host.Log
	cfg     *config.Config
	// denial is the refusal of the last outDeny outcome (outcome.go): a
	// VM runs one callback at a time, and the pipeline reads it before
	// another stage runs.
	denial denial
	// keyed is what limitKey found of the limit being prepared, here
	// rather than returned: Go on wasm copies a struct this size with a
	// bulk memory call.
	keyed limitKeyed

	limits      []*limitRuntime
	breakers    []*breakerRuntime
	concurrency []*concurrencyRuntime
	// backend is nil unless some limit is global or hybrid.
	backend *distributed.Backend
	// external is nil without an external block; its limit is the last
	// of limits.
	external *externalRuntime
	// admin is nil unless the admin route is configured (admin.go).
	admin    *adminRuntime
	requests host.Counter
	deadline deadlineMetrics
	// matchNeeds is what any match reads of the request: each
	// pseudo-header it names costs one small read, and only a header match
	// costs the whole header map.
	matchNeeds request.Needs

	// Scratch reused by every request of this worker; a VM runs one
	// callback at a time.
	keyBuf []byte
	// matchScratch holds a value while a condition reads it: a decoded query
	// value, a repeated header joined, rendered metadata.
	matchScratch []byte
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

	// inFallback is set while this worker's remote limits fall back to
	// their failure_policy (remote.go).
	inFallback bool

	// rollouts is set when some limit has a partial rollout to draw.
	rollouts bool

	// idle is set when the configuration has no limit, breaker or
	// concurrency limit: a request then skips the pipeline.
	idle bool
	// routeHeader is external.route_header: removed from every request
	// the client sends it in, even an idle plugin's; "" when unset.
	routeHeader string

	// waiting is the registry of paused streams (waiting.go).
	waiting     map[uint32]*Stream
	ticking     bool
	tickRunning bool
}

// delayTick is how often paused requests are re-examined. A shaped request
// waits at most this much longer than it has to.
const delayTick = distributed.TickPeriod

// Start configures the plugin from its JSON configuration; false, with
// every error logged, when the configuration is refused.
func (p *Plugin) Start(data []byte) bool {
	cfg, err := config.Parse(data)
	if err != nil {
		for _, line := range strings.Split(err.Error(), "\n") {
			p.log.Criticalf("sluice: invalid configuration: %s", line)
		}
		return false
	}
	if err := p.configure(cfg); err != nil {
		p.log.Criticalf("sluice: %v", err)
		return false
	}
	return true
}

func (p *Plugin) configure(cfg *config.Config) error {
	p.cfg = cfg
	p.requests = p.host.Metrics.Counter(metricRequests)
	p.deadline = defineDeadlineMetrics(p.host.Metrics)
	for i := range cfg.Limits {
		if cfg.Limits[i].Disabled {
			p.limits = append(p.limits, newDisabledLimit(p.host, &cfg.Limits[i], i))
			continue
		}
		path := config.IndexPath("limits", i)
		l, err := newLimitRuntime(p.host, &cfg.Limits[i], i, path)
		if err != nil {
			return err
		}
		if err := p.ensureBackend(l, config.FieldPath(path, "mode")); err != nil {
			return err
		}
		p.limits = append(p.limits, l)
		p.rollouts = p.rollouts || !l.rollout.full()
		p.matchNeeds |= request.NeedsOf(&cfg.Limits[i].Match)
	}
	for i := range cfg.Breakers {
		if cfg.Breakers[i].Disabled {
			defineDisabledBreaker(p.host, &cfg.Breakers[i])
			continue
		}
		b, err := newBreakerRuntime(p.host, &cfg.Breakers[i], i)
		if err != nil {
			return err
		}
		p.breakers = append(p.breakers, b)
		p.matchNeeds |= request.NeedsOf(&cfg.Breakers[i].Match)
	}
	if err := p.configureConcurrency(cfg); err != nil {
		return err
	}
	if cfg.External != nil {
		if err := p.configureExternal(cfg.External); err != nil {
			return err
		}
		p.routeHeader = cfg.External.RouteHeader
	}
	if cfg.Admin != nil {
		var err error
		if p.admin, err = newAdminRuntime(p.host, cfg.Admin); err != nil {
			return err
		}
	}
	for _, l := range p.limits {
		l.nearLeft = perMillionAll - int64(config.PerMillion(100*cfg.Response.NearLimitRatio))
	}
	p.idle = enabledLimits(p.limits) == 0 && len(p.breakers) == 0 && len(p.concurrency) == 0
	p.matched = make([]bool, len(p.limits))
	p.applied = make([]bool, len(p.limits))
	p.results = make([]limiter.Result, len(p.limits))
	return nil
}

// ensureBackend creates the backend the first time a global or hybrid
// limit needs it.
func (p *Plugin) ensureBackend(l *limitRuntime, modePath string) error {
	if l.remote == nil || p.backend != nil {
		return nil
	}
	if p.cfg.Backend == nil {
		return fmt.Errorf("%s: %s needs a backend", modePath, l.cfg.Mode)
	}
	var err error
	p.backend, err = distributed.New(p.host, p.cfg.Backend, p.ensureTick, func(now time.Time) { p.poll(waitLease, now) })
	return err
}

// limitRuntime is one configured limit with its tables: one for the
// default rate and one per override, each bounded by its slot count.
type limitRuntime struct {
	cfg       *config.Limit
	index     int
	def       *limiter.Table
	overrides map[string]overrideTable
	metrics   limitMetrics
	// keyKinds names the key's parts for logs ("client_ip+header:x-tenant"),
	// joined once here rather than on every rejection.
	keyKinds string
	// remote is nil for local limits.
	remote *remoteLimit
	// ext is set on the external block's limit only.
	ext     *externalRuntime
	rollout rollout
	// nearLeft is 1 - response.near_limit_ratio in millionths: an
	// admission leaving at most this share of the capacity is near_limit.
	nearLeft int64
	// disabled ("enabled": false) has metrics only: no table, no remote.
	disabled bool
	// tableSeen is what this worker's tables had counted at the last
	// export, so only the delta is added to the shared counters.
	tableSeen tableCounts
	// headerConsts are the rate-limit header values that are the same on
	// every response this limit decides at its configured rate.
	headerConsts *quotaConsts
	// rule is the rate ruleLim as the access log shows it, rendered by
	// ruleOf for the last refusal that needed it.
	rule    string
	ruleLim limiter.Limit
}

// newLimitRuntime builds limit index; ratePath is the configuration path of
// the object holding its rate, for errors. Parse has checked every rate
// against the limiter and the Redis scripts, so they are not expected.
func newLimitRuntime(hc *host.Host, cfg *config.Limit, index int, ratePath string) (*limitRuntime, error) {
	s := hc.Store
	l := &limitRuntime{cfg: cfg, index: index, metrics: defineLimitMetrics(hc.Metrics, cfg.Name), rollout: rolloutOf(cfg)}
	l.metrics.cost = defineCostMetrics(hc.Metrics, cfg)
	defineRateGauges(hc.Metrics, cfg)
	l.keyKinds = keyKindsOf(cfg.Key)
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
	def := l.def.Limit()
	l.headerConsts = renderQuotaConsts(cfg.Name, def.Rate, def.Period)
	if len(cfg.Overrides) > 0 {
		l.overrides = make(map[string]overrideTable, len(cfg.Overrides))
		for value, rate := range cfg.Overrides {
			id := hexHash(value)
			t, err := newTable(s, cfg, rate, "sluice.rl."+cfg.Name+".o"+id+".", cfg.Name+"\x00"+value)
			if err != nil {
				return nil, fmt.Errorf("%s: %v", overridePath(ratePath, value), err)
			}
			l.overrides[value] = overrideTable{table: t, rate: rate, value: value}
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
		ForgetMaxUsed: forgetMaxUsed(cfg.ForgetMaxUsed),
	})
}

// forgetMaxUsed is the config's forget_max_used for limiter.TableConfig,
// where 0 is the default and forgetting nothing is ForgetNone.
func forgetMaxUsed(n int64) int64 {
	if n == 0 {
		return limiter.ForgetNone
	}
	return n
}

// overrideTable is the table of one override; value is its key in the
// configuration.
type overrideTable struct {
	table *limiter.Table
	rate  config.Rate
	value string
}

// table is the table and rate for a request whose override_by part is
// overrideValue. The value it returns for a request to keep is the
// configuration's own string, "" when no override matched: overrideValue
// itself may view host memory that is only valid until the callback
// returns, while a request keeps its value until its response or its
// Redis reply (pendingCharge, remoteReq).
func (l *limitRuntime) table(overrideValue string) (*limiter.Table, config.Rate, string) {
	// Most limits have no overrides: no map call then, which in the
	// guest is a call even on a nil map.
	if l.overrides != nil {
		if o, ok := l.overrides[overrideValue]; ok {
			return o.table, o.rate, o.value
		}
	}
	return l.def, l.cfg.Rate, ""
}

// tableCounts are the Stats of a limit's tables that become metrics.
type tableCounts struct{ evictions, overflow, overflowDenied, forgotten uint64 }

// exportTableStats adds what this worker's tables of the limit counted
// since the last call to the limit's counters.
func (l *limitRuntime) exportTableStats() {
	var now tableCounts
	add := func(t *limiter.Table) {
		st := t.Stats()
		now.evictions += st.Evictions
		now.overflow += st.Overflow
		now.overflowDenied += st.OverflowDenied
		now.forgotten += st.Forgotten
	}
	add(l.def)
	if l.overrides != nil { // as in table: no iterator over a nil map
		for _, o := range l.overrides {
			add(o.table)
		}
	}
	increment(l.metrics.evictions, now.evictions, l.tableSeen.evictions)
	increment(l.metrics.overflow, now.overflow, l.tableSeen.overflow)
	increment(l.metrics.overflowDenied, now.overflowDenied, l.tableSeen.overflowDenied)
	increment(l.metrics.forgotten, now.forgotten, l.tableSeen.forgotten)
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

// admitted counts an admission by l under lim, and near_limit when it
// left at most (1 - near_limit_ratio) of lim's capacity.
func (l *limitRuntime) admitted(lim limiter.Limit, res limiter.Result) {
	l.metrics.allowed.Increment(1)
	// In millionths, so 20% of 10 is 2 exactly, which 1-0.8 in floating
	// point is not. Capacities stay below 2^33, far from overflowing.
	if res.Remaining*perMillionAll <= lim.Capacity()*l.nearLeft {
		l.metrics.nearLimit.Increment(1)
	}
}

// quotaOf describes a decision for the rate-limit headers. The window comes
// from the result, so an override with its own window reports that one.
func (l *limitRuntime) quotaOf(res limiter.Result) quota {
	window := res.Period
	if window == 0 {
		window = l.cfg.Rate.Window // a contention or store-error result
	}
	return quota{
		applies:    true,
		name:       l.cfg.Name,
		limit:      res.Limit,
		window:     window,
		remaining:  res.Remaining,
		retryAfter: res.RetryAfter,
		resetAfter: res.ResetAfter,
		consts:     l.headerConsts,
	}
}

// A switched-off entry ("enabled": false) gets its metrics defined, so a
// dashboard sees it at zero rather than missing, and nothing else: no
// table, no Redis backend, no breaker state, no heartbeat.

// newDisabledLimit keeps limit index's place in Plugin.limits, whose
// positions are the indexes replaces refers to; matchLimits never applies
// it, so it is neither evaluated nor counted and does not replace others.
func newDisabledLimit(hc *host.Host, cfg *config.Limit, index int) *limitRuntime {
	l := &limitRuntime{cfg: cfg, index: index, disabled: true, metrics: defineLimitMetrics(hc.Metrics, cfg.Name)}
	l.metrics.cost = defineCostMetrics(hc.Metrics, cfg)
	return l
}

// defineDisabledBreaker defines the breaker's metrics with its state gauge
// at closed (0): a breaker switched off on a reload must not keep showing
// the open state it had.
func defineDisabledBreaker(hc *host.Host, cfg *config.Breaker) {
	defineBreakerMetrics(hc.Metrics, cfg.Name).setState(0)
}

// defineDisabledConcurrency defines the limit's metrics with nothing in
// flight.
func defineDisabledConcurrency(hc *host.Host, cfg *config.ConcurrencyLimit) {
	defineConcurrencyMetrics(hc.Metrics, cfg.Name).setInFlight(0)
}

// enabledConcurrency is how many concurrency limits are switched on.
func enabledConcurrency(cfg *config.Config) int {
	n := 0
	for i := range cfg.Concurrency {
		if !cfg.Concurrency[i].Disabled {
			n++
		}
	}
	return n
}

// enabledLimits is how many of the runtimes are switched on.
func enabledLimits(limits []*limitRuntime) int {
	n := 0
	for _, l := range limits {
		if !l.disabled {
			n++
		}
	}
	return n
}

// arenaString views key bytes as a string without a copy. For the worker's
// key arena that is safe only until the next evaluation overwrites it:
// limiter tables hash keys and do not keep them, and a request that waits
// for Redis copies its local keys first (startRemote).
func arenaString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

// logRejection writes one JSON line per rejection. It names the key's
// kinds, never its values: client addresses are personal data and do not
// belong in proxy logs by default.
func (l *limitRuntime) logRejection(log host.Log, event string, res limiter.Result) {
	b := appendRejectionLog(make([]byte, 0, 160), event, l.cfg.Name, l.keyKinds)
	b = append(b, `,"limit_value":`...)
	b = strconv.AppendInt(b, res.Limit, 10)
	b = append(b, `,"retry_after":`...)
	b = strconv.AppendInt(b, retryAfterSeconds(res.RetryAfter), 10)
	b = append(b, '}')
	log.Info(string(b))
}

// Stream is one request: what the engine read of it and decided for it.
// The adapter keeps one per HTTP context and reuses it (Plugin.Begin).
type Stream struct {
	plugin *Plugin
	id     uint32
	info   request.Info

	start time.Time
	// quota is the most restrictive applied limit, for headers on the
	// allowed response; quota.applies is false when no enforcing limit
	// applied.
	quota quota
	// phase says whether the filter answered the request itself, whether
	// it goes on only to be hidden (admin), and whether the stream has
	// ended.
	phase phase

	// trace, when set, receives an account of the request's decisions
	// (trace.go); nil on every stream the filter serves.
	trace *Trace

	// wait is what the paused stream waits for in the plugin's registry
	// of waiting streams (waiting.go), and its delay.
	wait streamWait

	// breakers are the request's breaker tickets and what its response
	// tells them (breakers.go).
	breakers breakerHold
	// remote are its global and hybrid decisions in progress (remote.go).
	remote remoteWait
	// gen changes when the stream ends or is re-evaluated, so replies to
	// calls of an earlier evaluation are ignored.
	gen uint32

	// cc are the concurrency slots the request holds (concurrency.go).
	cc ccHolds
	// charges are what the response still owes the cost_from_response
	// limits that admitted the request (cost.go).
	charges charges
	// ext is this request's lookup of the external limit (external.go).
	ext external.Request
	// roll are the request's rollout draws by limit index, drawn once
	// (rollout.go); empty when no limit has a partial rollout.
	roll rollDraws
}

// phase is where a stream is in its life, as its callbacks need it.
type phase uint8

const (
	phaseOpen phase = iota
	// phaseAnswered: this filter answered the request itself, so the
	// response phase neither decorates nor reports it.
	phaseAnswered
	// phaseAdminDenied: an admin request that failed the admin checks. It
	// is limited as any request and, where it would go on, answered 404
	// (admin.go): a preview of the breakers, never a ticket.
	phaseAdminDenied
	// phaseDone: the stream ended; replies to its calls still to come
	// are ignored.
	phaseDone
)

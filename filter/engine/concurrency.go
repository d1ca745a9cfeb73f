package engine

// Concurrency limits (bulkheads): at most max_in_flight requests of one key
// in flight at once, across every worker of the Envoy.
//
// A request takes its slots after the rate limits and the breakers have
// admitted it, so a request they reject never holds a slot; and it takes
// them from every applying concurrency limit in config order, giving back
// the ones already taken when a later one rejects. Rate-limit tokens and
// half-open probes of a request that a concurrency limit then rejects stay
// taken, as when Envoy's own rate limit filter runs in front of the
// router's max_requests circuit breaker. The slots are given back when the
// stream ends (proxy_on_log), however it ends.
//
// Counts live in shared data (limiter/inflight), one entry per VM
// instance, so a VM that traps mid-request (failure_policy FAIL_RELOAD, or
// any VM failure) cannot leak its slots: its entries stop counting
// ccStaleAfter after its last heartbeat. The heartbeat is the plugin's
// tick, which runs every heartbeatEvery whenever concurrency limits are
// configured and rewrites entries older than ccRefreshAfter.

import (
	"fmt"
	"strconv"
	"time"

	"github.com/sluice-proxy/sluice/filter/config"
	"github.com/sluice-proxy/sluice/filter/host"
	"github.com/sluice-proxy/sluice/filter/request"
	"github.com/sluice-proxy/sluice/limiter"
	"github.com/sluice-proxy/sluice/limiter/inflight"
)

// Heartbeat timing; see limiter/inflight for the bounds they give. A VM
// that dies stops holding slots at most ccStaleAfter after it died; a live
// VM is only mistaken for dead if its tick is late by more than
// ccStaleAfter − ccRefreshAfter − heartbeatEvery (7s).
const (
	heartbeatEvery = time.Second
	ccStaleAfter   = 10 * time.Second
	ccRefreshAfter = 2 * time.Second
)

const messageConcurrencyLimited = "Too many concurrent requests"

// concurrencyRuntime is one configured concurrency limit in one VM.
type concurrencyRuntime struct {
	cfg *config.ConcurrencyLimit
	// ruleText is the limit's rule as the access log shows it.
	ruleText string
	table    *inflight.Table
	// tallyKey is the shared-data record of every VM's in-flight total,
	// for the in_flight gauge.
	tallyKey string
	keyKinds string
	metrics  concurrencyMetrics
	log      host.Log
	// inFlight is this VM's requests holding a slot of a limit of this
	// name. It is per VM, not per plugin context, so that the tally a
	// context replaced by a config reload still reports for its draining
	// streams and the one of its successor agree.
	inFlight *uint32
	// reclaimedSeen is the part of the table's Reclaimed already exported.
	reclaimedSeen uint64
}

// ccHolds are the slots one request holds; buf backs the common case
// without an allocation.
type ccHolds struct {
	held []ccHold
	buf  [2]ccHold
}

// ccHold is a slot one request holds.
type ccHold struct {
	c    *concurrencyRuntime
	slot inflight.Slot
	// over marks a shadow limit's slot taken past max_in_flight.
	over bool
}

func newConcurrencyRuntime(hc *host.Host, cfg *config.ConcurrencyLimit, index int) (*concurrencyRuntime, error) {
	// Prefix and seed depend only on the name, so a config reload that
	// keeps the name and the key parts keeps counting the requests already
	// in flight. Changing the key parts under the same name starts new
	// counts: until the old requests end, the limit under-counts them.
	prefix := "sluice.cc." + cfg.Name + "."
	t, err := inflight.NewTable(hc.Store, inflight.TableConfig{Prefix: prefix, Seed: limiter.Hash(0, "cc\x00"+cfg.Name)})
	if err != nil {
		return nil, fmt.Errorf("%s: %v", config.IndexPath("concurrency", index), err)
	}
	defineMaxInFlightGauge(hc.Metrics, cfg)
	return &concurrencyRuntime{cfg: cfg, table: t, tallyKey: prefix + "total",
		keyKinds: keyKindsOf(cfg.Key), metrics: defineConcurrencyMetrics(hc.Metrics, cfg.Name), log: hc.Log,
		ruleText: "max_in_flight " + strconv.FormatInt(cfg.MaxInFlight, 10)}, nil
}

// configureConcurrency builds the runtimes and starts the heartbeat.
func (p *Plugin) configureConcurrency(cfg *config.Config) error {
	for i := range cfg.Concurrency {
		if cfg.Concurrency[i].Disabled {
			defineDisabledConcurrency(p.host, &cfg.Concurrency[i])
		}
	}
	if enabledConcurrency(cfg) == 0 {
		return nil
	}
	if p.vm.inflight == nil {
		in, err := inflight.NewInstance(p.host.Store, inflight.InstanceConfig{StaleAfter: ccStaleAfter, RefreshAfter: ccRefreshAfter})
		if err != nil {
			return err
		}
		p.vm.inflight = in
	}
	for i := range cfg.Concurrency {
		if cfg.Concurrency[i].Disabled {
			continue
		}
		c, err := newConcurrencyRuntime(p.host, &cfg.Concurrency[i], i)
		if err != nil {
			return err
		}
		if p.vm.ccInFlight == nil {
			p.vm.ccInFlight = map[string]*uint32{}
		}
		if p.vm.ccInFlight[c.cfg.Name] == nil {
			p.vm.ccInFlight[c.cfg.Name] = new(uint32)
		}
		c.inFlight = p.vm.ccInFlight[c.cfg.Name]
		p.concurrency = append(p.concurrency, c)
		p.matchNeeds |= request.NeedsOf(&cfg.Concurrency[i].Match)
	}
	if err := p.host.Ticker.SetTick(p.idleTick()); err != nil {
		return fmt.Errorf("starting the concurrency heartbeat: %v", err)
	}
	return nil
}

// idleTick is the tick period when nothing waits for the fast tick: the
// heartbeat's with concurrency limits, none otherwise.
func (p *Plugin) idleTick() time.Duration {
	if len(p.concurrency) > 0 {
		return heartbeatEvery
	}
	return 0
}

// acquire takes a slot of every concurrency limit of p that applies to
// request info, or gives back what it took and rejects the request.
func (cc *ccHolds) acquire(p *Plugin, info *request.Info, tr *Trace, now time.Time) outcome {
	match := info.View(p.matchNeeds)
	ns := now.UnixNano()
	for _, c := range p.concurrency {
		if !request.Matches(&c.cfg.Match, match) {
			continue
		}
		key, _, ok := info.AppendKey(p.ccKeyBuf[:0], c.cfg.Key, &p.cfg.ClientIP, -1)
		p.ccKeyBuf = key
		if tr != nil {
			tr.Concurrency = append(tr.Concurrency, ConcurrencyTrace{Name: c.cfg.Name, Key: string(key), KeyOK: ok})
		}
		if !ok {
			c.metrics.missingKey.Increment(1)
			if info.Ambiguous && !c.cfg.Shadow {
				// Refused, as a rate limit refuses it (Info.AppendKey).
				cc.release(p, now)
				c.logRejection("ambiguous_key", inflight.Result{})
				ct, body := missingKeyBody(p.cfg.Response.Body, c.cfg.Name, c.cfg.Status)
				return rejectWith(&reply{kind: config.ReplyMissingKey, values: replyValues{limit: c.cfg.Name}, status: c.cfg.Status, contentType: ct, body: body, rule: c.rule()})
			}
			continue
		}
		// The table hashes the key and keeps nothing of it.
		res, slot, err := c.table.Acquire(p.vm.inflight, arenaString(key), c.cfg.MaxInFlight, !c.cfg.Shadow, ns)
		if err != nil {
			p.log.Warnf("sluice: concurrency %s: %v", c.cfg.Name, err)
		}
		c.exportReclaimed()
		if tr != nil {
			tr.Concurrency[len(tr.Concurrency)-1].Allowed = res.Allowed
		}
		if res.Taken {
			*c.inFlight++
			if cc.held == nil {
				cc.held = cc.buf[:0]
			}
			cc.held = append(cc.held, ccHold{c: c, slot: slot, over: !res.Allowed})
		}
		switch {
		case res.Allowed:
		case c.cfg.Shadow:
			c.metrics.shadowRejected.Increment(1)
			c.logRejection("shadow_concurrency_limited", res)
			attribute(p.host.Stream, p.log, "shadow_concurrency_limited", c.cfg.Name, c.rule())
		default:
			c.metrics.rejected.Increment(1)
			cc.release(p, now)
			c.logRejection("concurrency_limited", res)
			ct, body := concurrencyLimitedBody(p.cfg.Response.Body, c.cfg.Name, c.cfg.Status)
			return rejectWith(&reply{kind: config.ReplyConcurrencyLimited, values: replyValues{limit: c.cfg.Name, maxInFlight: c.cfg.MaxInFlight},
				status: c.cfg.Status, contentType: ct, body: body, rule: c.rule()})
		}
	}
	// Counted only now: a slot given back because a later limit rejected
	// was not an admission.
	for _, held := range cc.held {
		if !held.over {
			held.c.metrics.admitted.Increment(1)
		}
	}
	return allow
}

// release gives back every slot the request holds.
func (cc *ccHolds) release(p *Plugin, now time.Time) {
	if len(cc.held) == 0 {
		return
	}
	in := p.vm.inflight
	for _, held := range cc.held {
		if err := in.Release(held.slot, now.UnixNano()); err != nil {
			p.log.Warnf("sluice: concurrency %s: release left to the heartbeat: %v", held.c.cfg.Name, err)
		}
		*held.c.inFlight--
		held.c.exportReclaimed()
	}
	cc.held = cc.held[:0]
}

// concurrencyTick is the heartbeat: it keeps this VM's entries fresh and
// sets the in_flight gauges from every live VM's totals.
func (p *Plugin) concurrencyTick(now time.Time) {
	// A clock that went back beats at once, so that entries stamped ahead
	// of the new time are rewritten before readers find them impossible.
	if since := now.Sub(p.lastBeat); len(p.concurrency) == 0 || (since >= 0 && since < heartbeatEvery) {
		return
	}
	p.lastBeat = now
	ns := now.UnixNano()
	if err := p.vm.inflight.Refresh(ns); err != nil {
		p.log.Warnf("sluice: concurrency heartbeat: %v", err)
	}
	for _, c := range p.concurrency {
		total, err := p.vm.inflight.Report(c.tallyKey, *c.inFlight, ns)
		if err != nil {
			p.log.Warnf("sluice: concurrency %s: tally: %v", c.cfg.Name, err)
		}
		c.metrics.setInFlight(total)
		c.exportReclaimed()
	}
}

// exportReclaimed adds to the reclaimed counter the slots of dead VMs this
// VM's writes dropped since the last call.
func (c *concurrencyRuntime) exportReclaimed() {
	if r := c.table.Stats().Reclaimed; r > c.reclaimedSeen {
		c.metrics.reclaimed.Increment(r - c.reclaimedSeen)
		c.reclaimedSeen = r
	}
}

// logRejection writes one JSON line, naming the key's kinds but never its
// values, like the rate-limit rejections.
func (c *concurrencyRuntime) logRejection(event string, res inflight.Result) {
	b := appendRejectionLog(make([]byte, 0, 160), event, c.cfg.Name, c.keyKinds)
	b = append(b, `,"max_in_flight":`...)
	b = strconv.AppendInt(b, c.cfg.MaxInFlight, 10)
	b = append(b, `,"in_flight":`...)
	b = strconv.AppendInt(b, res.InFlight, 10)
	if res.Reason != inflight.ReasonLimited && res.Reason != inflight.ReasonNone {
		// Not a full bulkhead: the count could not be read or written.
		b = append(b, `,"reason":`...)
		b = appendJSONString(b, res.Reason.String())
	}
	c.log.Info(string(append(b, '}')))
}

// concurrencyLimitedBody renders the rejection of a full bulkhead. It has
// no retry_after: a slot frees when any request in flight ends, which
// nothing here can predict.
func concurrencyLimitedBody(format config.Body, limitName string, status int) (contentType string, body []byte) {
	return rejection{
		code: "concurrency_limited", message: messageConcurrencyLimited,
		problemType: problemReducedCapacity, title: titleTemporaryReduction,
		field: "limit", value: limitName, noRetryAfter: true,
	}.render(format, status, 0)
}

// rule is the limit's rule as the access log shows it.
func (c *concurrencyRuntime) rule() string { return c.ruleText }

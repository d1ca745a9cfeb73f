package engine

// Rollout: a limit's enabled_percent and enforced_percent are drawn once
// per request, before its first evaluation, so a request re-evaluated
// after a delay or a lookup keeps its draws. A limit not enabled for the
// request is as if it did not match (it is not counted and replaces no
// other limit); one not enforced is evaluated like a shadow limit.

import (
	"math/rand/v2"

	"github.com/sluice-proxy/sluice/filter/config"
)

// perMillionAll is a whole fraction in the draws' resolution.
const perMillionAll = 1_000_000

// rollFlags are one limit's draws for one request.
type rollFlags uint8

const (
	rollSkipped rollFlags = 1 << iota
	rollUnenforced
)

// rollDraws are one request's draws, by limit index; empty when no limit
// has a partial rollout.
type rollDraws []rollFlags

// rollout is a limit's rollout in millionths.
type rollout struct{ enabled, enforced uint32 }

func rolloutOf(cfg *config.Limit) rollout {
	return rollout{
		enabled:  config.PerMillion(cfg.Rollout.EnabledPercent),
		enforced: config.PerMillion(cfg.Rollout.EnforcedPercent),
	}
}

func (r rollout) full() bool { return r.enabled == perMillionAll && r.enforced == perMillionAll }

// draw is true for perMillion of a million draws. The whole fractions
// draw nothing, so a limit without a rollout costs no random number.
func (p *Plugin) draw(perMillion uint32) bool {
	switch perMillion {
	case 0:
		return false
	case perMillionAll:
		return true
	}
	var r uint64
	if p.host.Rand != nil {
		r = p.host.Rand()
	} else {
		r = rand.Uint64()
	}
	// The modulo's bias is below 1e-13: 2^64 is not a multiple of a
	// million by a remainder that small against 2^64.
	return r%perMillionAll < uint64(perMillion)
}

// draw draws the request's rollout of every limit of p.
func (d *rollDraws) draw(p *Plugin) {
	*d = (*d)[:0]
	for _, l := range p.limits {
		var f rollFlags
		switch {
		case !p.draw(l.rollout.enabled):
			f = rollSkipped
		case !p.draw(l.rollout.enforced):
			f = rollUnenforced
		}
		*d = append(*d, f)
	}
}

// skipped reports that limit i is not enabled for the request.
func (d rollDraws) skipped(i int) bool { return i < len(d) && d[i]&rollSkipped != 0 }

// unenforced reports that limit i only observes the request.
func (d rollDraws) unenforced(i int) bool { return i < len(d) && d[i]&rollUnenforced != 0 }

// tellUpstream adds l's upstream_headers_when_limited to the request, which
// a shadow or not enforced evaluation of l would have rejected. Replacing
// keeps a re-evaluated request to one value and overrides a client's.
func (p *Plugin) tellUpstream(l *limitRuntime) {
	for _, kv := range l.cfg.UpstreamHeadersWhenLimited {
		if err := p.host.Stream.ReplaceRequestHeader(kv[0], kv[1]); err != nil {
			p.log.Warnf("sluice: adding request header %s: %v", kv[0], err)
		}
	}
}

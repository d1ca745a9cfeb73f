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

// draw is true for perMillion of a million draws from rnd (nil: the
// process's own source). The whole fractions draw nothing, so a limit
// without a rollout costs no random number.
func draw(perMillion uint32, rnd func() uint64) bool {
	switch perMillion {
	case 0:
		return false
	case perMillionAll:
		return true
	}
	var r uint64
	if rnd != nil {
		r = rnd()
	} else {
		r = rand.Uint64()
	}
	// The modulo's bias is below 1e-13: 2^64 is not a multiple of a
	// million by a remainder that small against 2^64.
	return r%perMillionAll < uint64(perMillion)
}

// add draws one more limit's rollout r for the request.
func (d *rollDraws) add(r rollout, rnd func() uint64) {
	var f rollFlags
	switch {
	case !draw(r.enabled, rnd):
		f = rollSkipped
	case !draw(r.enforced, rnd):
		f = rollUnenforced
	}
	*d = append(*d, f)
}

// skipped reports that limit i is not enabled for the request.
func (d rollDraws) skipped(i int) bool { return i < len(d) && d[i]&rollSkipped != 0 }

// unenforced reports that limit i only observes the request.
func (d rollDraws) unenforced(i int) bool { return i < len(d) && d[i]&rollUnenforced != 0 }

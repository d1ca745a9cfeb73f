package external

import (
	"encoding/binary"
	"errors"

	"github.com/sluice-proxy/sluice/limiter/store"
)

// Permits cap the lookups in flight across every worker of an Envoy
// (external.max_concurrent_requests): one shared-data value holds a
// claim time per permit, 0 when free. A permit whose claim is older than
// claimTTL belongs to a lookup that will not finish (its worker was
// replaced), so it is free again: a lost release never shrinks the cap
// for longer than one claim.

// permitTries bounds the CAS retries of one acquire or release.
const permitTries = 8

// errNoPermit is returned when every permit is held.
var errNoPermit = errors.New("external: every lookup permit is held")

// acquirePermit claims a free permit at ns and returns its index. A
// store failure other than contention grants the lookup (index -1): the
// cap protects the service, and failing closed here would turn a shared
// data fault into fallback answers for every tenant.
func (x *Cache) acquirePermit(ns int64) (int, error) {
	n := x.cfg.MaxConcurrentRequests
	if n <= 0 {
		return -1, nil // no cap configured (a Config not from Parse)
	}
	for range permitTries {
		v, cas, found, err := store.Load(x.store, x.permitKey)
		if err != nil {
			x.log.Warnf("sluice: external permits: %v", err)
			return -1, nil
		}
		claims := x.permitBuf[:0]
		if found && len(v) == 8*n {
			claims = append(claims, v...)
		} else {
			// Absent, or written under another max_concurrent_requests:
			// start from all free.
			claims = append(claims, make([]byte, 8*n)...)
			if !found {
				cas = store.CreateCAS
			}
		}
		x.permitBuf = claims
		free := -1
		for i := range n {
			at := int64(binary.LittleEndian.Uint64(claims[8*i:]))
			if at == 0 || ns-at >= int64(x.claimTTL) || at > ns+int64(x.claimTTL) {
				free = i
				break
			}
		}
		if free < 0 {
			return 0, errNoPermit
		}
		binary.LittleEndian.PutUint64(claims[8*free:], uint64(ns))
		err = x.store.Set(x.permitKey, claims, cas)
		switch {
		case err == nil:
			return free, nil
		case !errors.Is(err, store.ErrCASMismatch):
			x.log.Warnf("sluice: external permits: %v", err)
			return -1, nil
		}
	}
	return -1, nil // contended past the budget: grant, as for a store fault
}

// releasePermit frees permit i if it still holds the claim made at ns.
func (x *Cache) releasePermit(i int, ns int64) {
	if i < 0 {
		return
	}
	for range permitTries {
		v, cas, found, err := store.Load(x.store, x.permitKey)
		if err != nil || !found || len(v) < 8*(i+1) || int64(binary.LittleEndian.Uint64(v[8*i:])) != ns {
			return
		}
		claims := append(x.permitBuf[:0], v...)
		x.permitBuf = claims
		binary.LittleEndian.PutUint64(claims[8*i:], 0)
		if err := x.store.Set(x.permitKey, claims, cas); err == nil || !errors.Is(err, store.ErrCASMismatch) {
			return
		}
	}
}

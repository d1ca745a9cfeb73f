package engine

import (
	"fmt"
	"strings"

	"github.com/sluice-proxy/sluice/filter/config"
)

// QuotaKey is one bucket of a limit named by an operator rather than read
// from a request (sluicectl quota, the admin route): the key value the
// filter composes from the same parts, and the rate it decides that value
// at.
type QuotaKey struct {
	// Key is the composite key value, the parts joined as appendKey joins
	// them; backend.Key digests it into the Redis key.
	Key string
	// Override is the overrides entry that gives the rate, "" for the
	// limit's own rate.
	Override string
	Rate     config.Rate
}

// ResolveQuotaKey is the bucket of limit cfg for a request whose key parts
// have the values parts, one per entry of cfg.Key, in order: host parts
// lower-cased and the override chosen as the request path chooses them.
// Values the request path would not find a bucket for are errors: a wrong
// number of parts, an empty part (a missing key), and a value whose
// override is unlimited or blocked.
func ResolveQuotaKey(cfg *config.Limit, parts []string) (QuotaKey, error) {
	if len(parts) != len(cfg.Key) {
		return QuotaKey{}, fmt.Errorf("limit %q has %d key parts (%s), got %d values", cfg.Name, len(cfg.Key), keyKindsOf(cfg.Key), len(parts))
	}
	var b strings.Builder
	for i, v := range parts {
		if v == "" {
			return QuotaKey{}, fmt.Errorf("limit %q: key part %d (%s) is empty, which the filter treats as a missing key: no bucket", cfg.Name, i+1, cfg.Key[i])
		}
		if i > 0 {
			b.WriteByte(keySeparator)
		}
		if cfg.Key[i].Kind == config.KeyHost {
			v = strings.ToLower(v)
		}
		b.WriteString(v)
	}
	q := QuotaKey{Key: b.String(), Rate: cfg.Rate}
	if cfg.OverrideBy < 0 || cfg.OverrideBy >= len(parts) {
		return q, nil
	}
	v := parts[cfg.OverrideBy]
	if cfg.OverrideCIDRs != nil {
		v = cfg.OverrideCIDRs.Resolve(v)
	}
	if a, ok := cfg.OverrideActions[v]; ok {
		return QuotaKey{}, fmt.Errorf("limit %q: override %q is %s: no bucket", cfg.Name, v, overrideActionName(a))
	}
	if r, ok := cfg.Overrides[v]; ok {
		q.Override, q.Rate = v, r
	}
	return q, nil
}

func overrideActionName(a config.OverrideAction) string {
	if a == config.OverrideBlock {
		return "blocked"
	}
	return "unlimited"
}

// keyKindsOf names the key parts of a rate or concurrency limit for logs
// and messages: "client_ip+header:x-tenant".
func keyKindsOf(key []config.KeyPart) string {
	kinds := make([]string, len(key))
	for i, k := range key {
		kinds[i] = k.String()
	}
	return strings.Join(kinds, "+")
}

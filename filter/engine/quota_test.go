package engine

import (
	"strings"
	"testing"
)

// ResolveQuotaKey names the bucket the request path fills: the key
// appendKey composes from a request with those part values, and the
// override decideLimits picks for it.
func TestResolveQuotaKeyIsTheRequestPathsKey(t *testing.T) {
	p, f := newNativePlugin(t, `{"limits":[{"name":"t","key":["header:x-tenant","host","client_ip"],
		"requests_per_second":5,"override_by":"header:x-tenant","overrides":{"gold":{"requests_per_second":50},"free":{"unlimited":true}}}]}`)
	l := p.limits[0]
	s := begin(p, f, 1)
	f.Stream.Headers = [][2]string{{":method", "GET"}, {":path", "/x"}, {":authority", "API.Example"}, {"x-tenant", "gold"}}
	f.Stream.Properties = map[string]string{"source.address": "10.1.2.3:5000"}
	key, override, ok := s.info.appendKey(nil, l.cfg.Key, &p.cfg.ClientIP, l.cfg.OverrideBy)
	if !ok {
		t.Fatal("the request has no key")
	}
	q, err := ResolveQuotaKey(l.cfg, []string{"gold", "API.Example", "10.1.2.3"})
	if err != nil {
		t.Fatal(err)
	}
	if q.Key != string(key) || q.Override != override || q.Rate.Limit != 50 {
		t.Fatalf("resolved %q override %q rate %+v; the request path has %q override %q", q.Key, q.Override, q.Rate, key, override)
	}
	if q, err := ResolveQuotaKey(l.cfg, []string{"silver", "h", "10.0.0.1"}); err != nil || q.Override != "" || q.Rate.Limit != 5 {
		t.Fatalf("a value without an override: %+v %v", q, err)
	}
	for _, tc := range []struct {
		parts []string
		want  string
	}{
		{[]string{"gold", "h"}, "has 3 key parts (header:x-tenant+host+client_ip), got 2"},
		{[]string{"gold", "", "10.0.0.1"}, "key part 2 (host) is empty"},
		{[]string{"free", "h", "10.0.0.1"}, `override "free" is unlimited`},
	} {
		if _, err := ResolveQuotaKey(l.cfg, tc.parts); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.parts, err, tc.want)
		}
	}
}

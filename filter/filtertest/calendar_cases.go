package filtertest

import (
	"strconv"
	"testing"
	"time"
)

// Cases of calendar windows: a monthly quota aligned to a fixed UTC offset,
// through a leap day into the next month, on the harness's stepped clock.

func init() {
	Cases = append(Cases, monthlyQuota(""), monthlyQuota("webdis"), monthlyQuota("upstash"),
		hybridMonthlyQuota("webdis"), hybridMonthlyQuota("upstash"))
}

// redisTimeouts are the calendar cases' backend timeouts: the harness
// clocks stand still while a call is out, so only the host's own real-time
// timeout can end one, and a machine under load must not.
const redisTimeouts = `"timeout":"10s","retries":0`

// monthlyQuota is one case for every mode: a local quota, or a global one
// in Redis behind protocol on the harness's clock, answers alike.
func monthlyQuota(protocol string) Case {
	name := "a monthly quota in +09:00 spans Feb 29 of a leap year and renews on Mar 1, with headers and Retry-After to the month's end"
	cfg := `{"limits":[{"name":"monthly","key":[],"algorithm":"fixed_window","limit":3,
			"window":"month","window_offset":"+09:00"}]}`
	if protocol != "" {
		name += ", in global mode through " + protocol
		cfg = `{"limits":[{"name":"monthly","key":["header:x-api-key"],"algorithm":"fixed_window","limit":3,
			"window":"month","window_offset":"+09:00","mode":"global","failure_policy":"deny"}],` +
			RedisBackend(protocol, redisTimeouts) + `}`
	}
	return Case{
		Name:    name,
		Config:  cfg,
		Workers: 2,
		Redis:   protocol,
		Run: func(t *testing.T, h Harness) {
			tokyo := time.FixedZone("+09:00", 9*3600)
			now := Epoch
			stepTo := func(at time.Time) {
				t.Helper()
				if !at.After(now) {
					t.Fatalf("clock would go back to %v", at)
				}
				h.Advance(t, at.Sub(now))
				now = at
			}
			march := time.Date(2028, time.March, 1, 0, 0, 0, 0, tokyo)
			const feb, mar = 29 * 24 * 3600, 31 * 24 * 3600 // 2028 is a leap year
			one := func(i int) Request { return get("/").on(i%2).with("x-api-key", "k1") }

			// Feb 28 23:59:59 and Feb 29 00:00 are one period.
			stepTo(time.Date(2028, time.February, 28, 23, 59, 59, 0, tokyo))
			first := h.Do(t, one(0))
			if first.Status != 200 {
				t.Fatalf("first of February: %d", first.Status)
			}
			wantHeaders(t, first, map[string]string{
				"x-ratelimit-limit": "3", "x-ratelimit-remaining": "2",
				"x-ratelimit-reset": strconv.FormatInt(march.Unix(), 10),
				"ratelimit-policy":  `"monthly";q=3;w=` + strconv.Itoa(feb),
				"ratelimit":         `"monthly";r=2;t=86401`,
			})
			stepTo(time.Date(2028, time.February, 29, 0, 0, 0, 0, tokyo))
			if got := admitted(t, h, 4, one); got != 2 {
				t.Fatalf("on Feb 29 admitted %d of 4, want the 2 left", got)
			}
			denied := h.Do(t, one(1))
			if denied.Status != 429 || !denied.Local {
				t.Fatalf("quota used: %d local %v", denied.Status, denied.Local)
			}
			wantHeaders(t, denied, map[string]string{
				"retry-after": "86400", "x-ratelimit-remaining": "0",
				"x-ratelimit-reset": strconv.FormatInt(march.Unix(), 10),
				"ratelimit":         `"monthly";r=0;t=86400`,
			})

			// Leap day's last second: still February.
			stepTo(march.Add(-time.Second))
			if resp := h.Do(t, one(0)); resp.Status != 429 || resp.Headers.Get("retry-after") != "1" {
				t.Fatalf("Feb 29 23:59:59: %d retry-after %q", resp.Status, resp.Headers.Get("retry-after"))
			}

			// Mar 1 00:00 +09:00 (Feb 29 15:00 UTC): a new, 31-day period.
			stepTo(march)
			renewed := h.Do(t, one(1))
			if renewed.Status != 200 {
				t.Fatalf("Mar 1: %d", renewed.Status)
			}
			april := time.Date(2028, time.April, 1, 0, 0, 0, 0, tokyo)
			wantHeaders(t, renewed, map[string]string{
				"x-ratelimit-remaining": "2",
				"x-ratelimit-reset":     strconv.FormatInt(april.Unix(), 10),
				"ratelimit-policy":      `"monthly";q=3;w=` + strconv.Itoa(mar),
				"ratelimit":             `"monthly";r=2;t=` + strconv.Itoa(mar),
			})
			if got := admitted(t, h, 3, one); got != 2 {
				t.Fatalf("in March admitted %d of 3 more, want 2", got)
			}
			wantCounter(t, h, "sluice.limit.monthly.allowed", 6)
			wantCounter(t, h, "sluice.limit.monthly.limited", 5)
		},
	}
}

// hybridMonthlyQuota: a hybrid monthly quota leases from Redis's count of
// the month, and a lease taken in February's last second is void when
// March begins, though its tokens would otherwise live on for a second:
// March admits exactly its own limit.
func hybridMonthlyQuota(protocol string) Case {
	return Case{
		Name: "a hybrid monthly quota through " + protocol + ": leases end with February and March admits exactly its limit",
		Config: `{"limits":[{"name":"monthly","key":["header:x-api-key"],"algorithm":"fixed_window","limit":3,
			"window":"month","window_offset":"+09:00","mode":"hybrid","failure_policy":"deny"}],` +
			RedisBackend(protocol, redisTimeouts) + `}`,
		// One worker: a lease renewal a request starts is sent from its
		// worker's tick, and the harnesses tick the worker of the request
		// they hold.
		Workers: 1,
		Redis:   protocol,
		Run: func(t *testing.T, h Harness) {
			tokyo := time.FixedZone("+09:00", 9*3600)
			march := time.Date(2028, time.March, 1, 0, 0, 0, 0, tokyo)
			h.Advance(t, march.Add(-time.Second).Sub(Epoch))
			one := func(int) Request { return get("/").with("x-api-key", "k1") }
			first := h.Do(t, one(0))
			if first.Status != 200 {
				t.Fatalf("Feb 29 23:59:59: %d", first.Status)
			}
			wantHeaders(t, first, map[string]string{
				"x-ratelimit-reset": strconv.FormatInt(march.Unix(), 10),
				"ratelimit-policy":  `"monthly";q=3;w=` + strconv.Itoa(29*24*3600),
			})
			// The second request's lease asks for more than it needs and
			// gets the 2 left: one is spent, one stays leased.
			if resp := h.Do(t, one(1)); resp.Status != 200 {
				t.Fatalf("second in February: %d", resp.Status)
			}
			// Less than the lease's second of life later, in March.
			h.Advance(t, time.Second-10*time.Millisecond)
			var last Response
			ok := 0
			for i := range 5 {
				last = h.Do(t, one(i))
				if last.Status == 200 {
					ok++
				}
			}
			if ok != 3 {
				t.Fatalf("March admitted %d of 5, want its limit of 3 and no token leased in February", ok)
			}
			april := time.Date(2028, time.April, 1, 0, 0, 0, 0, tokyo)
			if last.Status != 429 || last.Headers.Get("retry-after") != strconv.Itoa(int(april.Sub(march)/time.Second)) {
				t.Fatalf("over March's quota: %d retry-after %q, want 429 until April", last.Status, last.Headers.Get("retry-after"))
			}
		},
	}
}

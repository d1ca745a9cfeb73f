package e2e_test

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"
)

// calendarQuotas are the limits TestDistributedCalendarQuota runs: a
// global monthly quota and a hybrid daily one.
var calendarQuotas = []struct {
	mode, window string
	limit        int
}{{"global", "month", 40}, {"hybrid", "day", 30}}

// TestDistributedCalendarQuota runs each of calendarQuotas on 3 instances
// of our host against one real Redis, on Redis's own clock (no time
// argument: what production sends): a concurrent burst admits at most the
// limit (exactly, in global mode without timeouts), the headers reset at
// the period's end in the offset, and the key expires a minute after it.
func TestDistributedCalendarQuota(t *testing.T) {
	for _, c := range calendarQuotas {
		t.Run(c.mode, func(t *testing.T) {
			forBothProtocols(t, func(t *testing.T, p distProtocol) {
				be := startDistBackend(t, p)
				lim := `{"name":"quota","key":["header:x-key"],"algorithm":"fixed_window","limit":` + strconv.Itoa(c.limit) +
					`,"window":"` + c.window + `","window_offset":"-05:30","mode":"` + c.mode + `","failure_policy":"deny"}`
				insts := startDistInstances(t, 3, `{"limits":[`+lim+`],`+be.backendBlock(`"timeout":"2s","retries":1`)+`}`, be.addr)
				key := uniqueKey("cal")
				ta := burst(t, insts, "/", key, 3*c.limit)
				timeouts := sumMetric(insts, "sluice.backend.errors.timeout")
				if ok := ta.get(200); ok > c.limit || (timeouts == 0 && c.mode == "global" && ok != c.limit) {
					t.Fatalf("a burst of %d admitted %d (%d timeouts), limit %d: %v", 3*c.limit, ok, timeouts, c.limit, ta.counts)
				}
				// The period's end in -05:30, by this machine's clock, which
				// is Redis's.
				zone := time.FixedZone("-05:30", -(5*3600 + 1800))
				now := time.Now().In(zone)
				end := time.Date(now.Year(), now.Month()+1, 1, 0, 0, 0, 0, zone)
				if c.window == "day" {
					end = time.Date(now.Year(), now.Month(), now.Day()+1, 0, 0, 0, 0, zone)
				}
				req, _ := http.NewRequest("GET", insts[0].base+"/", nil)
				req.Header.Set("x-key", key)
				resp, err := distClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != 429 {
					t.Fatalf("after the burst: %d", resp.StatusCode)
				}
				if got := resp.Header.Get("x-ratelimit-reset"); got != strconv.FormatInt(end.Unix(), 10) {
					t.Fatalf("x-ratelimit-reset %s, want the period's end %d (%v)", got, end.Unix(), end)
				}
				ctx := context.Background()
				keys, err := be.redis.Client().Keys(ctx, "sluice:quota:*").Result()
				if err != nil || len(keys) != 1 {
					t.Fatalf("redis keys %q (%v)", keys, err)
				}
				ttl, err := be.redis.Client().PTTL(ctx, keys[0]).Result()
				if want := time.Until(end) + time.Minute; err != nil || ttl > want+time.Second || ttl < want-time.Minute {
					t.Fatalf("TTL %v (%v), want the period's end plus a minute, %v", ttl, err, want)
				}
			})
		})
	}
}

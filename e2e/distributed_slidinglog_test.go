package e2e_test

import (
	"context"
	"testing"
)

// globalLog is the limit TestDistributedSlidingLog shares: an hour's
// window, so nothing leaves the log during the test.
const globalLog = `{"name":"log","key":["header:x-key"],"limit":40,"window":"1h","algorithm":"sliding_log","mode":"global","failure_policy":"deny"}`

// TestDistributedSlidingLog runs a global sliding_log on 3 instances of
// our host against one real Redis: a concurrent burst admits exactly the
// limit, and the sorted set holds one member per admitted request.
func TestDistributedSlidingLog(t *testing.T) {
	forBothProtocols(t, func(t *testing.T, p distProtocol) {
		be := startDistBackend(t, p)
		insts := startDistInstances(t, 3, `{"limits":[`+globalLog+`],`+be.backendBlock(`"timeout":"500ms","retries":1`)+`}`, be.addr)
		ta := burst(t, insts, "/", uniqueKey("log"), 120)
		checkStrictBurst(t, ta, 40, 120, sumMetric(insts, "sluice.backend.errors.timeout"))
		ctx := context.Background()
		rdb := be.redis.Client()
		keys, err := rdb.Keys(ctx, "sluice:log:*").Result()
		if err != nil || len(keys) != 1 {
			t.Fatalf("redis keys %q (%v), want the one log", keys, err)
		}
		if n, err := rdb.ZCard(ctx, keys[0]).Result(); err != nil || n != int64(ta.get(200)) {
			t.Fatalf("the log holds %d members (%v) for %d admitted requests", n, err, ta.get(200))
		}
	})
}

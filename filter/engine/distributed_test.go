package engine

import (
	"strings"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/filter/backend"
	"github.com/sluice-proxy/sluice/filter/host/hosttest"
	"github.com/sluice-proxy/sluice/limiter"
)

func TestGlobalAdmitsExactlyTheBucket(t *testing.T) {
	for _, proto := range []backend.Protocol{backend.Webdis, backend.Upstash} {
		t.Run(proto.String(), func(t *testing.T) {
			fake := newFakeRedis(tenPerSecond, proto)
			d := newDistHarness(t, distConfig("global", "deny", proto.String(), ""), fake)
			ok := 0
			for range 15 {
				o := d.do("alice")
				if o.status == 200 {
					ok++
					if o.calls != 1 {
						t.Fatalf("an admitted global decision made %d calls, want 1", o.calls)
					}
				}
			}
			if ok != 10 {
				t.Fatalf("admitted %d of 15, want the capacity 10", ok)
			}
			if fake.calls["token_bucket"] != 11 {
				// the 11th is denied by Redis; the next ones hit the negative cache
				t.Fatalf("Redis decided %d times, want 11", fake.calls["token_bucket"])
			}
			if got := d.counter("sluice.backend.negative_cache_hits"); got != 4 {
				t.Fatalf("negative cache hits %d, want 4", got)
			}
			// 100ms later exactly one token is back, and the cache has expired.
			d.now = d.now.Add(100 * time.Millisecond)
			if o := d.do("alice"); o.status != 200 {
				t.Fatalf("after a refill: %d", o.status)
			}
			if o := d.do("alice"); o.status != 429 {
				t.Fatalf("second after one refill: %d", o.status)
			}
			// Another key has its own bucket.
			if o := d.do("bob"); o.status != 200 {
				t.Fatalf("bob: %d", o.status)
			}
		})
	}
}

func TestGlobalRecoversFromNoScript(t *testing.T) {
	fake := newFakeRedis(tenPerSecond, backend.Webdis)
	fake.loaded = map[string]bool{}
	d := newDistHarness(t, distConfig("global", "deny", "webdis", ""), fake)
	o := d.do("alice")
	if o.status != 200 || o.calls != 3 {
		t.Fatalf("status %d after %d calls, want 200 after EVALSHA, SCRIPT LOAD, EVALSHA", o.status, o.calls)
	}
	if fake.calls["SCRIPT LOAD"] != 1 {
		t.Fatalf("script loads %d", fake.calls["SCRIPT LOAD"])
	}
	if o := d.do("alice"); o.calls != 1 {
		t.Fatalf("after loading, %d calls", o.calls)
	}
	if got := d.counter("sluice.backend.breaker.opens"); got != 0 {
		t.Fatalf("NOSCRIPT opened the breaker")
	}
}

// badReply is one broken answer from a backend (Redis or the limits
// service): its status and body, or ok false for none at all, and the
// error kind it must be counted as.
type badReply struct {
	name   string
	status int
	body   string
	ok     bool
	kind   string
}

// badReplies are what a broken or wrong backend might send.
var badReplies = []badReply{
	{"timeout", 0, "", false, "timeout"},
	{"redis down", 503, "", true, "unavailable"},
	{"html", 200, "<html><body>Bad gateway</body></html>", true, "malformed"},
	{"short array", 200, `{"EVALSHA":[1,2,3]}`, true, "malformed"},
	{"nested null", 200, `{"EVALSHA":null}`, true, "malformed"},
	{"redis error", 200, `{"EVALSHA":[false,"ERR OOM command not allowed"]}`, true, "redis_error"},
	{"forbidden", 403, `{}`, true, "http_status"},
	{"huge numbers", 200, `{"EVALSHA":[1,99999999999999999999999,0,0,0,0]}`, true, "malformed"},
}

func TestFailurePolicies(t *testing.T) {
	for _, bad := range badReplies {
		for _, policy := range []string{"allow", "deny", "local"} {
			t.Run(bad.name+"/"+policy, func(t *testing.T) {
				d := newDistHarness(t, distConfig("global", policy, "webdis", ""), nil)
				d.reply = func(*hosttest.Call) (int, []byte, bool) {
					return bad.status, []byte(bad.body), bad.ok
				}
				o := d.do("alice")
				want := map[string]int{"allow": 200, "deny": 503, "local": 200}[policy]
				if o.status != want {
					t.Fatalf("status %d, want %d", o.status, want)
				}
				retries := 1
				if bad.kind != "timeout" && bad.kind != "unavailable" {
					retries = 0 // retrying cannot fix a wrong answer
				}
				if o.calls != 1+retries {
					t.Fatalf("%d calls, want %d", o.calls, 1+retries)
				}
				d.checkHeld(o)
				if got := d.counter("sluice.backend.errors." + bad.kind); got != uint64(o.calls) {
					t.Fatalf("errors.%s = %d, want %d", bad.kind, got, o.calls)
				}
				if got := d.counter("sluice.backend.fallback." + policy); got != 1 {
					t.Fatalf("fallback.%s = %d", policy, got)
				}
			})
		}
	}
}

func TestFailureLocalDividesByInstances(t *testing.T) {
	d := newDistHarness(t, distConfig("global", "local", "webdis", ""), nil)
	d.reply = func(*hosttest.Call) (int, []byte, bool) { return 503, nil, true }
	// 10/s divided by instances 2 = a local bucket of 5.
	if ok := d.admitted("alice", 8); ok != 5 {
		t.Fatalf("admitted %d under the local fallback, want 5", ok)
	}
}

func TestBackendBreakerOpensAndRecovers(t *testing.T) {
	fake := newFakeRedis(limiter.Limit{Algorithm: limiter.TokenBucket, Rate: 1000, Period: time.Second}, backend.Webdis)
	d := newDistHarness(t, distConfig("global", "deny", "webdis", ""), fake)
	down := true
	d.reply = func(c *hosttest.Call) (int, []byte, bool) {
		if down {
			return 503, nil, true
		}
		st, body := fake.answer(t, c, d.now)
		return st, body, true
	}
	// Threshold 3 consecutive failures: the first request fails twice (one
	// retry), the second fails once more and opens it (its retry is refused
	// by the open breaker).
	for i := range 2 {
		if o := d.do("alice"); o.status != 503 {
			t.Fatalf("request %d: %d", i, o.status)
		}
	}
	if got := d.counter("sluice.backend.breaker.opens"); got != 1 {
		t.Fatalf("breaker opens %d, want 1", got)
	}
	o := d.do("alice")
	if o.status != 503 || o.calls != 0 || o.waited != 0 {
		t.Fatalf("while open: status %d, %d calls, waited %v; want an immediate 503 with no call", o.status, o.calls, o.waited)
	}
	down = false
	d.now = d.now.Add(time.Second) // open_timeout
	if o := d.do("alice"); o.status != 200 || o.calls != 1 {
		t.Fatalf("probe: status %d, %d calls", o.status, o.calls)
	}
	if got := d.counter("sluice.backend.breaker.closes"); got != 1 {
		t.Fatalf("breaker closes %d, want 1", got)
	}
	if o := d.do("alice"); o.status != 200 || o.calls != 1 {
		t.Fatalf("closed again: status %d, %d calls", o.status, o.calls)
	}
}

// TestSilentBackendIsBoundedByBudget: a request waiting on a backend that
// never answers is released within the budget by its failure policy; in
// hybrid mode it waits for its own lease call and is released like a
// global decision.
func TestSilentBackendIsBoundedByBudget(t *testing.T) {
	for _, c := range []struct {
		mode, policy string
		want         int
	}{{"global", "allow", 200}, {"hybrid", "deny", 503}} {
		t.Run(c.mode, func(t *testing.T) {
			d := newDistHarness(t, distConfig(c.mode, c.policy, "webdis", ""), nil)
			d.silent = true
			o := d.do("alice")
			if o.status != c.want || o.calls != 2 {
				t.Fatalf("status %d after %d calls, want the %s policy's %d after a retry", o.status, o.calls, c.policy, c.want)
			}
			d.checkHeld(o)
			// A reply arriving after the watchdog gave up must be ignored safely.
			for ctx := uint32(0); ctx <= d.lastID; ctx++ {
				for _, call := range d.callsFrom(ctx) {
					d.deliver(call, 200, []byte(`{"EVALSHA":[1,1,0,1,0,1]}`), true)
					break
				}
			}
		})
	}
}

func TestMixedLocalAndGlobalConsumeFromNone(t *testing.T) {
	local := `{"name":"local","key":["header:x-key"],"requests_per_second":3}`
	fake := newFakeRedis(tenPerSecond, backend.Webdis)
	d := newDistHarness(t, distConfig("global", "deny", "webdis", local), fake)
	for i := range 3 {
		if o := d.do("alice"); o.status != 200 {
			t.Fatalf("request %d: %d", i, o.status)
		}
	}
	// The local limit is exhausted: it rejects before any Redis call, so
	// the global bucket keeps its 7 tokens.
	o := d.do("alice")
	if o.status != 429 || o.calls != 0 {
		t.Fatalf("local denial: status %d after %d calls", o.status, o.calls)
	}
	if got := fake.calls["token_bucket"]; got != 3 {
		t.Fatalf("Redis decided %d times, want 3", got)
	}
	// Now the global limit denies while the local one would admit: the
	// local limit must not be consumed.
	fake.state[backend.Key("api", limiter.TokenBucket, "bob")] = fake.lim.Empty(d.now.UnixNano()) // bob's global bucket is drained
	if o := d.do("bob"); o.status != 429 || o.calls != 1 {
		t.Fatalf("global denial: status %d after %d calls", o.status, o.calls)
	}
	d.now = d.now.Add(100 * time.Millisecond) // one global token back
	if o := d.do("bob"); o.status != 200 {
		t.Fatalf("bob after refill: %d (the local limit was consumed by a global denial?)", o.status)
	}
}

func TestHybridServesFromLeases(t *testing.T) {
	fake := newFakeRedis(limiter.Limit{Algorithm: limiter.TokenBucket, Rate: 200, Period: time.Second}, backend.Webdis)
	cfg := strings.Replace(distConfig("hybrid", "deny", "webdis", ""), `"requests_per_second":10`, `"requests_per_second":200`, 1)
	d := newDistHarness(t, cfg, fake)
	// 400 requests/s offered (one every 2.5ms, approximated by 5ms steps
	// with two requests each) for 10 seconds against 200/s.
	ok, total := 0, 0
	start := d.now
	for d.now.Sub(start) < 10*time.Second {
		for range 2 {
			if d.do("alice").status == 200 {
				ok++
			}
			total++
		}
		// Reserved tokens are never spent early: at every instant the
		// lease admitted no more than the bucket could have.
		if bound := 200 + 200*d.now.Sub(start).Seconds(); float64(ok) > bound {
			t.Fatalf("admitted %d after %v, more than the bucket's %.0f", ok, d.now.Sub(start), bound)
		}
		d.settle()
	}
	elapsed := d.now.Sub(start)
	ideal := 200 + int(200*elapsed.Seconds())
	if ok > ideal {
		t.Fatalf("admitted %d, more than the bucket's %d", ok, ideal)
	}
	if float64(ok) < 0.95*float64(ideal) {
		t.Fatalf("admitted %d, under 95%% of the bucket's %d", ok, ideal)
	}
	leases := fake.calls["token_bucket_lease"]
	perSecond := float64(leases) / elapsed.Seconds()
	t.Logf("admitted %d of %d (ideal %d), %d lease calls (%.1f/s, %.1f per 1000 decisions)", ok, total, ideal, leases, perSecond, 1000*float64(leases)/float64(total))
	if perSecond > 12 {
		t.Fatalf("%.1f lease calls per second, want about 10 at most", perSecond)
	}
}

func TestHybridRefundsWhenAnotherLimitDenies(t *testing.T) {
	local := `{"name":"local","key":["header:x-key"],"requests_per_second":1000}`
	fake := newFakeRedis(limiter.Limit{Algorithm: limiter.TokenBucket, Rate: 100, Period: time.Second}, backend.Webdis)
	cfg := strings.Replace(distConfig("hybrid", "deny", "webdis", local), `"requests_per_second":10`, `"requests_per_second":100`, 1)
	d := newDistHarness(t, cfg, fake)
	if o := d.do("alice"); o.status != 200 {
		t.Fatalf("first: %d", o.status)
	}
	if o := d.do("alice"); o.status != 200 || o.calls != 0 {
		t.Fatalf("second should come from the lease: %d, %d calls", o.status, o.calls)
	}
}

func TestMalformedConfigForRemoteLimits(t *testing.T) {
	// A sliding window cannot be leased: hybrid needs a token bucket.
	cfg := `{"limits":[{"name":"x","algorithm":"sliding_window","requests_per_second":5,"mode":"hybrid"}],"backend":{"cluster":"redis"}}`
	hc, _ := hosttest.New(epoch)
	if NewVM(hc).NewPlugin().Start([]byte(cfg)) {
		t.Fatal("hybrid sliding_window must fail OnPluginStart")
	}
}

func TestStreamEndingCancelsItsCall(t *testing.T) {
	d := newDistHarness(t, distConfig("global", "deny", "webdis", ""), nil)
	d.silent = true
	id, a := d.start(keyHeaders("alice"))
	if a != Pause {
		t.Fatalf("action %v, want the request paused for Redis", a)
	}
	d.pump()
	d.complete(id) // the client went away
	d.settleN(60)
	if d.callouts != 1 {
		t.Fatalf("%d callouts: the call of a finished stream was retried", d.callouts)
	}
	if got := d.counter("sluice.backend.errors.timeout"); got != 0 {
		t.Fatalf("a client going away counted %d backend timeouts", got)
	}
	if d.f.Ticker.Period != 0 {
		t.Fatal("the tick keeps running with nothing left to do")
	}
}

// FuzzGlobalReply feeds arbitrary replies to a paused request: the filter
// must never panic, must answer every request, and must treat anything
// that is not a valid script reply as a backend failure (deny → 503).
func FuzzGlobalReply(f *testing.F) {
	f.Add(200, []byte(`{"EVALSHA":[1,4,0,100,0,1800000000000000]}`))
	f.Add(200, []byte(`{"EVALSHA":[0,0,100,100,1,1800000000000000]}`))
	f.Add(503, []byte(nil))
	f.Add(200, []byte(`<html>`))
	f.Add(200, []byte(`{"EVALSHA":[false,"NOSCRIPT x"]}`))
	f.Add(200, []byte(`{"EVALSHA":[1,1,1,1,1,1,1]}`))
	f.Add(200, []byte(`{"EVALSHA":[1,4,0,100,0,1800000000000000]}`+strings.Repeat(" ", 64<<10))) // valid JSON, over the limit
	f.Fuzz(func(t *testing.T, status int, body []byte) {
		d := newDistHarness(t, distConfig("global", "deny", "webdis", ""), nil)
		d.reply = func(*hosttest.Call) (int, []byte, bool) { return status, body, true }
		o := d.do("alice")
		if o.status != 200 && o.status != 429 && o.status != 503 {
			t.Fatalf("status %d", o.status)
		}
		_, err := backend.ParseWebdis(status, body)
		if err != nil && backend.KindOf(err) != backend.KindNoScript && o.status != 503 {
			t.Fatalf("an invalid reply (%v) gave %d, want the deny policy's 503", err, o.status)
		}
		if len(body) > 64<<10 && o.status != 503 {
			t.Fatalf("a %d-byte reply, over the read limit, gave %d, want the deny policy's 503", len(body), o.status)
		}
	})
}

func TestExtremeBackendBreakerSettingsStart(t *testing.T) {
	cfg := `{"limits":[{"name":"x","requests_per_second":5,"mode":"global"}],"backend":{"cluster":"redis",` +
		`"breaker":{"failure_threshold":1000000000,"window":"1ms","open_timeout":"1ms","half_open_max_requests":1000000000}}}`
	hc, f := hosttest.New(epoch)
	if !NewVM(hc).NewPlugin().Start([]byte(cfg)) {
		t.Fatalf("a config the parser accepts must start: %v", f.Log.Lines)
	}
}

func TestHybridOneLeaseCallInFlightPerKey(t *testing.T) {
	fake := newFakeRedis(limiter.Limit{Algorithm: limiter.TokenBucket, Rate: 100, Period: time.Second}, backend.Webdis)
	cfg := strings.Replace(distConfig("hybrid", "deny", "webdis", ""), `"requests_per_second":10`, `"requests_per_second":100`, 1)
	d := newDistHarness(t, cfg, fake)
	d.silent = true
	ids := d.startWaiting(5, keyHeaders("alice"), "lease")
	d.settle()
	if d.callouts != 1 {
		t.Fatalf("%d lease calls for one key, want exactly 1 in flight", d.callouts)
	}
	// Answer it now: every waiting stream is served from the one lease.
	d.silent = false
	c := d.callsFrom(0)[0]
	st, body := fake.answer(t, c, d.now)
	d.deliver(c, st, body, true)
	for _, id := range ids {
		if a := d.action(id); a != Continue {
			t.Fatalf("stream %d not resumed after the lease arrived (action %v)", id, a)
		}
	}
	if fake.calls["token_bucket_lease"] != 1 {
		t.Fatalf("lease calls %d", fake.calls["token_bucket_lease"])
	}
}

func TestHybridLeaseExpiresUnused(t *testing.T) {
	fake := newFakeRedis(limiter.Limit{Algorithm: limiter.TokenBucket, Rate: 100, Period: time.Second}, backend.Webdis)
	cfg := strings.Replace(distConfig("hybrid", "deny", "webdis", ""), `"requests_per_second":10`, `"requests_per_second":100`, 1)
	d := newDistHarness(t, cfg, fake)
	if o := d.do("alice"); o.status != 200 {
		t.Fatalf("first: %d", o.status)
	}
	// The first lease is capacity/20 = 5 tokens; one is used.
	d.now = d.now.Add(1100 * time.Millisecond)
	if o := d.do("alice"); o.status != 200 || o.calls != 1 {
		t.Fatalf("after expiry: status %d after %d calls, want a new lease", o.status, o.calls)
	}
	if got := d.counter("sluice.backend.lease_expired_tokens"); got != 4 {
		t.Fatalf("lease_expired_tokens = %d, want the 4 unused tokens", got)
	}
}

// TestHybridWaitsForEveryLimitsLease: a request under two hybrid limits,
// one served from its lease and one waiting for a lease call, is resumed
// when that call answers.
func TestHybridWaitsForEveryLimitsLease(t *testing.T) {
	fake := newFakeRedis(limiter.Limit{Algorithm: limiter.TokenBucket, Rate: 100, Period: time.Second}, backend.Webdis)
	all := `{"name":"all","key":[],"requests_per_second":100,"mode":"hybrid","failure_policy":"deny"}`
	cfg := strings.Replace(distConfig("hybrid", "deny", "webdis", all), `"requests_per_second":10`, `"requests_per_second":100`, 1)
	d := newDistHarness(t, cfg, fake)
	if o := d.do("alice"); o.status != 200 || o.calls != 2 {
		t.Fatalf("first request: status %d after %d calls, want 200 after a lease per limit", o.status, o.calls)
	}
	// bob has no lease under "api" yet; "all" serves him from its lease.
	o := d.do("bob")
	if o.status != 200 || o.calls != 1 {
		t.Fatalf("bob: status %d after %d calls, want 200 after one lease call", o.status, o.calls)
	}
	d.checkHeld(o)
}

// TestLateReplyDoesNotReachAReusedContext: a stream whose Redis call was
// retried from the tick (so the retry belongs to the plugin, and its reply
// outlives the stream) ends; the next stream reuses its context and waits
// on a call of its own. The retry's late reply must not decide it.
func TestLateReplyDoesNotReachAReusedContext(t *testing.T) {
	d := newDistHarness(t, distConfig("global", "deny", "webdis", ""), nil)
	old, a := d.start(keyHeaders("alice"))
	if a != Pause {
		t.Fatalf("action %v, want the request paused for Redis", a)
	}
	// No answer: past the 50ms timeout the tick retries, as the plugin.
	var retry *hosttest.Call
	for range 40 {
		d.now = d.now.Add(5 * time.Millisecond)
		d.tick()
		if calls := d.callsFrom(0); len(calls) > 0 {
			retry = calls[len(calls)-1]
			break
		}
	}
	if retry == nil {
		t.Fatal("the timed-out call was not retried from the tick")
	}
	ctx := d.streams[old]
	d.complete(old) // the client went away; its context is free
	next, a := d.start(keyHeaders("alice"))
	if a != Pause {
		t.Fatalf("action %v, want the new request paused for Redis", a)
	}
	if d.streams[next] != ctx {
		t.Fatal("the new stream does not reuse the ended one's context")
	}
	calls := d.callsFrom(next)
	if len(calls) != 1 {
		t.Fatalf("%d calls from the new stream, want 1", len(calls))
	}
	denied := []byte(`{"EVALSHA":[0,0,100,100,1,1800000000000000]}`)
	d.deliver(retry, 200, denied, true)
	if local := d.local(next); local != nil {
		t.Fatalf("the ended stream's reply answered the new stream: %d", local.Status)
	}
	if a := d.action(next); a != Pause {
		t.Fatalf("the ended stream's reply resumed the new stream (%v)", a)
	}
	allowed := []byte(`{"EVALSHA":[1,4,0,100,0,1800000000000000]}`)
	d.deliver(calls[0], 200, allowed, true)
	if local := d.local(next); local != nil {
		t.Fatalf("the new stream was answered locally: %d", local.Status)
	}
	if a := d.action(next); a != Continue {
		t.Fatalf("the new stream was not resumed by its own reply (%v)", a)
	}
}

// TestPausedRequestChargesItsOwnLocalKeys: a request waiting for Redis
// keeps its local limits' keys, though the next request's evaluation
// reuses the worker's key buffer in the meantime.
func TestPausedRequestChargesItsOwnLocalKeys(t *testing.T) {
	local := `{"name":"local","key":["header:x-key"],"requests_per_second":3}`
	d := newDistHarness(t, distConfig("global", "deny", "webdis", local), newFakeRedis(tenPerSecond, backend.Webdis))
	admitted := map[string]int{}
	start := func(key string) uint32 {
		id, a := d.start(keyHeaders(key))
		if a != Pause {
			t.Fatalf("%s: action %v, want paused for Redis", key, a)
		}
		return id
	}
	for range 2 {
		alice, carol := start("alice"), start("carol")
		d.pump()
		for key, id := range map[string]uint32{"alice": alice, "carol": carol} {
			if d.local(id) == nil && d.action(id) == Continue {
				admitted[key]++
			}
			d.complete(id)
		}
	}
	for range 3 {
		if o := d.do("alice"); o.status == 200 {
			admitted["alice"]++
		}
	}
	if admitted["alice"] != 3 || admitted["carol"] != 2 {
		t.Fatalf("admitted %v at one instant, want alice 3 (her local limit) and carol 2", admitted)
	}
}

// chargeConfig is distConfig's limit (10/s per x-key, 2 instances) with its
// cost taken from the response.
func chargeConfig(mode, policy string) string {
	return strings.Replace(distConfig(mode, policy, "webdis", ""), `"instances":2}`,
		`"instances":2,"cost_from_response":{"header":"x-tokens-used"}}`, 1)
}

// firstCharge starts a harness on chargeConfig(mode, "deny") whose first
// request, alice's, reports used as its response cost, and checks that
// the tick charged Redis once for it.
func firstCharge(t *testing.T, mode, used string) (*fakeRedis, *distHarness) {
	t.Helper()
	fake := newFakeRedis(tenPerSecond, backend.Webdis)
	d := newDistHarness(t, chargeConfig(mode, "deny"), fake)
	d.respHeaders = [][2]string{{"x-tokens-used", used}}
	if o := d.do("alice"); o.status != 200 {
		t.Fatalf("first: %d", o.status)
	}
	d.settle()
	if got := fake.calls["token_bucket_charge"]; got != 1 {
		t.Fatalf("%d charge calls, want 1", got)
	}
	return fake, d
}

func TestGlobalChargesTheResponseCost(t *testing.T) {
	fake, d := firstCharge(t, "global", "8")
	// One unit at admission and 7 charged: 2 of 10 left.
	if _, res := fake.lim.Decide(fake.state[backend.Key("api", limiter.TokenBucket, "alice")], d.now.UnixNano(), 0); res.Remaining != 2 {
		t.Fatalf("Redis holds %d units, want 2", res.Remaining)
	}
	// Admitted on one of the 2, then 15 charged: 14 past the 1 left, capped
	// at one bucket (10) past empty, so the next unit is 1.1s away.
	d.respHeaders = [][2]string{{"x-tokens-used", "15"}}
	if o := d.do("alice"); o.status != 200 {
		t.Fatalf("second: %d", o.status)
	}
	d.settle()
	// The charge put the key in the negative cache: refused without a call.
	if o := d.do("alice"); o.status != 429 || o.calls != 0 {
		t.Fatalf("in debt: status %d after %d calls, want a local 429 without a call", o.status, o.calls)
	}
	if got := d.counter("sluice.backend.negative_cache_hits"); got != 1 {
		t.Fatalf("negative cache hits %d, want 1", got)
	}
	if o := d.do("bob"); o.status != 200 {
		t.Fatalf("another key: %d", o.status)
	}
	d.now = d.now.Add(1100 * time.Millisecond)
	d.respHeaders = nil
	if o := d.do("alice"); o.status != 200 || o.calls != 1 {
		t.Fatalf("once a unit is back: status %d with %d calls", o.status, o.calls)
	}
	d.settle()
	if got := fake.calls["token_bucket_charge"]; got != 3 {
		// alice twice and bob once (15); the last answer reported nothing.
		t.Fatalf("%d charge calls, want 3", got)
	}
	if got := d.counter("sluice.limit.api.response_cost"); got != 8+15+15+1 {
		t.Fatalf("response_cost %d", got)
	}
}

func TestHybridChargesRedisAndStopsLeasing(t *testing.T) {
	fake, d := firstCharge(t, "hybrid", "30")
	// Redis is a bucket in debt. What is left of the lease this Envoy
	// already holds is still served (at most one lease, less than a
	// bucket); after that requests are refused locally, without asking
	// Redis, until the debt is repaid.
	leases := fake.calls["token_bucket_lease"]
	served := 0
	for {
		o := d.do("alice")
		if o.status == 429 {
			break
		}
		if o.status != 200 || o.calls != 0 {
			t.Fatalf("serving the held lease: status %d after %d calls", o.status, o.calls)
		}
		if served++; served >= 10 {
			t.Fatalf("served %d in debt: more than one lease can hold", served)
		}
	}
	for i := range 20 {
		if o := d.do("alice"); o.status != 429 || o.calls != 0 {
			t.Fatalf("request %d in debt: status %d after %d calls", i, o.status, o.calls)
		}
	}
	if fake.calls["token_bucket_lease"] != leases {
		t.Fatalf("%d lease calls while in debt", fake.calls["token_bucket_lease"]-leases)
	}
	d.respHeaders = nil
	d.now = d.now.Add(2 * time.Second)
	if o := d.do("alice"); o.status != 200 {
		t.Fatalf("after the debt is repaid: %d", o.status)
	}
}

// Under failure_policy local a charge Redis cannot take goes to the local
// fallback table, which admitted the request in the first place.
func TestChargeFallsBackLocally(t *testing.T) {
	d := newDistHarness(t, chargeConfig("global", "local"), nil)
	d.reply = func(*hosttest.Call) (int, []byte, bool) { return 503, nil, true }
	d.respHeaders = [][2]string{{"x-tokens-used", "5"}}
	// The fallback bucket is 10/s over 2 instances: 5, all of it charged.
	if o := d.do("alice"); o.status != 200 {
		t.Fatalf("first: %d", o.status)
	}
	d.settleN(10) // the charge, its retry after the backoff
	if o := d.do("alice"); o.status != 429 {
		t.Fatalf("after a charge of the whole fallback bucket: %d", o.status)
	}
}

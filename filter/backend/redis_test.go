package backend_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-proxy/sluice/filter/backend"
	"github.com/sluice-proxy/sluice/internal/fixtures/redistest"
	"github.com/sluice-proxy/sluice/internal/fixtures/upstash"
	"github.com/sluice-proxy/sluice/limiter"
)

// remote sends backend Requests over plain net/http, the way the filter
// will send them with proxy_http_call.
type remote struct {
	name   string
	ep     backend.Endpoint
	base   string
	client *http.Client
}

func (r *remote) send(t testing.TB, req backend.Request) (int, []byte, error) {
	t.Helper()
	var body io.Reader
	if req.Body != nil {
		body = bytes.NewReader(req.Body)
	}
	hr, err := http.NewRequest(req.Method, r.base+req.Path, body)
	if err != nil {
		t.Fatalf("building %s %s: %v", req.Method, req.Path, err)
	}
	// The path is already percent-encoded; keep it byte for byte.
	hr.URL.RawPath = req.Path
	hr.URL.Opaque = ""
	for _, h := range req.Headers {
		if !strings.HasPrefix(h[0], ":") {
			hr.Header.Set(h[0], h[1])
		}
	}
	resp, err := r.client.Do(hr)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// call runs c with EVALSHA and recovers from NOSCRIPT by loading the
// script once, as the filter will.
func (r *remote) call(t testing.TB, c backend.Command) (backend.Reply, error) {
	t.Helper()
	rep, err := r.once(t, c)
	if backend.KindOf(err) != backend.KindNoScript {
		return rep, err
	}
	status, body, err := r.send(t, r.ep.LoadScript(c.Script))
	if err != nil {
		return backend.Reply{}, err
	}
	if err := backend.ParseScriptLoad(r.ep.Protocol, status, body, c.Script); err != nil {
		return backend.Reply{}, err
	}
	return r.once(t, c)
}

func (r *remote) once(t testing.TB, c backend.Command) (backend.Reply, error) {
	t.Helper()
	req, err := r.ep.EvalSHA(c)
	if err != nil {
		t.Fatalf("encode: %v", err)
	}
	status, body, err := r.send(t, req)
	if err != nil {
		return backend.Reply{}, err
	}
	if c.Script.IsLease() {
		return backend.ParseLeaseReply(r.ep.Protocol, status, body)
	}
	return backend.ParseReply(r.ep.Protocol, status, body)
}

type fixture struct {
	redis   *redistest.Redis
	webdis  *redistest.Webdis
	rdb     *redis.Client
	remotes []*remote
}

const testToken = "test-token"

func newFixture(t testing.TB) *fixture {
	t.Helper()
	rs := redistest.StartRedis(t)
	wd := redistest.StartWebdis(t, rs.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr(), Protocol: 2, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	up := httptest.NewServer(upstash.New(rdb, testToken))
	t.Cleanup(up.Close)
	client := &http.Client{Timeout: 5 * time.Second}
	return &fixture{
		redis: rs, webdis: wd, rdb: rdb,
		remotes: []*remote{
			{name: "webdis", ep: backend.Endpoint{Protocol: backend.Webdis, Authority: "webdis"}, base: wd.URL(), client: client},
			{name: "upstash", ep: backend.Endpoint{Protocol: backend.Upstash, Authority: "upstash", Token: testToken}, base: up.URL, client: client},
		},
	}
}

// holdKey creates key with an unrelated field and an hour to live. Keys
// expire in real time while the step tests simulate time, so a short TTL
// set by a script could drop state the simulated clock still needs. The
// scripts only ever extend a TTL shorter than their reset time, so this
// one stays, and only the scripts' arithmetic is compared (TestExpiry
// covers the TTL logic).
func holdKey(t testing.TB, rdb *redis.Client, key string) {
	t.Helper()
	ctx := context.Background()
	if err := rdb.HSet(ctx, key, "held-by-test", "1").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.PExpire(ctx, key, time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
}

func ceilMillis(d time.Duration) time.Duration {
	return (d + time.Millisecond - 1) / time.Millisecond * time.Millisecond
}

// same compares a script reply with the local decision, at the
// millisecond precision the scripts report durations in.
func same(got backend.Reply, want limiter.Result) bool {
	return got.Allowed() == want.Allowed && got.Reason == want.Reason && got.Remaining == want.Remaining &&
		got.RetryAfter == ceilMillis(want.RetryAfter) && got.ResetAfter == ceilMillis(want.ResetAfter)
}

var compared = []limiter.Limit{
	{Algorithm: limiter.TokenBucket, Rate: 100, Period: time.Second, Burst: 20},
	{Algorithm: limiter.TokenBucket, Rate: 7, Period: time.Second, Burst: 3},
	{Algorithm: limiter.TokenBucket, Rate: 3, Period: 100 * time.Millisecond},
	{Algorithm: limiter.TokenBucket, Rate: 10000, Period: 24 * time.Hour, Burst: 5},
	{Algorithm: limiter.FixedWindow, Rate: 10, Period: time.Second},
	{Algorithm: limiter.FixedWindow, Rate: 5, Period: 250 * time.Millisecond},
	{Algorithm: limiter.SlidingWindow, Rate: 10, Period: time.Second},
	{Algorithm: limiter.SlidingWindow, Rate: 7, Period: 300 * time.Millisecond},
	{Algorithm: limiter.SlidingWindow, Rate: 1000, Period: time.Hour},
	// Near the edges of the range Decide accepts, where float64 in Lua
	// would first lose integers.
	{Algorithm: limiter.TokenBucket, Rate: 999_983, Period: time.Hour, Burst: 17},
	{Algorithm: limiter.SlidingWindow, Rate: (1 << 53) / (4 * 86_400_000_000), Period: 24 * time.Hour},
	{Algorithm: limiter.FixedWindow, Rate: 4_000_000_000, Period: time.Millisecond},
	// Sliding logs are sorted sets, which holdKey cannot hold, so their
	// windows are long instead: a script sets a TTL of at least its
	// window, in real time, which no run of this test reaches.
	{Algorithm: limiter.SlidingLog, Rate: 10, Period: time.Minute},
	{Algorithm: limiter.SlidingLog, Rate: 3, Period: 2 * time.Minute},
	{Algorithm: limiter.SlidingLog, Rate: 100, Period: 10 * time.Minute},
	{Algorithm: limiter.SlidingLog, Rate: limiter.MaxLogLimit, Period: time.Hour},
}

// TestScriptsMatchLimiter drives every script step by step with explicit
// instants (random gaps, random costs including invalid and oversize ones,
// clock steps backwards, charges into debt) and checks each reply against
// limiter.Decide and limiter.Charge.
func TestScriptsMatchLimiter(t *testing.T) {
	fx := newFixture(t)
	for _, rm := range fx.remotes {
		for li, l := range compared {
			t.Run(fmt.Sprintf("%s/%v_%d_per_%v_burst_%d", rm.name, l.Algorithm, l.Rate, l.Period, l.Burst), func(t *testing.T) {
				rng := rand.New(rand.NewSource(int64(li) + 1))
				key := fmt.Sprintf("cmp:%s:%d", rm.name, li)
				if l.Algorithm != limiter.SlidingLog {
					holdKey(t, fx.rdb, key)
				}
				var st limiter.State
				now := time.Unix(1_700_000_000, 0).Add(time.Duration(rng.Int63n(int64(l.Period))) / time.Microsecond * time.Microsecond)
				allowed, denied, charges := 0, 0, 0
				for step := 0; step < 300; step++ {
					switch k := rng.Intn(20); {
					case k == 19 && rng.Intn(3) == 0: // clock steps back beyond the tolerance
						span := time.Duration(l.Capacity()) * l.Period / time.Duration(l.Rate)
						now = now.Add(-limiter.ClockStepTolerance - time.Duration(rng.Int63n(int64(2*span)))/time.Microsecond*time.Microsecond)
					case k == 0: // clock steps back a little
						now = now.Add(-time.Duration(rng.Int63n(int64(l.Period))) / time.Microsecond * time.Microsecond)
					case k == 1: // idle for a while
						now = now.Add(time.Duration(rng.Int63n(3*int64(l.Period))) / time.Microsecond * time.Microsecond)
					case k < 12:
						now = now.Add(time.Duration(rng.Int63n(int64(l.Period)/int64(l.Rate)+1)) / time.Microsecond * time.Microsecond)
					}
					cost := int64(1)
					switch k := rng.Intn(20); {
					case k == 0:
						cost = 0
					case k == 1:
						cost = l.Capacity() + 1
					case k < 6:
						cost = 1 + rng.Int63n(l.Capacity())
					}
					// Token buckets also take charges: reported costs, up to
					// several capacities, that drive the key into debt.
					charge := l.Algorithm == limiter.TokenBucket && rng.Intn(4) == 0
					if charge && rng.Intn(3) == 0 {
						cost = rng.Int63n(3 * l.Capacity())
					}
					cmd, err := backend.Decide(l, key, cost)
					decide := l.Decide
					if charge {
						cmd, err = backend.Charge(l, key, cost)
						decide = l.Charge
					}
					if err != nil {
						t.Fatal(err)
					}
					got, err := rm.call(t, cmd.WithTime(now))
					if err != nil {
						t.Fatalf("step %d: %v", step, err)
					}
					next, want := decide(st, now.UnixNano(), cost)
					if charge {
						// A charge reply carries no retry time; the caller
						// derives it, never past the exact wait.
						if derived := backend.ChargeRetryAfter(l, got); derived > want.RetryAfter || derived < want.RetryAfter-2*time.Millisecond {
							t.Fatalf("step %d: derived retry %v, exact %v", step, derived, want.RetryAfter)
						}
						want.RetryAfter = 0
						charges++
					}
					if !same(got, want) {
						t.Fatalf("step %d at %v cost %d charge %v: script %+v, limiter %+v (state before %+v)", step, now.UnixMicro(), cost, charge, got, want, st)
					}
					if got.ServerMicros != now.UnixMicro() {
						t.Fatalf("script used time %d, want %d", got.ServerMicros, now.UnixMicro())
					}
					st = next
					if want.Allowed {
						allowed++
					} else {
						denied++
					}
				}
				if allowed == 0 || denied == 0 || (l.Algorithm == limiter.TokenBucket && charges == 0) {
					t.Fatalf("weak run: %d allowed, %d denied, %d charges", allowed, denied, charges)
				}
			})
		}
	}
}

// TestScriptsUseRedisTime runs without a time argument: the script reads
// Redis TIME, reports it, and the local limiter fed that same instant
// must agree on every decision across several refill periods.
func TestScriptsUseRedisTime(t *testing.T) {
	fx := newFixture(t)
	limits := []limiter.Limit{
		{Algorithm: limiter.TokenBucket, Rate: 5, Period: 50 * time.Millisecond, Burst: 2},
		{Algorithm: limiter.FixedWindow, Rate: 5, Period: 50 * time.Millisecond},
		{Algorithm: limiter.SlidingWindow, Rate: 5, Period: 50 * time.Millisecond},
		{Algorithm: limiter.SlidingLog, Rate: 5, Period: 50 * time.Millisecond},
	}
	for _, rm := range fx.remotes {
		for i, l := range limits {
			t.Run(rm.name+"/"+l.Algorithm.String(), func(t *testing.T) {
				key := fmt.Sprintf("time:%s:%d", rm.name, i)
				var st limiter.State
				start := int64(-1)
				allowed := 0
				for step := 0; ; step++ {
					cmd, _ := backend.Decide(l, key, 1)
					got, err := rm.call(t, cmd)
					if err != nil {
						t.Fatal(err)
					}
					if start < 0 {
						start = got.ServerMicros
					}
					next, want := l.Decide(st, got.ServerMicros*1000, 1)
					if !same(got, want) {
						t.Fatalf("step %d at %d: script %+v, limiter %+v", step, got.ServerMicros, got, want)
					}
					st = next
					if want.Allowed {
						allowed++
					}
					if got.ServerMicros-start > 4*l.Period.Microseconds() && step > 50 {
						break
					}
				}
				// Several periods passed, so refill must have admitted more than one period's worth.
				if int64(allowed) <= l.Capacity() {
					t.Fatalf("only %d allowed over 4 periods", allowed)
				}
			})
		}
	}
}

// TestLeaseMatchesReference runs the lease script against limiter's pure
// Lease (itself checked against Decide and a textbook bucket), with and
// without reserving ahead.
func TestLeaseMatchesReference(t *testing.T) {
	fx := newFixture(t)
	l := limiter.Limit{Rate: 50, Period: time.Second, Burst: 10}
	for _, rm := range fx.remotes {
		t.Run(rm.name, func(t *testing.T) {
			rng := rand.New(rand.NewSource(7))
			key := "lease:" + rm.name
			holdKey(t, fx.rdb, key)
			var st limiter.State
			now := time.Unix(1_700_000_000, 0)
			total, reserved := int64(0), 0
			for step := 0; step < 300; step++ {
				now = now.Add(time.Duration(rng.Int63n(int64(200*time.Millisecond))) / time.Microsecond * time.Microsecond)
				want := 1 + rng.Int63n(30)
				var ahead time.Duration
				if rng.Intn(3) > 0 {
					ahead = time.Duration(rng.Int63n(int64(400*time.Millisecond))) / time.Microsecond * time.Microsecond
				}
				cmd, err := backend.Lease(l, key, want, ahead)
				if err != nil {
					t.Fatal(err)
				}
				got, err := rm.call(t, cmd.WithTime(now))
				if err != nil {
					t.Fatal(err)
				}
				next, ref := l.Lease(st, now.UnixNano(), want, ahead)
				wait := ref.RetryAfter
				if ref.Granted > 0 {
					wait = ref.ReadyAfter
				}
				if got.Granted != ref.Granted || got.Remaining != ref.Remaining || got.ResetAfter != ceilMillis(ref.ResetAfter) ||
					got.RetryAfter != ceilMillis(wait) || got.Reason != ref.Reason {
					t.Fatalf("step %d want %d ahead %v: script %+v, reference %+v", step, want, ahead, got, ref)
				}
				if ref.ReadyAfter > 0 {
					reserved++
				}
				st = next
				total += ref.Granted
			}
			if total == 0 || reserved == 0 {
				t.Fatalf("leased %d, %d leases reserved ahead: the steps test too little", total, reserved)
			}
		})
	}
}

// TestConcurrentCallsNeverExceedCapacity races decisions and leases from
// many goroutines on one key whose refill is negligible during the test:
// exactly the capacity is handed out, never more.
func TestConcurrentCallsNeverExceedCapacity(t *testing.T) {
	fx := newFixture(t)
	l := limiter.Limit{Rate: 40, Period: time.Hour, Burst: 10} // one token per 90 s
	for _, rm := range fx.remotes {
		t.Run(rm.name, func(t *testing.T) {
			key := "race:" + rm.name
			var mu sync.Mutex
			granted := int64(0)
			var wg sync.WaitGroup
			errs := make(chan error, 16)
			for g := 0; g < 16; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < 10; i++ {
						var cmd backend.Command
						if (g+i)%2 == 0 {
							cmd, _ = backend.Decide(l, key, 1)
						} else {
							cmd, _ = backend.Lease(l, key, 3, time.Duration(g)*time.Millisecond)
						}
						r, err := rm.call(t, cmd)
						if err != nil {
							errs <- err
							return
						}
						mu.Lock()
						granted += r.Granted
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			if granted != l.Capacity() {
				t.Fatalf("granted %d, capacity %d", granted, l.Capacity())
			}
		})
	}
}

// TestKeysRoundTrip sends awkward keys and checks Redis stored exactly
// those bytes.
func TestKeysRoundTrip(t *testing.T) {
	fx := newFixture(t)
	keys := []string{"a/b", "a+b", "100%", "a%2fb", "with space", "k.json", "k.txt", "k.raw", "k.html", ".", "..", "x.", "~-_:", `"q"\`, "ünï", "tab\tnl\n", "a?b#c&d=e"}
	l := limiter.Limit{Rate: 10, Period: time.Second}
	ctx := context.Background()
	for _, rm := range fx.remotes {
		for _, k := range keys {
			key := rm.name + ":" + k
			cmd, _ := backend.Decide(l, key, 1)
			r, err := rm.call(t, cmd)
			if err != nil || !r.Allowed() {
				t.Fatalf("%s key %q: %+v %v", rm.name, key, r, err)
			}
			n, err := fx.rdb.Exists(ctx, key).Result()
			if err != nil || n != 1 {
				t.Errorf("%s key %q not stored under its own bytes (exists=%d, %v)", rm.name, key, n, err)
			}
		}
	}
	all, _ := fx.rdb.Keys(ctx, "*").Result()
	if len(all) != 2*len(keys) {
		t.Errorf("redis holds %d keys, want %d: %q", len(all), 2*len(keys), all)
	}
}

// TestExpiry checks the conditional PEXPIRE: a key lives at least until
// its reset time, and is not re-expired on every call.
func TestExpiry(t *testing.T) {
	fx := newFixture(t)
	ctx := context.Background()
	l := limiter.Limit{Rate: 10, Period: time.Minute}
	rm := fx.remotes[0]
	cmd, _ := backend.Decide(l, "ttl", 1)
	r, err := rm.call(t, cmd)
	if err != nil {
		t.Fatal(err)
	}
	ttl, _ := fx.rdb.PTTL(ctx, "ttl").Result()
	if ttl < r.ResetAfter {
		t.Fatalf("pttl %v shorter than reset %v", ttl, r.ResetAfter)
	}
	before, _ := redistest.CommandStats(fx.redis.Addr())
	for i := 0; i < 5; i++ {
		if _, err := rm.call(t, cmd); err != nil {
			t.Fatal(err)
		}
	}
	after, _ := redistest.CommandStats(fx.redis.Addr())
	if after["evalsha"]-before["evalsha"] != 5 {
		t.Fatalf("evalsha calls %d", after["evalsha"]-before["evalsha"])
	}
	// The first call set the TTL to twice its 6 s reset; the resets of
	// the next five are 12…36 s, and each refresh doubles, so at most two
	// of them (at 12 and 24 s) may refresh: not one per call.
	if d := after["pexpire"] - before["pexpire"]; d > 2 {
		t.Fatalf("%d PEXPIRE for 5 calls", d)
	}
	ttl, _ = fx.rdb.PTTL(ctx, "ttl").Result()
	if ttl < 36*time.Second-time.Second {
		t.Fatalf("pttl %v below the 36 s reset after 6 tokens", ttl)
	}
}

// TestNoScriptRecovery flushes the script cache and checks the first
// EVALSHA reports NOSCRIPT, SCRIPT LOAD fixes it, and EVAL works as a
// fallback with the full source in the URL or body.
func TestNoScriptRecovery(t *testing.T) {
	fx := newFixture(t)
	l := limiter.Limit{Algorithm: limiter.SlidingWindow, Rate: 10, Period: time.Second}
	for _, rm := range fx.remotes {
		t.Run(rm.name, func(t *testing.T) {
			if err := fx.rdb.ScriptFlush(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
			cmd, _ := backend.Decide(l, "ns:"+rm.name, 1)
			if _, err := rm.once(t, cmd); backend.KindOf(err) != backend.KindNoScript {
				t.Fatalf("after SCRIPT FLUSH: err = %v, want NOSCRIPT", err)
			}
			if r, err := rm.call(t, cmd); err != nil || !r.Allowed() {
				t.Fatalf("recovery: %+v %v", r, err)
			}
			if _, err := rm.once(t, cmd); err != nil {
				t.Fatalf("after load: %v", err)
			}
			fx.rdb.ScriptFlush(context.Background())
			req, err := rm.ep.Eval(cmd)
			if err != nil {
				t.Fatal(err)
			}
			status, body, err := rm.send(t, req)
			if err != nil {
				t.Fatal(err)
			}
			r, err := backend.ParseReply(rm.ep.Protocol, status, body)
			if err != nil || !r.Allowed() || r.Remaining != 7 {
				t.Fatalf("EVAL fallback: %+v %v", r, err)
			}
		})
	}
}

// TestRedisErrorsAreClassified covers a Redis error from the script
// (wrong key type) on both protocols.
func TestRedisErrorsAreClassified(t *testing.T) {
	fx := newFixture(t)
	ctx := context.Background()
	fx.rdb.Set(ctx, "str", "x", 0)
	l := limiter.Limit{Rate: 10, Period: time.Second}
	for _, rm := range fx.remotes {
		cmd, _ := backend.Decide(l, "str", 1)
		if _, err := rm.call(t, cmd); backend.KindOf(err) != backend.KindRedis {
			t.Errorf("%s: WRONGTYPE gave %v", rm.name, err)
		}
	}
	// Garbage stored in the fields reads as a fresh key, never as an error.
	fx.rdb.HSet(ctx, "junk", "at", "banana", "n", "-3")
	cmd, _ := backend.Decide(l, "junk", 1)
	if r, err := fx.remotes[0].call(t, cmd); err != nil || !r.Allowed() || r.Remaining != 9 {
		t.Errorf("garbage state: %+v %v", r, err)
	}
}

// TestRedisDown kills redis-server: Webdis answers 503 and the Upstash
// server 503, both classified as unavailable; after a restart (empty
// script cache) calls recover through NOSCRIPT.
func TestRedisDown(t *testing.T) {
	fx := newFixture(t)
	l := limiter.Limit{Rate: 10, Period: time.Second}
	cmd, _ := backend.Decide(l, "down", 1)
	for _, rm := range fx.remotes {
		if _, err := rm.call(t, cmd); err != nil {
			t.Fatalf("%s before kill: %v", rm.name, err)
		}
	}
	fx.redis.Kill()
	for _, rm := range fx.remotes {
		req, _ := rm.ep.EvalSHA(cmd)
		status, body, err := rm.send(t, req)
		if err != nil {
			t.Fatalf("%s: transport error %v; want an HTTP answer", rm.name, err)
		}
		_, perr := backend.ParseReply(rm.ep.Protocol, status, body)
		if backend.KindOf(perr) != backend.KindUnavailable {
			t.Errorf("%s with Redis down: HTTP %d %q → %v, want unavailable", rm.name, status, body, perr)
		}
		t.Logf("%s with Redis down: HTTP %d body %q → %v", rm.name, status, body, perr)
	}
	fx.redis.Restart()
	for _, rm := range fx.remotes {
		// Webdis reconnects on its own; poll with a deadline until it has.
		deadline := time.Now().Add(10 * time.Second)
		for {
			r, err := rm.call(t, cmd)
			if err == nil {
				if !r.Allowed() || r.Remaining != 9 {
					t.Fatalf("%s after restart: %+v (data should be empty)", rm.name, r)
				}
				break
			}
			if backend.KindOf(err) != backend.KindUnavailable || time.Now().After(deadline) {
				t.Fatalf("%s after restart: %v", rm.name, err)
			}
			<-time.After(20 * time.Millisecond)
		}
		cmd.Key += "2" // the next protocol starts from a fresh key too
	}
}

// TestWebdisFrozen: a stalled Webdis makes the request hang; the caller's
// timeout is what ends it. After SIGCONT calls work again.
func TestWebdisFrozen(t *testing.T) {
	fx := newFixture(t)
	rm := *fx.remotes[0]
	rm.client = &http.Client{Timeout: 200 * time.Millisecond}
	cmd, _ := backend.Decide(limiter.Limit{Rate: 10, Period: time.Second}, "frozen", 1)
	if _, err := rm.call(t, cmd); err != nil {
		t.Fatal(err)
	}
	fx.webdis.Stop()
	start := time.Now()
	_, err := rm.call(t, cmd)
	fx.webdis.Cont()
	if err == nil {
		t.Fatal("call to a frozen webdis succeeded")
	}
	if backend.KindOf(err) != 0 {
		t.Fatalf("timeout surfaced as a parse error: %v", err)
	}
	t.Logf("frozen webdis: %v after %v", err, time.Since(start).Round(time.Millisecond))
	rm.client = &http.Client{Timeout: 5 * time.Second}
	if r, err := rm.call(t, cmd); err != nil || !r.Allowed() {
		t.Fatalf("after SIGCONT: %+v %v", r, err)
	}
}

// TestWebdisBasicAuth checks the Authorization header the encoder builds
// is what a Webdis ACL expects, and that its absence is classified.
func TestWebdisBasicAuth(t *testing.T) {
	rs := redistest.StartRedis(t)
	wd := redistest.StartWebdisWith(t, rs.Addr(), redistest.WebdisOptions{BasicAuth: "user:s3cret"})
	client := &http.Client{Timeout: 5 * time.Second}
	cmd, _ := backend.Decide(limiter.Limit{Rate: 10, Period: time.Second}, "auth", 1)
	good := &remote{name: "auth", ep: backend.Endpoint{BasicAuth: "user:s3cret"}, base: wd.URL(), client: client}
	if r, err := good.call(t, cmd); err != nil || !r.Allowed() {
		t.Fatalf("with credentials: %+v %v", r, err)
	}
	bad := &remote{name: "noauth", ep: backend.Endpoint{}, base: wd.URL(), client: client}
	if _, err := bad.call(t, cmd); backend.KindOf(err) != backend.KindHTTPStatus {
		t.Fatalf("without credentials: %v, want an HTTP status error", err)
	}
}

// TestGarbageServer points the client at servers answering nonsense.
func TestGarbageServer(t *testing.T) {
	bodies := []struct {
		status int
		body   string
		kind   backend.Kind
	}{
		{200, "<html><body>It works!</body></html>", backend.KindMalformed},
		{200, `{"EVALSHA":"OK"}`, backend.KindMalformed},
		{200, `{"result":{"a":1}}`, backend.KindMalformed},
		{404, "not found", backend.KindHTTPStatus},
		{500, "", backend.KindUnavailable},
	}
	for _, b := range bodies {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(b.status)
			io.WriteString(w, b.body)
		}))
		for _, p := range []backend.Protocol{backend.Webdis, backend.Upstash} {
			rm := &remote{ep: backend.Endpoint{Protocol: p, Token: "t"}, base: srv.URL, client: srv.Client()}
			cmd, _ := backend.Decide(limiter.Limit{Rate: 1, Period: time.Second}, "g", 1)
			if _, err := rm.call(t, cmd); backend.KindOf(err) != b.kind {
				t.Errorf("%v, HTTP %d %q: %v, want %v", p, b.status, b.body, err, b.kind)
			}
		}
		srv.Close()
	}
}

// TestSlidingLogMembers checks the sorted set itself: a cost of n is n
// members, also when the clock comes back to a microsecond whose member
// names are partly taken, the key lives at least until its reset, and
// concurrent calls on Redis's own clock never admit more than the limit.
func TestSlidingLogMembers(t *testing.T) {
	fx := newFixture(t)
	ctx := context.Background()
	l := limiter.Limit{Algorithm: limiter.SlidingLog, Rate: 5, Period: time.Minute}
	t0 := time.Unix(1_700_000_000, 0)
	steps := []struct {
		at      time.Duration
		cost    int64
		members int64
	}{
		{-l.Period / 2, 2, 2},
		{0, 2, 4},
		// Removes the two oldest members: "t0:2" and "t0:3" stay, and
		// the count is 3.
		{l.Period/2 + time.Microsecond, 1, 3},
		// The clock comes back to t0, where the name chosen from the
		// count, "t0:3", is taken: it must not swallow a unit.
		{0, 2, 5},
	}
	for _, rm := range fx.remotes {
		t.Run(rm.name, func(t *testing.T) {
			key := "log:" + rm.name
			var st limiter.State
			for i, s := range steps {
				now := t0.Add(s.at)
				cmd, _ := backend.Decide(l, key, s.cost)
				got, err := rm.call(t, cmd.WithTime(now))
				if err != nil {
					t.Fatal(err)
				}
				var want limiter.Result
				st, want = l.Decide(st, now.UnixNano(), s.cost)
				if !same(got, want) {
					t.Fatalf("step %d: script %+v, limiter %+v", i, got, want)
				}
				if n, _ := fx.rdb.ZCard(ctx, key).Result(); n != s.members {
					t.Fatalf("step %d: %d members, want %d", i, n, s.members)
				}
				if ttl, _ := fx.rdb.PTTL(ctx, key).Result(); ttl < got.ResetAfter {
					t.Fatalf("step %d: pttl %v shorter than reset %v", i, ttl, got.ResetAfter)
				}
			}

			key = "log-race:" + rm.name
			var granted atomic.Int64
			var wg sync.WaitGroup
			for range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range 5 {
						cmd, _ := backend.Decide(l, key, 1)
						r, err := rm.call(t, cmd)
						if err != nil {
							t.Error(err)
							return
						}
						granted.Add(r.Granted)
					}
				}()
			}
			wg.Wait()
			if granted.Load() != l.Rate {
				t.Fatalf("granted %d in one window, limit %d", granted.Load(), l.Rate)
			}
		})
	}
}

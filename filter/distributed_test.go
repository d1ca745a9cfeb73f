package filter_test

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/proxytest"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/sluice-proxy/sluice/filter"
	"github.com/sluice-proxy/sluice/filter/backend"
	"github.com/sluice-proxy/sluice/filter/filtertest"
	"github.com/sluice-proxy/sluice/limiter"
)

// fakeRedis answers script calls the way Redis behind Webdis or Upstash
// would, deciding with the local limiter at the harness clock, so the
// filter's distributed flow can be checked against exact expectations.
type fakeRedis struct {
	lim      limiter.Limit
	state    map[string]limiter.State
	protocol backend.Protocol
	loaded   map[string]bool
	// calls counts script calls by script name, plus "SCRIPT LOAD".
	calls map[string]int
}

func newFakeRedis(lim limiter.Limit, p backend.Protocol) *fakeRedis {
	loaded := map[string]bool{}
	for _, s := range backend.Scripts() {
		loaded[s.SHA1] = true
	}
	return &fakeRedis{lim: lim, state: map[string]limiter.State{}, protocol: p, loaded: loaded, calls: map[string]int{}}
}

// command extracts the Redis command from a callout.
func (f *fakeRedis) command(t testing.TB, c proxytest.HttpCalloutAttribute) []string {
	t.Helper()
	if f.protocol == backend.Upstash {
		var args []string
		if err := json.Unmarshal(c.Body, &args); err != nil {
			t.Fatalf("upstash body %q: %v", c.Body, err)
		}
		return args
	}
	path := header(c.Headers, ":path")
	var args []string
	for _, seg := range strings.Split(strings.TrimPrefix(path, "/"), "/") {
		v, err := url.PathUnescape(seg)
		if err != nil {
			t.Fatalf("webdis path %q: %v", path, err)
		}
		args = append(args, v)
	}
	return args
}

func header(hs [][2]string, name string) string {
	for _, kv := range hs {
		if kv[0] == name {
			return kv[1]
		}
	}
	return ""
}

func (f *fakeRedis) envelope(cmd, value string) []byte {
	if f.protocol == backend.Upstash {
		return []byte(`{"result":` + value + `}`)
	}
	return []byte(`{"` + cmd + `":` + value + `}`)
}

func (f *fakeRedis) errorReply(cmd, msg string) []byte {
	if f.protocol == backend.Upstash {
		return []byte(`{"error":"` + msg + `"}`)
	}
	return []byte(`{"` + cmd + `":[false,"` + msg + `"]}`)
}

// answer decides the call at now and returns the HTTP status and body.
func (f *fakeRedis) answer(t testing.TB, c proxytest.HttpCalloutAttribute, now time.Time) (int, []byte) {
	t.Helper()
	args := f.command(t, c)
	if len(args) >= 3 && args[0] == "SCRIPT" && args[1] == "LOAD" {
		f.calls["SCRIPT LOAD"]++
		for _, s := range backend.Scripts() {
			if s.Source == args[2] {
				f.loaded[s.SHA1] = true
				return 200, f.envelope("SCRIPT", strconv.Quote(s.SHA1))
			}
		}
		t.Fatalf("SCRIPT LOAD of an unknown script")
	}
	if len(args) < 5 || args[0] != "EVALSHA" || args[2] != "1" {
		t.Fatalf("unexpected command %q", args)
	}
	if !f.loaded[args[1]] {
		return 200, f.errorReply("EVALSHA", "NOSCRIPT No matching script. Please use EVAL.")
	}
	s := backend.ScriptBySHA1(args[1])
	f.calls[s.Name]++
	key := args[3]
	n, _ := strconv.ParseInt(args[7], 10, 64)
	if s == backend.FixedWindowScript || s == backend.SlidingWindowScript || s == backend.SlidingLogScript {
		n, _ = strconv.ParseInt(args[6], 10, 64)
	}
	ns := now.UnixNano()
	st, ok := f.state[key]
	if !ok {
		st = limiter.State{} // a fresh key has its whole allowance
	}
	us := now.UnixMicro()
	if s == backend.ChargeScript {
		// The charge reply is granted with no retry time (see chargeBody).
		next, res := f.lim.Charge(st, ns, n)
		granted := 0
		if res.Allowed {
			f.state[key], granted = next, 1
		}
		return 200, f.envelope("EVALSHA", fmt.Sprintf("[%d,%d,0,%d,%d,%d]", granted, res.Remaining, ceilMS(res.ResetAfter), res.Reason, us))
	}
	if s == backend.LeaseScript {
		aheadUS, _ := strconv.ParseInt(args[8], 10, 64)
		next, res := f.lim.Lease(st, ns, n, time.Duration(aheadUS)*time.Microsecond)
		if debugLeases {
			fmt.Printf("lease t=%v want=%d ahead=%dus: %+v\n", now.Sub(filtertest.Epoch), n, aheadUS, res)
		}
		f.state[key] = next
		wait := res.RetryAfter
		if res.Granted > 0 {
			wait = res.ReadyAfter
		}
		return 200, f.envelope("EVALSHA", fmt.Sprintf("[%d,%d,%d,%d,%d,%d]", res.Granted, res.Remaining, ceilMS(wait), ceilMS(res.ResetAfter), res.Reason, us))
	}
	next, res := f.lim.Decide(st, ns, n)
	if res.Allowed {
		f.state[key] = next
		return 200, f.envelope("EVALSHA", fmt.Sprintf("[1,%d,0,%d,0,%d]", res.Remaining, ceilMS(res.ResetAfter), us))
	}
	return 200, f.envelope("EVALSHA", fmt.Sprintf("[0,%d,%d,%d,%d,%d]", res.Remaining, ceilMS(res.RetryAfter), ceilMS(res.ResetAfter), res.Reason, us))
}

var debugLeases = false

func ceilMS(d time.Duration) int64 { return int64((d + time.Millisecond - 1) / time.Millisecond) }

// distHarness drives the plugin on proxytest and plays the backend.
type distHarness struct {
	t    *testing.T
	host proxytest.HostEmulator
	now  time.Time
	fake *fakeRedis
	// reply overrides the fake for the next callouts when set: it returns
	// the status and body, or ok=false for "no response" (timeout).
	reply func(c proxytest.HttpCalloutAttribute) (status int, body []byte, ok bool)
	// silent makes callouts go unanswered, as with a frozen backend.
	silent bool
	// limits answers callouts to the "limits" cluster (external.go);
	// without it such a callout fails the test.
	limits func(c proxytest.HttpCalloutAttribute) (status int, body []byte, ok bool)
	seen   map[uint32]int
	ctxs   []uint32
	// callouts counts every callout the plugin made.
	callouts int
	// respHeaders are added to the upstream's response headers.
	respHeaders [][2]string
}

func newDistHarness(t *testing.T, cfg string, fake *fakeRedis) *distHarness {
	t.Helper()
	d := &distHarness{t: t, now: filtertest.Epoch, fake: fake, seen: map[uint32]int{}, ctxs: []uint32{proxytest.PluginContextID}}
	opt := proxytest.NewEmulatorOption().
		WithVMContext(filter.NewVMContextWithClock(func() time.Time { return d.now })).
		WithPluginConfiguration([]byte(cfg))
	host, reset := proxytest.NewHostEmulator(opt)
	t.Cleanup(reset)
	if st := host.StartPlugin(); st != types.OnPluginStartStatusOK {
		t.Fatalf("OnPluginStart failed: %v", host.GetCriticalLogs())
	}
	d.host = host
	return d
}

// pump answers every outstanding callout, newest first (proxytest reuses
// callout ids counted from the live ones, so answering the newest first
// keeps them unique). It reports how many it answered.
func (d *distHarness) pump() int {
	answered := 0
	for {
		var next *proxytest.HttpCalloutAttribute
		for _, ctx := range d.ctxs {
			infos := d.host.GetCalloutAttributesFromContext(ctx)
			if d.seen[ctx] < len(infos) {
				c := infos[d.seen[ctx]]
				d.seen[ctx]++
				next = &c
				break
			}
		}
		if next == nil {
			return answered
		}
		d.callouts++
		if next.Upstream != "redis" && (next.Upstream != "limits" || d.limits == nil) {
			d.t.Fatalf("callout to %q, want the backend cluster", next.Upstream)
		}
		if d.silent {
			continue
		}
		answered++
		status, body, ok := 0, []byte(nil), true
		if next.Upstream == "limits" {
			status, body, ok = d.limits(*next)
		} else if d.reply != nil {
			status, body, ok = d.reply(*next)
		} else {
			status, body = d.fake.answer(d.t, *next, d.now)
		}
		if !ok {
			d.host.CallOnHttpCallResponse(next.CalloutID, nil, nil, nil)
			continue
		}
		d.host.CallOnHttpCallResponse(next.CalloutID, [][2]string{{":status", strconv.Itoa(status)}}, nil, body)
	}
}

// settle steps the clock 5ms and ticks, so the tick sends what waits for
// it (charges, renewals, retries), and answers those calls.
func (d *distHarness) settle() {
	d.now = d.now.Add(5 * time.Millisecond)
	d.host.Tick()
	d.pump()
}

// admitted runs n requests of key and counts those answered 200.
func (d *distHarness) admitted(key string, n int) int {
	d.t.Helper()
	ok := 0
	for range n {
		if d.do(key).status == 200 {
			ok++
		}
	}
	return ok
}

type outcome struct {
	status int
	local  bool
	waited time.Duration
	// calls is the number of callouts made while this request ran.
	calls   int
	headers [][2]string
}

// do runs one request, answering callouts and ticking (5ms steps) until
// the filter resumes or answers it.
func (d *distHarness) do(key string) outcome {
	d.t.Helper()
	return d.doHeaders([][2]string{{":method", "GET"}, {":path", "/api"}, {":authority", "example.com"}, {"x-key", key}})
}

// doHeaders is do with the request's whole header map.
func (d *distHarness) doHeaders(hs [][2]string) outcome {
	d.t.Helper()
	id := d.host.InitializeHttpContext()
	d.ctxs = append(d.ctxs, id)
	before := d.callouts
	start := d.now
	action := d.host.CallOnRequestHeaders(id, hs, true)
	for {
		if local := d.host.GetSentLocalResponse(id); local != nil {
			d.host.CompleteHttpContext(id)
			return outcome{status: int(local.StatusCode), local: true, waited: d.now.Sub(start), calls: d.callouts - before, headers: local.Headers}
		}
		if action == types.ActionContinue {
			d.host.CallOnResponseHeaders(id, append([][2]string{{":status", "200"}}, d.respHeaders...), true)
			d.host.CompleteHttpContext(id)
			d.pump() // background renewals started by this request
			return outcome{status: 200, waited: d.now.Sub(start), calls: d.callouts - before}
		}
		if d.pump() == 0 {
			if d.now.Sub(start) > filtertest.MaxHold {
				d.t.Fatalf("request held for more than %v", filtertest.MaxHold)
			}
			if d.host.GetTickPeriod() == 0 {
				d.t.Fatal("request paused with no tick to resume it")
			}
			d.now = d.now.Add(5 * time.Millisecond)
			d.host.Tick()
		}
		action = d.host.GetCurrentHttpStreamAction(id)
	}
}

func (d *distHarness) counter(name string) uint64 {
	v, _ := d.host.GetCounterMetric(name)
	return v
}

// silentBudget bounds how long a request waits on distConfig's backend
// when it fails or never answers: the 50ms timeout × (retries+1) + 10ms
// backoff, plus the watchdog's slack and one tick of granularity per
// attempt.
const silentBudget = 2*50*time.Millisecond + 10*time.Millisecond + 2*(10+5)*time.Millisecond

// checkHeld fails the test when o waited longer than silentBudget.
func (d *distHarness) checkHeld(o outcome) {
	d.t.Helper()
	if o.waited > silentBudget {
		d.t.Fatalf("held %v, budget %v", o.waited, silentBudget)
	}
}

func distConfig(mode, policy, protocol string, extraLimit string) string {
	token := ""
	if protocol == "upstash" {
		token = `,"token":"secret"`
	}
	limits := `{"name":"api","key":["header:x-key"],"requests_per_second":10,"mode":"` + mode + `","failure_policy":"` + policy + `","instances":2}`
	if extraLimit != "" {
		limits += "," + extraLimit
	}
	return `{"limits":[` + limits + `],"backend":{"cluster":"redis","protocol":"` + protocol + `"` + token +
		`,"timeout":"50ms","retries":1,"failure_status":503,"breaker":{"failure_threshold":3,"window":"30s","open_timeout":"1s","half_open_max_requests":1}}}`
}

var tenPerSecond = limiter.Limit{Algorithm: limiter.TokenBucket, Rate: 10, Period: time.Second}

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
				d.reply = func(proxytest.HttpCalloutAttribute) (int, []byte, bool) {
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
	d.reply = func(proxytest.HttpCalloutAttribute) (int, []byte, bool) { return 503, nil, true }
	// 10/s divided by instances 2 = a local bucket of 5.
	if ok := d.admitted("alice", 8); ok != 5 {
		t.Fatalf("admitted %d under the local fallback, want 5", ok)
	}
}

func TestBackendBreakerOpensAndRecovers(t *testing.T) {
	fake := newFakeRedis(limiter.Limit{Algorithm: limiter.TokenBucket, Rate: 1000, Period: time.Second}, backend.Webdis)
	d := newDistHarness(t, distConfig("global", "deny", "webdis", ""), fake)
	down := true
	d.reply = func(c proxytest.HttpCalloutAttribute) (int, []byte, bool) {
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
			for _, ctx := range d.ctxs {
				for _, call := range d.host.GetCalloutAttributesFromContext(ctx) {
					d.host.CallOnHttpCallResponse(call.CalloutID, [][2]string{{":status", "200"}}, nil, []byte(`{"EVALSHA":[1,1,0,1,0,1]}`))
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
	opt := proxytest.NewEmulatorOption().WithVMContext(filter.NewVMContext()).WithPluginConfiguration([]byte(cfg))
	host, reset := proxytest.NewHostEmulator(opt)
	defer reset()
	if st := host.StartPlugin(); st != types.OnPluginStartStatusFailed {
		t.Fatal("hybrid sliding_window must fail OnPluginStart")
	}
}

func TestStreamEndingCancelsItsCall(t *testing.T) {
	d := newDistHarness(t, distConfig("global", "deny", "webdis", ""), nil)
	d.silent = true
	id := d.host.InitializeHttpContext()
	d.ctxs = append(d.ctxs, id)
	hs := [][2]string{{":method", "GET"}, {":path", "/api"}, {":authority", "example.com"}, {"x-key", "alice"}}
	if a := d.host.CallOnRequestHeaders(id, hs, true); a != types.ActionPause {
		t.Fatalf("action %v, want the request paused for Redis", a)
	}
	d.pump()
	d.host.CompleteHttpContext(id) // the client went away
	for range 60 {
		d.settle()
	}
	if d.callouts != 1 {
		t.Fatalf("%d callouts: the call of a finished stream was retried", d.callouts)
	}
	if got := d.counter("sluice.backend.errors.timeout"); got != 0 {
		t.Fatalf("a client going away counted %d backend timeouts", got)
	}
	if d.host.GetTickPeriod() != 0 {
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
		d.reply = func(proxytest.HttpCalloutAttribute) (int, []byte, bool) { return status, body, true }
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
	opt := proxytest.NewEmulatorOption().WithVMContext(filter.NewVMContext()).WithPluginConfiguration([]byte(cfg))
	host, reset := proxytest.NewHostEmulator(opt)
	defer reset()
	if st := host.StartPlugin(); st != types.OnPluginStartStatusOK {
		t.Fatalf("a config the parser accepts must start: %v", host.GetCriticalLogs())
	}
}

func TestHybridOneLeaseCallInFlightPerKey(t *testing.T) {
	fake := newFakeRedis(limiter.Limit{Algorithm: limiter.TokenBucket, Rate: 100, Period: time.Second}, backend.Webdis)
	cfg := strings.Replace(distConfig("hybrid", "deny", "webdis", ""), `"requests_per_second":10`, `"requests_per_second":100`, 1)
	d := newDistHarness(t, cfg, fake)
	d.silent = true
	hs := [][2]string{{":method", "GET"}, {":path", "/api"}, {":authority", "example.com"}, {"x-key", "alice"}}
	var ids []uint32
	for range 5 {
		id := d.host.InitializeHttpContext()
		d.ctxs = append(d.ctxs, id)
		ids = append(ids, id)
		if a := d.host.CallOnRequestHeaders(id, hs, true); a != types.ActionPause {
			t.Fatalf("action %v, want the request to wait for the lease", a)
		}
	}
	if d.pump(); d.callouts != 0 {
		t.Fatalf("%d lease calls sent from stream contexts; they must go from the tick", d.callouts)
	}
	d.settle()
	if d.callouts != 1 {
		t.Fatalf("%d lease calls for one key, want exactly 1 in flight", d.callouts)
	}
	// Answer it now: every waiting stream is served from the one lease.
	d.silent = false
	c := d.host.GetCalloutAttributesFromContext(proxytest.PluginContextID)[0]
	st, body := fake.answer(t, c, d.now)
	d.host.CallOnHttpCallResponse(c.CalloutID, [][2]string{{":status", strconv.Itoa(st)}}, nil, body)
	for _, id := range ids {
		if a := d.host.GetCurrentHttpStreamAction(id); a != types.ActionContinue {
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
	hs := [][2]string{{":method", "GET"}, {":path", "/api"}, {":authority", "example.com"}, {"x-key", "alice"}}
	old := d.host.InitializeHttpContext()
	if a := d.host.CallOnRequestHeaders(old, hs, true); a != types.ActionPause {
		t.Fatalf("action %v, want the request paused for Redis", a)
	}
	// No answer: past the 50ms timeout the tick retries, as the plugin.
	var retry *proxytest.HttpCalloutAttribute
	for range 40 {
		d.now = d.now.Add(5 * time.Millisecond)
		d.host.Tick()
		if calls := d.host.GetCalloutAttributesFromContext(proxytest.PluginContextID); len(calls) > 0 {
			retry = &calls[len(calls)-1]
			break
		}
	}
	if retry == nil {
		t.Fatal("the timed-out call was not retried from the tick")
	}
	d.host.CompleteHttpContext(old) // the client went away; its context is free
	next := d.host.InitializeHttpContext()
	if a := d.host.CallOnRequestHeaders(next, hs, true); a != types.ActionPause {
		t.Fatalf("action %v, want the new request paused for Redis", a)
	}
	calls := d.host.GetCalloutAttributesFromContext(next)
	if len(calls) != 1 {
		t.Fatalf("%d calls from the new stream, want 1", len(calls))
	}
	denied := []byte(`{"EVALSHA":[0,0,100,100,1,1800000000000000]}`)
	d.host.CallOnHttpCallResponse(retry.CalloutID, [][2]string{{":status", "200"}}, nil, denied)
	if local := d.host.GetSentLocalResponse(next); local != nil {
		t.Fatalf("the ended stream's reply answered the new stream: %d", local.StatusCode)
	}
	if a := d.host.GetCurrentHttpStreamAction(next); a != types.ActionPause {
		t.Fatalf("the ended stream's reply resumed the new stream (%v)", a)
	}
	allowed := []byte(`{"EVALSHA":[1,4,0,100,0,1800000000000000]}`)
	d.host.CallOnHttpCallResponse(calls[0].CalloutID, [][2]string{{":status", "200"}}, nil, allowed)
	if local := d.host.GetSentLocalResponse(next); local != nil {
		t.Fatalf("the new stream was answered locally: %d", local.StatusCode)
	}
	if a := d.host.GetCurrentHttpStreamAction(next); a != types.ActionContinue {
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
		id := d.host.InitializeHttpContext()
		d.ctxs = append(d.ctxs, id)
		hs := [][2]string{{":method", "GET"}, {":path", "/api"}, {":authority", "example.com"}, {"x-key", key}}
		if a := d.host.CallOnRequestHeaders(id, hs, true); a != types.ActionPause {
			t.Fatalf("%s: action %v, want paused for Redis", key, a)
		}
		return id
	}
	for range 2 {
		alice, carol := start("alice"), start("carol")
		d.pump()
		for key, id := range map[string]uint32{"alice": alice, "carol": carol} {
			if d.host.GetSentLocalResponse(id) == nil && d.host.GetCurrentHttpStreamAction(id) == types.ActionContinue {
				admitted[key]++
			}
			d.host.CompleteHttpContext(id)
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

package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/filter/backend"
	"github.com/sluice-proxy/sluice/filter/host/hosttest"
	"github.com/sluice-proxy/sluice/internal/fixtures/testkit"
	"github.com/sluice-proxy/sluice/limiter"
)

// The tests of global, hybrid and external limits drive a plugin over the
// host fakes, playing the adapter (streams begun and reused, the tick run
// while the engine keeps it, call replies delivered in the root context)
// and the backends its callouts reach.

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
func (f *fakeRedis) command(t testing.TB, c *hosttest.Call) []string {
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
func (f *fakeRedis) answer(t testing.TB, c *hosttest.Call, now time.Time) (int, []byte) {
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
			fmt.Printf("lease t=%v want=%d ahead=%dus: %+v\n", now.Sub(epoch), n, aheadUS, res)
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

// epoch is where the harness clock starts, the instant filtertest.Epoch
// names (the replies below carry it as Redis TIME); filtertest itself is
// not imported, as its cases read ../examples when it loads.
var epoch = time.Unix(1_800_000_000, 0)

// maxHold bounds how long a request may be held, as filtertest.MaxHold.
const maxHold = 5 * time.Second

// distHarness drives a plugin on the host fakes and plays the backend.
type distHarness struct {
	t    *testing.T
	p    *Plugin
	f    *hosttest.Fakes
	now  time.Time
	fake *fakeRedis
	// reply overrides the fake for the next callouts when set: it returns
	// the status and body, or ok=false for "no response" (timeout).
	reply func(c *hosttest.Call) (status int, body []byte, ok bool)
	// silent makes callouts go unanswered, as with a frozen backend.
	silent bool
	// limits answers callouts to the "limits" cluster (external.go);
	// without it such a callout fails the test.
	limits func(c *hosttest.Call) (status int, body []byte, ok bool)
	// streams are the open streams by id, and verdicts what their request
	// phase returned; free are ended streams, reused as the adapter reuses
	// its contexts. Ids count up from 1, the root context being 0.
	streams  map[uint32]*Stream
	verdicts map[uint32]Verdict
	free     []*Stream
	lastID   uint32
	// seen are the calls pump has handled; calls before firstUnseen all
	// are.
	seen        map[*hosttest.Call]bool
	firstUnseen int
	// callouts counts every callout the plugin made.
	callouts int
	// respHeaders are added to the upstream's response headers.
	respHeaders [][2]string
}

func newDistHarness(t *testing.T, cfg string, fake *fakeRedis) *distHarness {
	t.Helper()
	d := &distHarness{t: t, now: epoch, fake: fake,
		streams: map[uint32]*Stream{}, verdicts: map[uint32]Verdict{}, seen: map[*hosttest.Call]bool{}}
	hc, f := hosttest.New(d.now)
	hc.Clock = func() time.Time { return d.now }
	d.f, d.p = f, NewVM(hc).NewPlugin()
	if !d.p.Start([]byte(cfg)) {
		t.Fatalf("Start failed: %v", f.Log.Lines)
	}
	return d
}

// start begins a stream of request headers hs and runs its request phase.
// The names reach the engine lower-case, as Envoy hands them over.
func (d *distHarness) start(hs [][2]string) (uint32, Verdict) {
	d.lastID++
	id := d.lastID
	s := &Stream{}
	if n := len(d.free); n > 0 {
		s, d.free = d.free[n-1], d.free[:n-1]
	}
	lower := make([][2]string, len(hs))
	for i, kv := range hs {
		lower[i] = [2]string{strings.ToLower(kv[0]), kv[1]}
	}
	d.f.Stream.Headers, d.f.Stream.Current = lower, id
	d.p.Begin(s, id)
	d.streams[id] = s
	d.verdicts[id] = s.RequestHeaders()
	return id, d.verdicts[id]
}

// startWaiting begins n streams of hs, each of which must wait for what
// (a lease, a lookup) without a call of its own: the tick sends it.
func (d *distHarness) startWaiting(n int, hs [][2]string, what string) []uint32 {
	d.t.Helper()
	var ids []uint32
	for range n {
		id, a := d.start(hs)
		ids = append(ids, id)
		if a != Pause {
			d.t.Fatalf("action %v, want the request to wait for the %s", a, what)
		}
	}
	if d.pump(); d.callouts != 0 {
		d.t.Fatalf("%d %s calls sent from stream contexts; they must go from the tick", d.callouts, what)
	}
	return ids
}

// action is Continue once stream id's request may go upstream: its phase
// returned Continue, or the engine resumed it since.
func (d *distHarness) action(id uint32) Verdict {
	if d.verdicts[id] == Continue {
		return Continue
	}
	for _, r := range d.f.Stream.Resumed {
		if r == id {
			return Continue
		}
	}
	return Pause
}

// local is the local reply sent for stream id, nil if none.
func (d *distHarness) local(id uint32) *hosttest.Reply {
	for i, r := range d.f.Stream.Replies {
		if r.Stream == id {
			return &d.f.Stream.Replies[i]
		}
	}
	return nil
}

// respond runs stream id's response phase on response headers hs.
func (d *distHarness) respond(id uint32, hs [][2]string) {
	d.f.Stream.Current, d.f.Stream.ResponseHeaderMap = id, hs
	d.streams[id].ResponseHeaders()
}

// complete ends stream id and keeps its Stream for reuse.
func (d *distHarness) complete(id uint32) {
	s := d.streams[id]
	d.f.Stream.Current = id
	s.Done()
	delete(d.streams, id)
	d.free = append(d.free, s)
}

// tick runs the plugin's tick, in the root context.
func (d *distHarness) tick() {
	d.f.Stream.Current = 0
	d.p.Tick()
}

// deliver answers c in the root context, with status as the host reads
// it from the reply's :status header, or with no response when !ok.
func (d *distHarness) deliver(c *hosttest.Call, status int, body []byte, ok bool) {
	d.f.Stream.Current = 0
	if !ok {
		c.NoReply()
		return
	}
	c.Reply(StatusCode(strconv.Itoa(status)), body)
}

// callsFrom are the calls sent from context ctx (0 for the root), oldest
// first, answered or not.
func (d *distHarness) callsFrom(ctx uint32) []*hosttest.Call {
	var calls []*hosttest.Call
	for _, c := range d.f.Caller.Calls {
		if c.From == ctx {
			calls = append(calls, c)
		}
	}
	return calls
}

// next is the oldest call pump has not handled of the earliest context
// (the root, then streams in the order they began), nil when none.
func (d *distHarness) next() *hosttest.Call {
	calls := d.f.Caller.Calls
	for d.firstUnseen < len(calls) && d.seen[calls[d.firstUnseen]] {
		d.firstUnseen++
	}
	var best *hosttest.Call
	for _, c := range calls[d.firstUnseen:] {
		if !d.seen[c] && (best == nil || c.From < best.From) {
			best = c
		}
	}
	return best
}

// pump answers every outstanding callout and reports how many it
// answered.
func (d *distHarness) pump() int {
	answered := 0
	for {
		c := d.next()
		if c == nil {
			return answered
		}
		d.seen[c] = true
		d.callouts++
		if c.Cluster != "redis" && (c.Cluster != "limits" || d.limits == nil) {
			d.t.Fatalf("callout to %q, want the backend cluster", c.Cluster)
		}
		if d.silent {
			continue
		}
		answered++
		status, body, ok := 0, []byte(nil), true
		if c.Cluster == "limits" {
			status, body, ok = d.limits(c)
		} else if d.reply != nil {
			status, body, ok = d.reply(c)
		} else {
			status, body = d.fake.answer(d.t, c, d.now)
		}
		d.deliver(c, status, body, ok)
	}
}

// settle steps the clock 5ms and ticks, so the tick sends what waits for
// it (charges, renewals, retries), and answers those calls.
func (d *distHarness) settle() {
	d.now = d.now.Add(5 * time.Millisecond)
	d.tick()
	d.pump()
}

// settleN settles n times: n × 5 ms of harness time.
func (d *distHarness) settleN(n int) {
	for range n {
		d.settle()
	}
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

type served struct {
	status int
	local  bool
	waited time.Duration
	// calls is the number of callouts made while this request ran.
	calls   int
	headers [][2]string
}

// keyHeaders are the request headers of a request of key.
func keyHeaders(key string) [][2]string {
	return [][2]string{{":method", "GET"}, {":path", "/api"}, {":authority", "example.com"}, {"x-key", key}}
}

// do runs one request, answering callouts and ticking (5ms steps) until
// the filter resumes or answers it.
func (d *distHarness) do(key string) served {
	d.t.Helper()
	return d.doHeaders(keyHeaders(key))
}

// doHeaders is do with the request's whole header map.
func (d *distHarness) doHeaders(hs [][2]string) served {
	d.t.Helper()
	before := d.callouts
	start := d.now
	id, _ := d.start(hs)
	for {
		if local := d.local(id); local != nil {
			d.complete(id)
			return served{status: local.Status, local: true, waited: d.now.Sub(start), calls: d.callouts - before, headers: local.Headers}
		}
		if d.action(id) == Continue {
			d.respond(id, append([][2]string{{":status", "200"}}, d.respHeaders...))
			d.complete(id)
			d.pump() // background renewals started by this request
			return served{status: 200, waited: d.now.Sub(start), calls: d.callouts - before}
		}
		if d.pump() == 0 {
			if d.now.Sub(start) > maxHold {
				d.t.Fatalf("request held for more than %v", maxHold)
			}
			if d.f.Ticker.Period == 0 {
				d.t.Fatal("request paused with no tick to resume it")
			}
			d.now = d.now.Add(5 * time.Millisecond)
			d.tick()
		}
	}
}

// webdisReply answers callouts from the real Webdis at url, over HTTP on
// 127.0.0.1, as Envoy would forward them to the cluster.
func webdisReply(t *testing.T, url string) func(c *hosttest.Call) (int, []byte, bool) {
	return func(c *hosttest.Call) (int, []byte, bool) {
		status, _, body, err := testkit.RoundTrip(context.Background(), header(c.Headers, ":method"), url+header(c.Headers, ":path"), c.Headers, c.Body)
		if err != nil {
			t.Fatalf("webdis: %v", err)
		}
		return status, body, true
	}
}

func (d *distHarness) counter(name string) uint64 { return d.f.Metrics.Values[name] }

// silentBudget bounds how long a request waits on distConfig's backend
// when it fails or never answers: the 50ms timeout × (retries+1) + 10ms
// backoff, plus the watchdog's slack and one tick of granularity per
// attempt.
const silentBudget = 2*50*time.Millisecond + 10*time.Millisecond + 2*(10+5)*time.Millisecond

// checkHeld fails the test when o waited longer than silentBudget.
func (d *distHarness) checkHeld(o served) {
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

package e2e_test

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/e2e/envoy"
	"github.com/sluice-proxy/sluice/filter/backend"
	"github.com/sluice-proxy/sluice/internal/fixtures/bootstrap"
	"github.com/sluice-proxy/sluice/internal/fixtures/redistest"
	"github.com/sluice-proxy/sluice/internal/fixtures/upstash"
)

// distProtocol is how a test reaches Redis: through webdis or through
// our Upstash-protocol server, both over the same real redis-server.
type distProtocol string

const (
	viaWebdis  distProtocol = "webdis"
	viaUpstash distProtocol = "upstash"
)

const upstashToken = "sluice-e2e-token"

// distBackend is a running Redis with its HTTP front.
type distBackend struct {
	redis  *redistest.Redis
	webdis *redistest.Webdis
	// addr is the host:port the Envoy "redis" cluster points at.
	addr     string
	protocol distProtocol
	gate     *holdGate // the Upstash front's
}

// holdGate makes a test's HTTP front hang like a stopped or slow process:
// requests wait while it is held.
type holdGate struct {
	mu sync.Mutex
	ch chan struct{} // closed unless held
}

func newHoldGate() *holdGate {
	g := &holdGate{ch: make(chan struct{})}
	close(g.ch)
	return g
}

// hold makes requests wait from now on, until release.
func (g *holdGate) hold() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.ch:
		g.ch = make(chan struct{})
	default:
	}
}

func (g *holdGate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.ch:
	default:
		close(g.ch)
	}
}

// wait returns once the gate is not held, or false when ctx ends first.
func (g *holdGate) wait(ctx context.Context) bool {
	g.mu.Lock()
	ch := g.ch
	g.mu.Unlock()
	select {
	case <-ch:
		return true
	case <-ctx.Done():
		return false
	}
}

func startDistBackend(t *testing.T, p distProtocol) *distBackend {
	t.Helper()
	r := redistest.StartRedis(t)
	b := &distBackend{redis: r, protocol: p}
	switch p {
	case viaWebdis:
		b.webdis = redistest.StartWebdis(t, r.Addr())
		b.addr = b.webdis.Addr()
	case viaUpstash:
		h := upstash.New(r.Client(), upstashToken)
		b.gate = newHoldGate()
		ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			if b.gate.wait(req.Context()) {
				h.ServeHTTP(w, req)
			}
		}))
		t.Cleanup(func() {
			b.thaw()
			ts.CloseClientConnections()
			ts.Close()
		})
		b.addr = ts.Listener.Addr().String()
	}
	return b
}

// freeze makes the HTTP front hang like a stopped process: webdis gets
// SIGSTOP, the Upstash server holds every request until thaw.
func (b *distBackend) freeze() {
	if b.webdis != nil {
		b.webdis.Stop()
		return
	}
	b.gate.hold()
}

func (b *distBackend) thaw() {
	if b.webdis != nil {
		b.webdis.Cont()
		return
	}
	b.gate.release()
}

// evalCalls is how many script calls Redis has run (EVALSHA and EVAL).
func (b *distBackend) evalCalls(t *testing.T) int64 {
	t.Helper()
	st, err := redistest.CommandStats(b.redis.Addr())
	if err != nil {
		t.Fatalf("INFO commandstats: %v", err)
	}
	return st["evalsha"] + st["eval"]
}

// preloadScripts loads the filter's scripts up front, so they answer
// every call the first time and Redis's call count is exactly the
// filter's decisions and charges.
func (b *distBackend) preloadScripts(t *testing.T) {
	t.Helper()
	for _, s := range backend.Scripts() {
		if err := b.redis.Client().ScriptLoad(context.Background(), s.Source).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// waitEvalCalls waits for Redis to have run n script calls since it had
// run before: charges are sent from the tick after the response.
func (b *distBackend) waitEvalCalls(t *testing.T, before, n int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for b.evalCalls(t)-before < n {
		if time.Now().After(deadline) {
			t.Fatalf("Redis ran %d script calls, want %d", b.evalCalls(t)-before, n)
		}
		time.Sleep(5 * time.Millisecond) // polling a real condition with a deadline
	}
}

// backendBlock is the plugin's "backend" JSON for b, with extra fields
// (without braces) appended.
func (b *distBackend) backendBlock(extra string) string {
	s := `"cluster":"redis","protocol":"` + string(b.protocol) + `"`
	if b.protocol == viaUpstash {
		s += `,"token":"` + upstashToken + `"`
	}
	if extra != "" {
		s += "," + extra
	}
	return `"backend":{` + s + `}`
}

// uniqueKey makes a key no other run can have used: redis-servers of
// other test processes may sit on recycled ports, and a key they share
// would start with someone else's consumption.
func uniqueKey(base string) string {
	return fmt.Sprintf("%s-%d", base, time.Now().UnixNano())
}

// distYAML is a bootstrap with one listener running the plugin in front
// of the echo backend, and a "redis" cluster at redisAddr.
func distYAML(wasm, pluginJSON, backendAddr, redisAddr string) string {
	return pluginYAML(wasm, pluginJSON, backendAddr, map[string]string{"redis": redisAddr})
}

// pluginYAML is a bootstrap with one listener running the plugin in front
// of the echo backend, and a cluster per entry of clusters (name →
// address) for proxy_http_call. An empty pluginJSON leaves only the
// router, the baseline the proxy benchmark compares against.
func pluginYAML(wasm, pluginJSON, backendAddr string, clusters map[string]string) string {
	return pluginBootstrap(wasm, pluginJSON, backendAddr, clusters).YAML()
}

// pluginBootstrap is pluginYAML's bootstrap, for a test to change before
// writing it.
func pluginBootstrap(wasm, pluginJSON, backendAddr string, clusters map[string]string) bootstrap.Bootstrap {
	var filters []string
	if pluginJSON != "" {
		// On one line, as this helper has always handed it to the
		// plugin, so no test's configuration text changed with the builder.
		filters = append(filters, bootstrap.Wasm{Code: wasm, Configuration: strings.ReplaceAll(pluginJSON, "\n", " ")}.Filter())
	}
	b := bootstrap.Bootstrap{
		Listener: bootstrap.Listener{
			Name:            "ingress",
			RouteConfigName: "local_route",
			VirtualHosts: []bootstrap.VirtualHost{{Name: "backend", Domains: []string{"*"}, Routes: []bootstrap.Route{
				{Name: "default", Match: `prefix: "/"`, Action: "cluster: backend, timeout: 15s"},
			}}},
			HTTPFilters: filters,
		},
		Clusters: []bootstrap.Cluster{{Name: "backend", Type: "STATIC", ConnectTimeout: time.Second, Endpoints: []string{backendAddr}}},
	}
	for _, name := range slices.Sorted(maps.Keys(clusters)) {
		b.Clusters = append(b.Clusters, bootstrap.Cluster{Name: name, Type: "STATIC", ConnectTimeout: 250 * time.Millisecond, Endpoints: []string{clusters[name]}})
	}
	return b
}

// distInstance is one running Envoy stand-in.
type distInstance struct {
	srv  *envoy.Server
	base string
}

// startDistInstances starts n instances of the host, each with 2 workers
// and its own shared data, all sharing redisAddr.
func startDistInstances(t *testing.T, n int, pluginJSON, redisAddr string) []*distInstance {
	t.Helper()
	return startInstances(t, n, func(wasm, backendAddr string) string {
		return distYAML(wasm, pluginJSON, backendAddr, redisAddr)
	}, envoy.Options{})
}

// startInstances starts n instances of the bootstrap that bootstrap
// renders for the built wasm and a fresh echo backend, with opts (2
// workers and no logs unless set).
func startInstances(t *testing.T, n int, bootstrap func(wasm, backendAddr string) string, opts envoy.Options) []*distInstance {
	t.Helper()
	wasm := builtWasm(t)
	be := echoBackend(t)
	if opts.Concurrency == 0 {
		opts.Concurrency = 2
	}
	if opts.Logger == nil {
		opts.Logger = envoy.NewLogger(io.Discard, envoy.LevelOff)
	}
	var out []*distInstance
	for range n {
		cfg, err := envoy.Load([]byte(bootstrap(wasm, be)))
		if err != nil {
			t.Fatalf("loading the bootstrap: %v", err)
		}
		srv := envoy.NewServer(cfg, opts)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		err = srv.Start(ctx)
		cancel()
		if err != nil {
			t.Fatalf("Start: %v", err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_ = srv.Shutdown(ctx)
		})
		out = append(out, &distInstance{srv: srv, base: "http://" + srv.ListenerAddr("ingress")})
	}
	return out
}

// metric reads a plugin metric summed over the instance's workers.
func (d *distInstance) metric(name string) uint64 {
	st := d.srv.Runtime().Stats()
	if v, ok := st.Lookup(name); ok {
		return v
	}
	v, _ := st.Lookup("wasmcustom." + name)
	return v
}

func sumMetric(insts []*distInstance, name string) uint64 {
	var s uint64
	for _, in := range insts {
		s += in.metric(name)
	}
	return s
}

var distClient = &http.Client{
	Transport: &http.Transport{MaxIdleConnsPerHost: 64, MaxConnsPerHost: 64},
	Timeout:   10 * time.Second,
}

// hit sends one request with x-key: key and returns the status and how
// long it took.
func hit(t *testing.T, url, key string) (int, time.Duration) {
	return hitWith(t, url, "x-key", key)
}

func hitWith(t *testing.T, url, header, key string) (int, time.Duration) {
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Error(err)
		return 0, 0
	}
	req.Header.Set(header, key)
	start := time.Now()
	resp, err := distClient.Do(req)
	if err != nil {
		t.Errorf("GET %s: %v", url, err)
		return 0, time.Since(start)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, time.Since(start)
}

// tally counts statuses safely across goroutines.
type tally struct {
	mu     sync.Mutex
	counts map[int]int
	max    time.Duration
}

func (ta *tally) add(status int, d time.Duration) {
	ta.mu.Lock()
	defer ta.mu.Unlock()
	if ta.counts == nil {
		ta.counts = map[int]int{}
	}
	ta.counts[status]++
	if d > ta.max {
		ta.max = d
	}
}

func (ta *tally) get(status int) int {
	ta.mu.Lock()
	defer ta.mu.Unlock()
	return ta.counts[status]
}

// burst sends n concurrent requests for key spread over the instances.
func burst(t *testing.T, insts []*distInstance, path, key string, n int) *tally {
	var ta tally
	var wg sync.WaitGroup
	sem := make(chan struct{}, 48)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			st, d := hit(t, insts[i%len(insts)].base+path, key)
			ta.add(st, d)
		}()
	}
	wg.Wait()
	return &ta
}

// paced offers rate requests/s in total for dur, spread over the
// instances, and returns the tally and the time from first to last send.
func paced(t *testing.T, insts []*distInstance, path, key string, rate int, dur time.Duration) (*tally, time.Duration) {
	var ta tally
	var wg sync.WaitGroup
	var sent atomic.Int64
	interval := time.Second / time.Duration(rate)
	sem := make(chan struct{}, 96)
	start := time.Now()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	i := 0
	for now := range tick.C {
		if now.Sub(start) >= dur {
			break
		}
		// Catch up when the ticker fell behind, so the offered load holds.
		due := int(now.Sub(start)/interval) + 1
		for ; i < due; i++ {
			select {
			case sem <- struct{}{}:
			default:
				ta.add(-1, 0) // the client could not keep up: not offered
				continue
			}
			wg.Add(1)
			sent.Add(1)
			go func(i int) {
				defer wg.Done()
				defer func() { <-sem }()
				st, d := hit(t, insts[i%len(insts)].base+path, key)
				ta.add(st, d)
			}(i)
		}
	}
	elapsed := time.Since(start)
	wg.Wait()
	return &ta, elapsed
}

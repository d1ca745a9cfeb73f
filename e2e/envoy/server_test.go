package envoy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/e2e/host"
	"github.com/sluice-proxy/sluice/internal/fixtures/bootstrap"
	"github.com/sluice-proxy/sluice/internal/fixtures/echo"
	"github.com/sluice-proxy/sluice/internal/fixtures/testkit"
)

// routerOnly is the route table the stand-in's own tests run on: in-test
// backends a (by IP) and b (by name), round robin over both, a cluster
// nothing listens on, and a route with a short timeout. Without wasm the
// HCM, router and cluster behaviour is tested on its own.
type routerOnly struct {
	aPort, bPort, downPort  string
	useRemote, mergeSlashes bool
	// wasm is a module to run before the router with an empty
	// configuration; "" for none. wasmName names its plugin ("sluice"
	// when empty).
	wasm, wasmName string
}

func (r routerOnly) yaml() string {
	var filters []string
	if r.wasm != "" {
		filters = append(filters, bootstrap.Wasm{Name: r.wasmName, Code: r.wasm, Configuration: "{}"}.Filter())
	}
	return bootstrap.Bootstrap{
		Listener: bootstrap.Listener{
			UseRemoteAddress: r.useRemote,
			MergeSlashes:     r.mergeSlashes,
			RouteConfigName:  "local_route",
			VirtualHosts: []bootstrap.VirtualHost{
				{Name: "api", Domains: []string{"api.example.com"}, Routes: []bootstrap.Route{
					{Match: `prefix: "/"`, Action: "cluster: b"},
				}},
				{Name: "all", Domains: []string{"*"}, Routes: []bootstrap.Route{
					{Name: "exact", Match: `path: "/exact"`, Action: "cluster: b"},
					{Name: "pick", Match: `prefix: "/pick", headers: [{name: X-Pick, present_match: true}]`, Action: "cluster_header: X-Pick"},
					{Name: "pick-default", Match: `prefix: "/pick"`, Action: "cluster: a"},
					{Name: "nc", Match: `prefix: "/nc"`, Action: "cluster_header: x-pick"},
					{Name: "nc-404", Match: `prefix: "/nf"`, Action: "cluster_header: x-pick, cluster_not_found_response_code: NOT_FOUND"},
					{Name: "canary", Match: `prefix: "/env", headers: [{name: x-env, string_match: {exact: canary}}]`, Action: "cluster: b"},
					{Name: "not-canary", Match: `prefix: "/env", headers: [{name: x-env, string_match: {exact: canary}, invert_match: true}]`, Action: "cluster: a"},
					{Match: `prefix: "/rr"`, Action: "cluster: rr"},
					{Match: `prefix: "/down"`, Action: "cluster: down"},
					{Name: "slow", Match: `safe_regex: { regex: "/delay/.*" }`, Action: "cluster: a, timeout: 0.2s"},
					{Name: "a-prefix", Match: `prefix: "/a/"`, Action: "cluster: a"},
				}},
			},
			HTTPFilters: filters,
		},
		Clusters: []bootstrap.Cluster{
			{Name: "a", Type: "STATIC", Endpoints: []string{"127.0.0.1:" + r.aPort}},
			{Name: "b", Type: "STRICT_DNS", DNSLookupFamily: "V4_ONLY", Endpoints: []string{"localhost:" + r.bPort}},
			{Name: "rr", Type: "STATIC", Endpoints: []string{"127.0.0.1:" + r.aPort, "127.0.0.1:" + r.bPort}},
			{Name: "down", Type: "STATIC", ConnectTimeout: time.Second, Endpoints: []string{"127.0.0.1:" + r.downPort}},
		},
		StatsTags: []bootstrap.StatsTag{{Name: "sluice_limit", Regex: `^(?:wasmcustom\.)?sluice\.limit\.((.+?)\.)`}},
	}.YAML()
}

type testEnv struct {
	srv      *Server
	base     string // http://listener
	admin    string // http://admin
	logs     *testkit.SyncBuffer
	backendA string
}

func backend(t *testing.T, name string) string {
	t.Helper()
	ts := httptest.NewServer(echo.Handler(name))
	t.Cleanup(ts.Close)
	_, port, _ := net.SplitHostPort(ts.Listener.Addr().String())
	return port
}

// wasmModule finds a module built by `make build`. Without it the test
// cannot prove anything: in CI that is a failure, locally a skip.
func wasmModule(t testing.TB, name string) string {
	t.Helper()
	return testkit.Built(t, filepath.Join("..", "..", "build", name))
}

func startEnv(t *testing.T, r routerOnly, concurrency int) *testEnv {
	t.Helper()
	return startEnvProfile(t, r, concurrency, "")
}

// startEnvProfile serves r, with in-test backends a and b and a closed
// down port wherever r leaves a port empty.
func startEnvProfile(t *testing.T, r routerOnly, concurrency int, profile host.Profile) *testEnv {
	t.Helper()
	if r.aPort == "" {
		r.aPort = backend(t, "a")
	}
	if r.bPort == "" {
		r.bPort = backend(t, "b")
	}
	if r.downPort == "" {
		_, r.downPort, _ = net.SplitHostPort(testkit.ClosedAddr(t))
	}
	y := r.yaml()
	path := filepath.Join(t.TempDir(), "envoy.yaml")
	if err := os.WriteFile(path, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	logs := &testkit.SyncBuffer{}
	srv := NewServer(cfg, Options{Concurrency: concurrency, Profile: profile, Logger: NewLogger(logs, LevelDebug)})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := srv.Start(ctx); err != nil {
		t.Fatalf("Start: %v\nlogs:\n%s", err, logs)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	env := &testEnv{srv: srv, base: "http://" + srv.ListenerAddr("main"), admin: "http://" + srv.AdminAddr(), logs: logs, backendA: r.aPort}
	waitReady(t, env.admin)
	return env
}

// startServer starts cfg with opts and shuts the server down when the
// test ends.
func startServer(tb testing.TB, cfg *Config, opts Options) *Server {
	tb.Helper()
	srv := NewServer(cfg, opts)
	if err := srv.Start(context.Background()); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	return srv
}

// waitReady polls /ready until it says LIVE.
func waitReady(t *testing.T, admin string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		resp, err := http.Get(admin + "/ready")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 && string(b) == "LIVE\n" {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("admin /ready never reported LIVE (last error %v)", err)
		}
		<-tick.C
	}
}

type result struct {
	status int
	header http.Header
	body   string
	echo   echo.Reply
}

// do sends one request on a fresh connection unless client is given.
func do(t *testing.T, client *http.Client, method, url string, hdr map[string]string, body string) result {
	t.Helper()
	if client == nil {
		client = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	}
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		if strings.EqualFold(k, "host") {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	r := result{status: resp.StatusCode, header: resp.Header, body: string(b)}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		if err := json.Unmarshal(b, &r.echo); err != nil {
			t.Fatalf("echo reply %q: %v", b, err)
		}
	}
	return r
}

var uuidRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func first(h map[string][]string, k string) string {
	if v := h[k]; len(v) > 0 {
		return v[0]
	}
	return ""
}

func TestServeRouting(t *testing.T) {
	env := startEnv(t, routerOnly{}, 2)

	r := do(t, nil, "GET", env.base+"/a/x?q=1", nil, "")
	if r.status != 200 || r.echo.Name != "a" || r.echo.Path != "/a/x?q=1" {
		t.Fatalf("GET /a/x: %d %+v", r.status, r.echo)
	}
	h := r.echo.Headers
	if first(h, "x-forwarded-proto") != "http" {
		t.Errorf("x-forwarded-proto = %q, want http (set when absent)", first(h, "x-forwarded-proto"))
	}
	if _, ok := h["x-forwarded-for"]; ok {
		t.Errorf("x-forwarded-for = %q; with use_remote_address false Envoy adds none", h["x-forwarded-for"])
	}
	if !uuidRE.MatchString(first(h, "x-request-id")) {
		t.Errorf("x-request-id = %q, want a generated UUIDv4", first(h, "x-request-id"))
	}
	if first(h, "x-envoy-expected-rq-timeout-ms") != "15000" {
		t.Errorf("x-envoy-expected-rq-timeout-ms = %q, want the 15s default", first(h, "x-envoy-expected-rq-timeout-ms"))
	}
	for k := range h {
		if strings.HasPrefix(k, ":") {
			t.Errorf("pseudo header %q leaked upstream", k)
		}
	}
	if r.header.Get("Server") != "envoy" || r.header.Get("X-Envoy-Upstream-Service-Time") == "" {
		t.Errorf("response headers = %v, want server: envoy and x-envoy-upstream-service-time", r.header)
	}

	r = do(t, nil, "GET", env.base+"/a/y", map[string]string{"X-Forwarded-For": "203.0.113.7", "X-Request-Id": "client-id"}, "")
	if got := first(r.echo.Headers, "x-forwarded-for"); got != "203.0.113.7" {
		t.Errorf("x-forwarded-for = %q, want it passed on untouched", got)
	}
	if got := first(r.echo.Headers, "x-request-id"); got != "client-id" {
		t.Errorf("x-request-id = %q, want the client's kept", got)
	}

	r = do(t, nil, "POST", env.base+"/a/post", map[string]string{"Content-Type": "text/plain"}, "hello body")
	if r.status != 200 || r.echo.Method != "POST" || r.echo.Body != "hello body" {
		t.Errorf("POST: %d %+v", r.status, r.echo)
	}

	tests := []struct {
		name, path, host string
		status           int
		backend          string
		bodyHas          string
	}{
		{"exact path", "/exact", "", 200, "b", ""},
		{"exact path ignores the query", "/exact?x=1", "", 200, "b", ""},
		{"exact path is not a prefix", "/exact/more", "", 404, "", ""},
		{"virtual host by authority wins over *", "/a/x", "api.example.com", 200, "b", ""},
		{"STRICT_DNS cluster resolves localhost", "/exact", "", 200, "b", ""},
		{"no route", "/nothing", "", 404, "", ""},
		{"connection refused", "/down", "", 503, "", "upstream connect error"},
		{"route timeout", "/delay/10s", "", 504, "", "upstream request timeout"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			hdr := map[string]string{}
			if tc.host != "" {
				hdr["Host"] = tc.host
			}
			r := do(t, nil, "GET", env.base+tc.path, hdr, "")
			if r.status != tc.status {
				t.Fatalf("status = %d, want %d (body %q)", r.status, tc.status, r.body)
			}
			if tc.backend != "" && r.echo.Name != tc.backend {
				t.Errorf("served by %q, want %q", r.echo.Name, tc.backend)
			}
			if !strings.Contains(r.body, tc.bodyHas) {
				t.Errorf("body %q does not contain %q", r.body, tc.bodyHas)
			}
			if tc.status == 404 && r.body != "" {
				t.Errorf("route_not_found body = %q, want empty", r.body)
			}
		})
	}

	// Round robin per request over the cluster's endpoints.
	seen := map[string]int{}
	var order []string
	for i := 0; i < 6; i++ {
		r := do(t, nil, "GET", env.base+"/rr", nil, "")
		seen[r.echo.Name]++
		order = append(order, r.echo.Name)
	}
	if seen["a"] != 3 || seen["b"] != 3 {
		t.Errorf("round robin order %v, want a and b three times each", order)
	}
	for i := 1; i < len(order); i++ {
		if order[i] == order[i-1] {
			t.Errorf("round robin order %v repeats an endpoint back to back", order)
			break
		}
	}
}

func TestServeUseRemoteAddress(t *testing.T) {
	env := startEnv(t, routerOnly{useRemote: true}, 1)
	r := do(t, nil, "GET", env.base+"/a/x", map[string]string{"X-Forwarded-For": "203.0.113.7", "X-Forwarded-Proto": "https"}, "")
	h := r.echo.Headers
	if got := first(h, "x-forwarded-for"); got != "203.0.113.7,127.0.0.1" {
		t.Errorf("x-forwarded-for = %q, want the peer appended", got)
	}
	if got := first(h, "x-forwarded-proto"); got != "http" {
		t.Errorf("x-forwarded-proto = %q, want it overwritten with the real scheme", got)
	}
	if got := first(h, "x-envoy-internal"); got != "true" {
		t.Errorf("x-envoy-internal = %q, want true for a loopback peer", got)
	}
}

var workerLogRE = regexp.MustCompile(`\[worker (\d+)\] GET /a/(\S+) `)

// TestServeWorkers checks connection-to-worker binding: new connections go
// round robin over the workers and every request on a connection stays on
// its worker.
func TestServeWorkers(t *testing.T) {
	env := startEnv(t, routerOnly{}, 2)
	for i := 0; i < 4; i++ {
		do(t, nil, "GET", fmt.Sprintf("%s/a/fresh%d", env.base, i), nil, "")
	}
	keep := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1}}
	for i := 0; i < 3; i++ {
		do(t, keep, "GET", fmt.Sprintf("%s/a/kept%d", env.base, i), nil, "")
	}
	workers := map[string]string{}
	for _, m := range workerLogRE.FindAllStringSubmatch(env.logs.String(), -1) {
		workers[m[2]] = m[1]
	}
	for i := 0; i < 4; i++ {
		want := fmt.Sprint(i % 2)
		if got := workers[fmt.Sprintf("fresh%d", i)]; got != want {
			t.Errorf("connection %d ran on worker %q, want %s (round robin); log:\n%s", i, got, want, env.logs)
		}
	}
	if workers["kept0"] == "" || workers["kept1"] != workers["kept0"] || workers["kept2"] != workers["kept0"] {
		t.Errorf("requests on one connection ran on workers %q %q %q, want one worker", workers["kept0"], workers["kept1"], workers["kept2"])
	}
}

func TestAdmin(t *testing.T) {
	env := startEnv(t, routerOnly{}, 2)
	r := do(t, nil, "GET", env.admin+"/server_info", nil, "")
	var info struct {
		State   string `json:"state"`
		Options struct {
			Concurrency int `json:"concurrency"`
		} `json:"command_line_options"`
	}
	if err := json.Unmarshal([]byte(r.body), &info); err != nil || info.State != "LIVE" || info.Options.Concurrency != 2 {
		t.Errorf("server_info = %q (%v)", r.body, err)
	}
	r = do(t, nil, "GET", env.admin+"/listeners", nil, "")
	if want := "main::" + strings.TrimPrefix(env.base, "http://") + "\n"; r.body != want {
		t.Errorf("/listeners = %q, want %q", r.body, want)
	}
	if r := do(t, nil, "GET", env.admin+"/quitquitquit", nil, ""); r.status != http.StatusMethodNotAllowed {
		t.Errorf("GET /quitquitquit = %d, want 405", r.status)
	}
	select {
	case <-env.srv.Quit():
		t.Fatal("Quit closed by a GET")
	default:
	}
	if r := do(t, nil, "POST", env.admin+"/quitquitquit", nil, ""); r.status != 200 {
		t.Errorf("POST /quitquitquit = %d", r.status)
	}
	select {
	case <-env.srv.Quit():
	case <-time.After(10 * time.Second):
		t.Fatal("Quit not closed after POST /quitquitquit")
	}
}

// TestServeWasm runs the real filter module through the full path: two
// workers, real requests, router errors flowing back through the plugin,
// and the plugin's metrics on /stats/prometheus.
func TestServeWasm(t *testing.T) {
	for _, profile := range []host.Profile{host.ProfileEnvoy139, host.ProfileEnvoy133} {
		t.Run(string(profile), func(t *testing.T) { testServeWasm(t, profile) })
	}
}

func testServeWasm(t *testing.T, profile host.Profile) {
	wasm := wasmModule(t, "sluice.wasm")
	env := startEnvProfile(t, routerOnly{wasm: wasm}, 2, profile)
	if got := env.srv.Runtime().Profile(); got != profile {
		t.Fatalf("runtime profile %q, want %q", got, profile)
	}
	if got := len(env.srv.Plugins()); got != 1 {
		t.Fatalf("%d plugins, want 1", got)
	}
	const n = 10
	for i := 0; i < n; i++ {
		r := do(t, nil, "GET", fmt.Sprintf("%s/a/%d", env.base, i), nil, "")
		if r.status != 200 || r.echo.Name != "a" {
			t.Fatalf("request %d: %d %q", i, r.status, r.body)
		}
	}
	for _, tc := range []struct {
		path   string
		status int
	}{{"/nothing", 404}, {"/down", 503}, {"/delay/10s", 504}} {
		if r := do(t, nil, "GET", env.base+tc.path, nil, ""); r.status != tc.status {
			t.Errorf("%s through wasm = %d %q, want %d", tc.path, r.status, r.body, tc.status)
		}
	}
	for w := 0; w < 2; w++ {
		if env.srv.Plugins()[0].Failed(w) {
			t.Errorf("worker %d VM failed", w)
		}
	}
	prom := do(t, nil, "GET", env.admin+"/stats/prometheus", nil, "").body
	if !regexp.MustCompile(`(?m)^sluice_requests_total 13$`).MatchString(prom) {
		t.Errorf("/stats/prometheus lacks sluice_requests_total 13:\n%s", prom)
	}
	text := do(t, nil, "GET", env.admin+"/stats", nil, "").body
	if !strings.Contains(text, "sluice.requests_total: 13") {
		t.Errorf("/stats lacks sluice.requests_total: 13:\n%s", text)
	}
	if got := do(t, nil, "GET", env.admin+"/stats?filter=requests_total$", nil, "").body; got != "sluice.requests_total: 13\n" {
		t.Errorf("/stats?filter=requests_total$ = %q", got)
	}
	if r := do(t, nil, "GET", env.admin+"/stats?filter=(", nil, ""); r.status != 400 {
		t.Errorf("bad filter regex: status %d, want 400", r.status)
	}
}

// TestServeNoopWasmPassesThrough checks the SDK no-op module changes
// nothing about requests or responses.
func TestServeNoopWasmPassesThrough(t *testing.T) {
	wasm := wasmModule(t, "noop.wasm")
	env := startEnv(t, routerOnly{wasm: wasm}, 2)
	r := do(t, nil, "POST", env.base+"/a/x?y=1", map[string]string{"X-Custom": "v"}, "payload")
	if r.status != 200 || r.echo.Body != "payload" || r.echo.Path != "/a/x?y=1" || first(r.echo.Headers, "x-custom") != "v" {
		t.Errorf("through noop: %d %+v", r.status, r.echo)
	}
}

func TestStartFailsOnMissingWasm(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "absent.wasm")
	cfg, err := Load([]byte(routerOnly{aPort: "1", bPort: "2", downPort: "3", wasm: missing}.yaml()))
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(cfg, Options{Concurrency: 1, Logger: NewLogger(io.Discard, LevelOff)})
	err = srv.Start(context.Background())
	if err == nil {
		srv.Shutdown(context.Background())
		t.Fatal("Start succeeded without the wasm file")
	}
	if !strings.Contains(err.Error(), "absent.wasm") {
		t.Errorf("error %q does not name the file", err)
	}
}

// TestRepoEnvoyYAMLServes runs the shipped envoy/envoy.yaml itself, with
// only the addresses moved to free ports and the backend to a test server,
// so `make run` is known to work end to end.
func TestRepoEnvoyYAMLServes(t *testing.T) {
	wasm := wasmModule(t, "sluice.wasm")
	cfg, err := LoadFile("../../envoy/envoy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Listeners[0].Address = "127.0.0.1:0"
	cfg.Admin.Address = "127.0.0.1:0"
	for _, c := range cfg.Clusters {
		if c.Name == "backend" {
			c.Endpoints = []string{"127.0.0.1:" + backend(t, "repo")}
		}
	}
	// The file names build/sluice.wasm relative to the repository root.
	cfg.Listeners[0].HTTPFilters[0].Wasm.CodeFile = wasm
	srv := startServer(t, cfg, Options{Concurrency: 2, Logger: NewLogger(io.Discard, LevelOff)})
	base, admin := "http://"+srv.ListenerAddr(cfg.Listeners[0].Name), "http://"+srv.AdminAddr()
	waitReady(t, admin)
	r := do(t, nil, "GET", base+"/hello", map[string]string{"X-Forwarded-For": "203.0.113.9"}, "")
	if r.status != 200 || r.echo.Name != "repo" {
		t.Fatalf("through envoy.yaml: %d %q", r.status, r.body)
	}
	if got := first(r.echo.Headers, "x-forwarded-for"); got != "203.0.113.9,127.0.0.1" {
		t.Errorf("x-forwarded-for = %q; envoy.yaml sets use_remote_address, so the peer must be appended", got)
	}
	if prom := do(t, nil, "GET", admin+"/stats/prometheus", nil, "").body; !strings.Contains(prom, "sluice_requests_total 1") {
		t.Errorf("/stats/prometheus:\n%s", prom)
	}
}

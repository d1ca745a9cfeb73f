package ops

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/filter/backend"
)

// Usage and configuration mistakes are named before anything is sent,
// with exit code 2.
func TestQuotaRefusesBadUsage(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "c.json")
	cfg := `{"limits":[{"name":"loc","key":["header:x-k"],"requests_per_second":1},
	  {"name":"glob","key":["header:x-k","host"],"requests_per_second":1,"mode":"global"}],
	  "backend":{"cluster":"redis"}}`
	if err := os.WriteFile(file, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	// Nothing listens here: every case must fail before any call.
	const nowhere = "http://127.0.0.1:9"
	t.Setenv(envBackendToken, "")
	t.Setenv(envAdminToken, "")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "get or reset comes first"},
		{[]string{"peek"}, `unknown action "peek"`},
		{[]string{"get", "--limit", "x"}, "--config is required; exactly one of --webdis, --upstash or --envoy is required"},
		{[]string{"get", "--config", file, "--limit", "glob", "--webdis", nowhere, "--upstash", nowhere}, "exactly one of"},
		{[]string{"get", "--config", file, "--limit", "nope", "--key", "a", "--webdis", nowhere}, `has no limit "nope"`},
		{[]string{"get", "--config", file, "--limit", "glob", "--key", "a", "--webdis", nowhere}, "has 2 key parts (header:x-k+host), got 1 values"},
		{[]string{"get", "--config", file, "--limit", "loc", "--key", "a", "--webdis", nowhere}, `limit "loc" is local`},
		{[]string{"get", "--config", file, "--limit", "glob", "--key", "a", "--key", "h", "--upstash", nowhere}, "SLUICE_BACKEND_TOKEN"},
		{[]string{"reset", "--config", file, "--limit", "glob", "--key", "a", "--key", "h", "--webdis", "redis:6379"}, "not an http(s) URL"},
		{[]string{"get", "--config", file, "--limit", "loc", "--key", "a", "--envoy", nowhere}, "has no admin block"},
	} {
		var out, errOut bytes.Buffer
		code := Main(append([]string{"quota"}, tc.args...), &out, &errOut)
		if code != exitUsage || !strings.Contains(errOut.String(), tc.want) || out.Len() != 0 {
			t.Errorf("%q: exit %d, stderr %q, stdout %q; want exit 2 naming %q", tc.args, code, errOut.String(), out.String(), tc.want)
		}
	}
}

// The text form is the one the README's runbook shows.
func TestPrintQuotaText(t *testing.T) {
	n := int64(20)
	var out bytes.Buffer
	printQuota(&out, quotaState{Limit: "checkout", Mode: "hybrid", Algorithm: "token_bucket", Capacity: 100,
		RedisKey: "sluice:checkout:3b1f0c8e2d5a4f6b9c7e1d2a3b4c5d6e", ResetAfterMS: 12500, ResetAt: time.Date(2026, 11, 26, 14, 40, 12, 500e6, time.UTC), Reserved: &n}, false)
	want := `limit:          checkout (hybrid, token_bucket)
redis key:      sluice:checkout:3b1f0c8e2d5a4f6b9c7e1d2a3b4c5d6e
remaining:      0 of 100 (used 100)
full again in:  12.5s (2026-11-26T14:40:12.5Z)
leases ahead:   20
`
	if out.String() != want {
		t.Fatalf("printed\n%s\nwant\n%s", out.String(), want)
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), want) {
		t.Fatal("README.md's quota get sample is not what sluicectl prints")
	}
}

// quota names the Redis key explain shows for a request carrying the
// same values: a masked client address is masked alike.
func TestQuotaKeyIsExplainsKey(t *testing.T) {
	cfg := `{"limits":[{"name":"subnet","key":["client_ip/24/56"],"requests_per_second":5,"mode":"global"}],"backend":{"cluster":"redis"}}`
	file := filepath.Join(t.TempDir(), "c.json")
	if err := os.WriteFile(file, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	ex, err := Explain([]byte(cfg), Request{Method: "GET", Path: "/", Authority: "h", Client: "127.0.5.9:4000"}, time.Now(), false)
	if err != nil || len(ex.Limits) != 1 || ex.Limits[0].RedisKey == "" {
		t.Fatalf("explain: %+v %v", ex, err)
	}
	_, lim, q, err := quotaLimit(&quotaArgs{configFile: file, limit: "subnet", keys: keyValues{"127.0.5.9"}, webdis: "http://127.0.0.1:9"})
	if err != nil {
		t.Fatal(err)
	}
	if got := backend.Key(lim.Name, lim.Rate.Limiter(lim.Algorithm).Algorithm, q.Key); got != ex.Limits[0].RedisKey {
		t.Fatalf("quota targets %s, explain shows %s", got, ex.Limits[0].RedisKey)
	}
}

// quota --envoy trusts nothing but the admin route's own answer: it
// follows no redirect (the token would go along), and a 200 whose body is
// not the state of the limit asked for (a catch-all route's {}) is an
// error, never "limit: (, )" with exit 0.
func TestQuotaEnvoyRefusesRedirectsAndStrangeReplies(t *testing.T) {
	const good = `{"limit":"loc","mode":"local","algorithm":"token_bucket","capacity":3,"remaining":1,"reset_after_ms":20}`
	var elsewhereHits atomic.Int32
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		elsewhereHits.Add(1)
		_, _ = io.WriteString(w, good)
	}))
	defer elsewhere.Close()
	replies := map[string]http.HandlerFunc{
		"a redirect": func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, elsewhere.URL+r.URL.RequestURI(), http.StatusFound)
		},
		"an empty object": func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "{}") },
		"another limit's state": func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, strings.Replace(good, `"loc"`, `"other"`, 1))
		},
		"a get's answer to a reset": func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, good) },
	}
	// The limit qq is a token bucket of capacity 5 without overrides:
	// replies the admin route never gives for it. Each is served as
	// application/json unless it says otherwise.
	const qq = `{"limit":"qq","mode":"local","algorithm":"token_bucket","capacity":5,"remaining":4,"reset_after_ms":720000}`
	for name, body := range map[string]string{
		"fixed_window":           strings.Replace(qq, "token_bucket", "fixed_window", 1),
		"sliding_log capacity 1": strings.Replace(strings.Replace(qq, "token_bucket", "sliding_log", 1), `"capacity":5`, `"capacity":1`, 1),
		"capacity 999":           strings.Replace(qq, `"capacity":5`, `"capacity":999`, 1),
		"remaining 50":           strings.Replace(qq, `"remaining":4`, `"remaining":50`, 1),
		"remaining -5":           strings.Replace(qq, `"remaining":4`, `"remaining":-5`, 1),
		"remaining 1.5":          strings.Replace(qq, `"remaining":4`, `"remaining":1.5`, 1),
		"remaining null":         strings.Replace(qq, `"remaining":4`, `"remaining":null`, 1),
		"reset_after_ms -5":      strings.Replace(qq, `720000`, `-5`, 1),
		"no remaining":           strings.Replace(qq, `"remaining":4,`, ``, 1),
		"no reset_after_ms":      strings.Replace(qq, `,"reset_after_ms":720000`, ``, 1),
		"an override":            strings.Replace(qq, `"capacity"`, `"override":"gold","capacity"`, 1),
		"Limit":                  strings.Replace(qq, `"limit"`, `"Limit"`, 1),
		"remaining twice":        strings.Replace(qq, `"remaining":4`, `"remaining":4,"remaining":4`, 1),
		"an unknown field":       strings.Replace(qq, `"remaining":4`, `"remaining":4,"extra":1`, 1),
		"a reset on a get":       strings.Replace(qq, `}`, `,"reset":true}`, 1),
		"more after the object":  qq + `{}`,
		"an array":               "[" + qq + "]",
		"text/html":              "text/html\n" + qq,
		"no content type":        "\n" + qq,
	} {
		replies["qq: "+name] = func(w http.ResponseWriter, r *http.Request) {
			ct, reply := "application/json", body
			if i := strings.IndexByte(body, '\n'); i >= 0 {
				ct, reply = body[:i], body[i+1:]
			}
			w.Header()["Content-Type"] = []string{ct}
			if ct == "" {
				w.Header()["Content-Type"] = nil // nor sniffed
			}
			_, _ = io.WriteString(w, reply)
		}
	}
	file := filepath.Join(t.TempDir(), "c.json")
	cfg := `{"limits":[{"name":"loc","key":["header:x-k"],"limit":3,"window":"1h"},{"name":"qq","key":["header:x-k"],"limit":5,"window":"1h"},
	  {"name":"ov","key":["header:x-k"],"limit":5,"window":"1h","overrides":{"gold":{"limit":7,"window":"1h"}}}],
	  "admin":{"client_cidrs":["127.0.0.0/8"],"token_sha256":"757224ba37701e155c211a2dc2ed5debaf36faba66aa0cde42587cfc27fa1c30"}}`
	if err := os.WriteFile(file, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv(envAdminToken, "s3cret-admin-token")
	for name, reply := range replies {
		t.Run(name, func(t *testing.T) {
			srv := httptest.NewServer(reply)
			defer srv.Close()
			action := "get"
			if name == "a get's answer to a reset" {
				action = "reset"
			}
			limit := "loc"
			if strings.HasPrefix(name, "qq: ") {
				limit = "qq"
			}
			var out, errOut bytes.Buffer
			code := Main([]string{"quota", action, "--config", file, "--limit", limit, "--key", "k", "--envoy", srv.URL}, &out, &errOut)
			if code == exitOK || out.Len() != 0 || !strings.Contains(errOut.String(), "not the admin route's answer") && !strings.Contains(errOut.String(), "redirect") {
				t.Fatalf("exit %d, stdout %q, stderr %q; want an error", code, out.String(), errOut.String())
			}
		})
	}
	if n := elsewhereHits.Load(); n != 0 {
		t.Fatalf("the redirect was followed %d times", n)
	}
	// The same server answering the real shape is believed: for a key
	// at the limit's own rate, and for one an override decides.
	for _, c := range []struct{ limit, key, reply, want string }{
		{"loc", "k", good, "loc (local, token_bucket)"},
		{"qq", "k", strings.Replace(qq, `"remaining":4`, `"remaining":0`, 1), "remaining:      0 of 5"},
		{"ov", "gold", `{"limit":"ov","mode":"local","algorithm":"token_bucket","override":"gold","capacity":7,"remaining":7,"reset_after_ms":0}`, "override:       gold"},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, c.reply)
		}))
		var out, errOut bytes.Buffer
		if code := Main([]string{"quota", "get", "--config", file, "--limit", c.limit, "--key", c.key, "--envoy", srv.URL}, &out, &errOut); code != exitOK ||
			!strings.Contains(out.String(), c.want) {
			t.Errorf("the admin route's answer for %s: exit %d, stdout %q, stderr %q", c.limit, code, out.String(), errOut.String())
		}
		srv.Close()
	}
}

package e2e_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-proxy/sluice/e2e/envoy"
	"github.com/sluice-proxy/sluice/filter/backend"
	"github.com/sluice-proxy/sluice/filter/ops"
	"github.com/sluice-proxy/sluice/limiter"
)

// sluicectl runs the command in-process and decodes its --json output.
func sluicectl(t *testing.T, args ...string) map[string]any {
	t.Helper()
	var out, errOut bytes.Buffer
	if code := ops.Main(append(args, "--json"), &out, &errOut); code != 0 {
		t.Fatalf("sluicectl %q: exit %d: %s", args, code, errOut.String())
	}
	var r map[string]any
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("sluicectl %q printed %q: %v", args, out.String(), err)
	}
	return r
}

func writeConfig(t *testing.T, cfg string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sluice.json")
	writeFile(t, path, []byte(cfg))
	return path
}

// The runbook's "unblock a tenant": the wasm in our host spends a global
// bucket in Redis, sluicectl quota get shows it empty under the key the
// filter uses, reset fills it, and the filter admits again; a hybrid
// limit's leases show in get and reset fills its bucket too.
func TestQuotaGetResetThroughRedis(t *testing.T) {
	forBothProtocols(t, func(t *testing.T, p distProtocol) {
		be := startDistBackend(t, p)
		cfg := `{"limits":[
		  {"name":"g","match":{"path":"/g"},"key":["header:x-key","method"],"limit":3,"window":"1h","mode":"global","failure_policy":"deny"},
		  {"name":"h","match":{"path":"/h"},"key":["header:x-key"],"limit":5,"window":"1h","mode":"hybrid","failure_policy":"deny"}
		],` + be.backendBlock(`"timeout":"500ms","retries":1`) + `}`
		insts := startDistInstances(t, 1, cfg, be.addr)
		base := insts[0].base
		file := writeConfig(t, cfg)
		via := "--" + string(p)
		url := "http://" + be.addr
		t.Setenv("SLUICE_BACKEND_TOKEN", upstashToken)

		tenant, other := uniqueKey("tenant"), uniqueKey("other")
		for _, key := range []string{tenant, other} {
			for i := range 3 {
				if st, _ := hit(t, base+"/g", key); st != 200 {
					t.Fatalf("request %d of %s: %d", i+1, key, st)
				}
			}
		}
		// The bucket holds 3: the other tenant's fourth is refused.
		if st, _ := hit(t, base+"/g", other); st != 429 {
			t.Fatalf("fourth request: %d, want 429", st)
		}
		got := sluicectl(t, "quota", "get", "--config", file, "--limit", "g", "--key", tenant, "--key", "GET", via, url)
		if got["remaining"] != 0.0 || got["capacity"] != 3.0 || got["redis_key"] != backend.Key("g", limiter.TokenBucket, tenant+"\x00GET") || got["reset_after_ms"].(float64) <= 0 || got["reset_at"] == nil {
			t.Fatalf("get after spending: %+v", got)
		}
		got = sluicectl(t, "quota", "reset", "--config", file, "--limit", "g", "--key", tenant, "--key", "GET", via, url)
		if got["reset"] != true || got["remaining"] != 3.0 {
			t.Fatalf("reset: %+v", got)
		}
		for i := range 3 {
			if st, _ := hit(t, base+"/g", tenant); st != 200 {
				t.Fatalf("request %d after the reset: %d", i+1, st)
			}
		}
		if st, _ := hit(t, base+"/g", other); st != 429 {
			t.Fatalf("the other tenant after the reset: %d, want still 429", st)
		}

		if st, _ := hit(t, base+"/h", tenant); st != 200 {
			t.Fatalf("hybrid request: %d", st)
		}
		got = sluicectl(t, "quota", "get", "--config", file, "--limit", "h", "--key", tenant, via, url)
		if got["remaining"].(float64) >= 5 || got["leases_reserved"] == nil {
			t.Fatalf("hybrid get after a lease: %+v", got)
		}
		got = sluicectl(t, "quota", "reset", "--config", file, "--limit", "h", "--key", tenant, via, url)
		if got["remaining"] != 5.0 || got["reset_after_ms"] != 0.0 {
			t.Fatalf("hybrid reset: %+v", got)
		}
	})
}

// adminRouteToken is the admin token of startAdminRoute's instance.
const adminRouteToken = "e2e-admin-token"

// startAdminRoute starts one instance with the limits (a JSON array) and
// the admin route open to loopback callers with adminRouteToken; file is
// its plugin configuration, for sluicectl --config.
func startAdminRoute(t *testing.T, limits string) (insts []*distInstance, file string) {
	t.Helper()
	sum := sha256.Sum256([]byte(adminRouteToken))
	cfg := `{"limits":` + limits + `,
	  "admin":{"client_cidrs":["127.0.0.1/32","::1"],"token_sha256":"` + hex.EncodeToString(sum[:]) + `"}}`
	insts = startInstances(t, 1, func(wasm, backendAddr string) string {
		return pluginYAML(wasm, cfg, backendAddr, nil)
	}, envoy.Options{})
	return insts, writeConfig(t, cfg)
}

// The runbook's admin route: sluicectl quota --envoy reads and resets a
// local key in our host serving the wasm, and a wrong token gets only
// the empty 404.
func TestQuotaThroughAdminRoute(t *testing.T) {
	const token = adminRouteToken
	insts, file := startAdminRoute(t, `[{"name":"per-key","key":["header:x-key","method"],"limit":3,"window":"1h"}]`)
	base := insts[0].base
	key := uniqueKey("tenant")
	for i := range 3 {
		if st, _ := hit(t, base+"/", key); st != 200 {
			t.Fatalf("request %d: %d", i+1, st)
		}
	}
	if st, _ := hit(t, base+"/", key); st != 429 {
		t.Fatalf("fourth request: %d, want 429", st)
	}
	args := []string{"--config", file, "--limit", "per-key", "--key", key, "--key", "GET", "--envoy", base}

	t.Setenv("SLUICE_ADMIN_TOKEN", token+"-wrong")
	var out, errOut bytes.Buffer
	if code := ops.Main(append([]string{"quota", "get"}, args...), &out, &errOut); code == 0 || !strings.Contains(errOut.String(), "empty 404") {
		t.Fatalf("a wrong token: exit %d, %q %q", code, out.String(), errOut.String())
	}
	if n := insts[0].metric("sluice.admin.denied"); n != 1 {
		t.Fatalf("sluice.admin.denied = %d, want 1", n)
	}

	t.Setenv("SLUICE_ADMIN_TOKEN", token)
	got := sluicectl(t, append([]string{"quota", "get"}, args...)...)
	if got["remaining"] != 0.0 || got["capacity"] != 3.0 || got["reset_after_ms"].(float64) <= 0 {
		t.Fatalf("get after spending: %+v", got)
	}
	got = sluicectl(t, append([]string{"quota", "reset"}, args...)...)
	if got["reset"] != true || got["remaining"] != 3.0 {
		t.Fatalf("reset: %+v", got)
	}
	for i := range 3 {
		if st, _ := hit(t, base+"/", key); st != 200 {
			t.Fatalf("request %d after the reset: %d", i+1, st)
		}
	}
	if n := insts[0].metric("sluice.admin.calls"); n != 2 {
		t.Fatalf("sluice.admin.calls = %d, want 2", n)
	}
}

// sluicectl quota --envoy names exactly the buckets requests fill: --key
// ” on a query part is the bucket of ?user= (present and empty), and a
// value no request carries in its part (a header value Envoy would trim,
// a path segment with '?') is refused naming the part, never answered
// from another bucket.
func TestQuotaKeyValuesThroughAdminRouteAreRequests(t *testing.T) {
	insts, file := startAdminRoute(t, `[{"name":"qry","key":["query:user"],"limit":2,"window":"1h"},
	  {"name":"hdr","key":["header:x-key"],"limit":2,"window":"1h"},
	  {"name":"seg","key":["path_segment:2"],"limit":2,"window":"1h"}]`)
	base := insts[0].base
	t.Setenv("SLUICE_ADMIN_TOKEN", adminRouteToken)
	for i := range 3 {
		want := 200
		if i == 2 {
			want = 429
		}
		// Each request has its own header key and segment: only the
		// empty user is shared.
		if st, _ := hit(t, base+"/u/"+uniqueKey("s")+"?user=", uniqueKey("k")); st != want {
			t.Fatalf("request %d with ?user=: %d, want %d", i+1, st, want)
		}
	}
	args := []string{"--config", file, "--limit", "qry", "--key", "", "--envoy", base}
	if got := sluicectl(t, append([]string{"quota", "get"}, args...)...); got["remaining"] != 0.0 {
		t.Fatalf("the empty user's bucket: %+v", got)
	}
	if got := sluicectl(t, append([]string{"quota", "reset"}, args...)...); got["reset"] != true || got["remaining"] != 2.0 {
		t.Fatalf("the empty user's reset: %+v", got)
	}
	if st, _ := hit(t, base+"/u/"+uniqueKey("s")+"?user=", uniqueKey("k")); st != 200 {
		t.Fatalf("?user= after its reset: %d", st)
	}
	for _, bad := range [][2]string{{"hdr", "  spc  "}, {"hdr", "acme\x00"}, {"seg", "zz?x"}} {
		var out, errOut bytes.Buffer
		code := ops.Main([]string{"quota", "get", "--config", file, "--limit", bad[0], "--key", bad[1], "--envoy", base}, &out, &errOut)
		if code == 0 || !strings.Contains(errOut.String(), "key part 1") {
			t.Fatalf("%s %q: exit %d, %q %q; want an error naming the part", bad[0], bad[1], code, out.String(), errOut.String())
		}
	}
}

package e2e_test

import (
	"io"
	"net/http"
	"testing"

	"github.com/sluice-proxy/sluice/e2e/envoy"
)

// keysPlugin puts the issue-16 keys and matches behind path prefixes, each
// with a capacity of 2 that does not refill within a test.
const keysPlugin = `{"limits":[
 {"name":"cidr","match":{"path_prefix":"/cidr","not":{"client_cidrs":["127.0.0.2/32","127.0.0.3"]}},"key":[],"limit":2,"window":"1h"},
 {"name":"masked","match":{"path_prefix":"/masked"},"key":["client_ip/31/64"],"limit":2,"window":"1h"},
 {"name":"query","match":{"path_prefix":"/query"},"key":["query:user"],"limit":2,"window":"1h","on_missing_key":"deny"},
 {"name":"cookie","match":{"path_prefix":"/cookie"},"key":["cookie:sid"],"limit":2,"window":"1h","on_missing_key":"deny"}]}`

// TestKeysFromLoopbackClients runs real HTTP clients bound to different
// loopback addresses through the wasm in our host.
func TestKeysFromLoopbackClients(t *testing.T) {
	inst := startInstances(t, 1, func(wasm, be string) string { return pluginYAML(wasm, keysPlugin, be, nil) }, envoy.Options{})[0]
	clients := map[string]*http.Client{}
	for _, ip := range []string{"127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"} {
		clients[ip] = clientFrom(ip)
	}
	admitted := func(ip, path string, n int, headers ...string) int {
		t.Helper()
		ok := 0
		for range n {
			req, err := http.NewRequest("GET", inst.base+path, nil)
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i+1 < len(headers); i += 2 {
				req.Header.Add(headers[i], headers[i+1])
			}
			resp, err := clients[ip].Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			switch resp.StatusCode {
			case 200:
				ok++
			case 429:
			default:
				t.Fatalf("%s %s: status %d", ip, path, resp.StatusCode)
			}
		}
		return ok
	}
	check := func(what string, got, want int) {
		t.Helper()
		if got != want {
			t.Errorf("%s: admitted %d, want %d", what, got, want)
		}
	}

	t.Run("cidr exemption", func(t *testing.T) {
		check("exempt 127.0.0.2", admitted("127.0.0.2", "/cidr", 5), 5)
		check("exempt 127.0.0.3", admitted("127.0.0.3", "/cidr", 5), 5)
		check("127.0.0.4 uses the shared bucket", admitted("127.0.0.4", "/cidr", 3), 2)
		check("127.0.0.5 finds it empty", admitted("127.0.0.5", "/cidr", 2), 0)
	})
	t.Run("masked prefix", func(t *testing.T) {
		// 127.0.0.2/31 holds .2 and .3; .4 is the next /31.
		check("127.0.0.2", admitted("127.0.0.2", "/masked", 1), 1)
		check("127.0.0.3 shares its /31", admitted("127.0.0.3", "/masked", 3), 1)
		check("127.0.0.4 has its own", admitted("127.0.0.4", "/masked", 3), 2)
	})
	t.Run("query key", func(t *testing.T) {
		check("bob from .2", admitted("127.0.0.2", "/query?user=bob", 1), 1)
		check("bob encoded from .3", admitted("127.0.0.3", "/query?x=1&user=b%6Fb", 3), 1)
		check("alice", admitted("127.0.0.4", "/query?user=alice", 3), 2)
		check("no user is denied", admitted("127.0.0.5", "/query?users=carol", 1), 0)
	})
	t.Run("cookie key", func(t *testing.T) {
		check("s1 from .2", admitted("127.0.0.2", "/cookie", 1, "Cookie", "a=1; sid=s1"), 1)
		check("s1 from .3", admitted("127.0.0.3", "/cookie", 3, "Cookie", `sid="s1"; b=2`), 1)
		check("s2", admitted("127.0.0.4", "/cookie", 3, "Cookie", "sid=s2"), 2)
		check("no sid is denied", admitted("127.0.0.5", "/cookie", 1, "Cookie", "sidx=s1"), 0)
	})
}

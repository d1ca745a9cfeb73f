package e2e_test

import (
	"bufio"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/e2e/envoy"
	"github.com/sluice-proxy/sluice/internal/fixtures/bootstrap"
)

// respellPlugin puts issue 23's keys behind path prefixes, each with one
// request an hour per bucket and the default on_missing_key "skip".
const respellPlugin = `{"limits":[
 {"name":"seg","match":{"path_prefix":"/t/"},"key":["path_segment:2"],"limit":1,"window":"1h"},
 {"name":"q","match":{"path_prefix":"/q"},"key":["query:api_key"],"limit":1,"window":"1h"},
 {"name":"h","match":{"path_prefix":"/h"},"key":["header:x-api-key"],"limit":1,"window":"1h"},
 {"name":"host","match":{"path_prefix":"/host"},"key":["host"],"limit":1,"window":"1h"},
 {"name":"score","match":{"path_prefix":"/m"},"key":["metadata:scores:score"],"limit":1,"window":"1h"},
 {"name":"ck","match":{"path_prefix":"/c"},"key":["cookie:sid"],"limit":1,"window":"1h"},
 {"name":"free","match":{"path_prefix":"/f","headers":[{"name":"x-plan","value":"free"}]},"limit":1,"window":"1h"}]}`

// scoreToMetadata copies the client's x-score header into dynamic
// metadata as a NUMBER, as a header_to_metadata rule would for a claim.
const scoreToMetadata = `- name: envoy.filters.http.header_to_metadata
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.filters.http.header_to_metadata.v3.Config
    request_rules:
      - header: x-score
        on_header_present: { metadata_namespace: scores, key: score, type: NUMBER }
        remove: true`

// TestRespelledIdentitiesEndToEnd sends a client's re-spellings of its
// path, query parameter, header, host and a NUMBER metadata value it
// controls over real TCP, request lines written by hand (an HTTP client
// library would clean them), through our Envoy stand-in to the wasm:
// each lands in the bucket of the identity an upstream serves it as, or
// is refused; none gets a fresh bucket or goes unlimited.
func TestRespelledIdentitiesEndToEnd(t *testing.T) {
	inst := startInstances(t, 1, func(wasm, be string) string {
		b := bootstrap.Bootstrap{
			Listener: bootstrap.Listener{
				Name: "ingress", RouteConfigName: "local_route",
				VirtualHosts: []bootstrap.VirtualHost{{Name: "backend", Domains: []string{"*"}, Routes: []bootstrap.Route{
					{Name: "default", Match: `prefix: "/"`, Action: "cluster: backend, timeout: 15s"}}}},
				HTTPFilters: []string{scoreToMetadata,
					bootstrap.Wasm{Code: wasm, Configuration: strings.ReplaceAll(respellPlugin, "\n", " ")}.Filter()},
			},
			Clusters: []bootstrap.Cluster{{Name: "backend", Type: "STATIC", ConnectTimeout: time.Second, Endpoints: []string{be}}},
		}
		return b.YAML()
	}, envoy.Options{Concurrency: 1})[0]
	addr := strings.TrimPrefix(inst.base, "http://")
	for _, s := range []struct {
		what, target, host string
		headers            []string
		want               int
	}{
		{"alice", "/t/alice/x", "", nil, 200},
		{"through a junk segment", "/t/junk1/../alice/x", "", nil, 429},
		{"a dot segment", "/t/./alice/x", "", nil, 429},
		{"merged slashes", "//t//alice/x", "", nil, 429},
		{"an escaped letter", "/t/%61lice/x", "", nil, 429},
		{"escaped slashes", "/t%2Falice%2Fx", "", nil, 429},
		{"a servlet path parameter", "/t/alice;jsessionid=1/x", "", nil, 429},
		{"bob", "/t/bob/x", "", nil, 200},
		{"carol@x.com", "/t/carol@x.com/x", "", nil, 200},
		{"carol%40x.com", "/t/carol%40x.com/x", "", nil, 429},
		{"caf%C3%A9", "/t/caf%C3%A9/x", "", nil, 200},
		{"café in raw UTF-8", "/t/caf\u00e9/x", "", nil, 429},
		{"api_key alice", "/q?api_key=alice", "", nil, 200},
		{"alice then junk", "/q?api_key=alice&api_key=junk1", "", nil, 429},
		{"junk then alice", "/q?api_key=junk2&api_key=alice", "", nil, 429},
		{"api_key bob", "/q?api_key=bob", "", nil, 200},
		{"a ';' read two ways", "/q?api_key=bob;junk=1", "", nil, 429},
		{"a ';' hiding api_key from Go", "/q?junk=1;api_key=dave", "", nil, 429},
		{"api.key, PHP's api_key", "/q?api.key=bob", "", nil, 429},
		{"api[key, PHP's api_key", "/q?api[key=bob", "", nil, 429},
		{"header alice", "/h", "", []string{"x-api-key", "alice"}, 200},
		{"header alice then junk", "/h", "", []string{"x-api-key", "alice", "x-api-key", "junk"}, 429},
		{"header as x_api_key", "/h", "", []string{"x_api_key", "alice"}, 429},
		{"host api.example", "/host", "api.example", nil, 200},
		{"host with :80", "/host", "api.example:80", nil, 429},
		{"host with :080", "/host", "api.example:080", nil, 429},
		{"host with a trailing dot", "/host", "API.example.", nil, 429},
		{"host with extra colons", "/host", "api.example:80:80", nil, 429},
		{"host with two empty ports", "/host", "api.example::", nil, 429},
		{"cookie alice", "/c", "", []string{"cookie", "sid=alice"}, 200},
		{"cookie al%69ce", "/c", "", []string{"cookie", "sid=al%69ce"}, 429},
		{"plan free", "/f", "", []string{"x-plan", "free"}, 200},
		{"plan free as x_plan", "/f", "", []string{"x_plan", "free"}, 429},
		{"score nan", "/m", "", []string{"x-score", "nan"}, 200},
		{"score NaN again", "/m", "", []string{"x-score", "NaN"}, 429},
		{"score -Inf", "/m", "", []string{"x-score", "-Inf"}, 200},
		{"score -inf again", "/m", "", []string{"x-score", "-inf"}, 429},
		{"score 42", "/m", "", []string{"x-score", "42"}, 200},
		{"score 42.0", "/m", "", []string{"x-score", "42.0"}, 429},
	} {
		if got := statusOf(t, addr, s.target, s.host, s.headers...); got != s.want {
			t.Errorf("%s (%s): status %d, want %d", s.what, s.target, got, s.want)
		}
	}
}

// statusOf sends a GET of target, written by hand so that no client
// library re-spells it, over rawRequest, and returns the status.
func statusOf(t *testing.T, addr, target, host string, headers ...string) int {
	t.Helper()
	if host == "" {
		host = "example.com"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n", target, host)
	for i := 0; i+1 < len(headers); i += 2 {
		fmt.Fprintf(&b, "%s: %s\r\n", headers[i], headers[i+1])
	}
	b.WriteString("\r\n")
	out := rawRequest(t, "127.0.0.1", addr, b.String())
	resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(out)), nil)
	if err != nil {
		t.Fatalf("%s: %v", target, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

package filtertest

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/internal/fixtures/redistest"
	"github.com/sluice-proxy/sluice/internal/fixtures/testkit"
	"github.com/sluice-proxy/sluice/internal/fixtures/upstash"
)

// RedisCluster is the cluster a case with Redis set names in its
// "backend" block; RedisToken is the Upstash front's bearer token.
const (
	RedisCluster = "redis"
	RedisToken   = "sluice-filtertest"
)

// RedisBackend is the "backend" block of a case's config for protocol
// ("webdis" or "upstash"), with extra fields (without braces) appended.
func RedisBackend(protocol, extra string) string {
	s := `"cluster":"` + RedisCluster + `","protocol":"` + protocol + `"`
	if protocol == "upstash" {
		s += `,"token":"` + RedisToken + `"`
	}
	if extra != "" {
		s += "," + extra
	}
	return `"backend":{` + s + `}`
}

// RedisFront is a real redis-server behind webdis, or behind our
// Upstash-protocol server, answering the callouts of a case's plugin on
// the harness's stepped clock.
//
// The clock reaches Redis through the scripts' optional last argument,
// the time the script uses instead of Redis TIME
// (backend.Command.WithTime): the front appends the harness's time, in
// µs, to every EVALSHA and EVAL it forwards. The filter itself never sends
// one, so in production Redis's own clock decides every period, and
// nothing a client sends can reach that argument; only what sits between
// Envoy and Redis could, which here is the test.
type RedisFront struct {
	protocol string
	webdis   string       // the webdis URL
	upstash  http.Handler // the Upstash-protocol server
}

// StartRedisFront starts a redis-server and its front for protocol,
// stopped when the test ends.
func StartRedisFront(t testing.TB, protocol string) *RedisFront {
	t.Helper()
	r := redistest.StartRedis(t)
	f := &RedisFront{protocol: protocol}
	switch protocol {
	case "webdis":
		f.webdis = redistest.StartWebdis(t, r.Addr()).URL()
	case "upstash":
		f.upstash = upstash.New(r.Client(), RedisToken)
	default:
		t.Fatalf("filtertest: unknown Redis protocol %q", protocol)
	}
	return f
}

// Call answers one callout to RedisCluster at now: its HTTP status and
// body.
func (f *RedisFront) Call(now time.Time, headers [][2]string, body []byte) (int, []byte, error) {
	us := strconv.FormatInt(now.UnixMicro(), 10)
	path := "/"
	if i := slices.IndexFunc(headers, func(h [2]string) bool { return h[0] == ":path" }); i >= 0 {
		path = headers[i][1]
	}
	if f.protocol == "webdis" {
		// A command is a GET of /EVALSHA/<sha>/1/<key>/<args…>: the time
		// is one more path segment.
		if verb, _, _ := strings.Cut(strings.TrimPrefix(path, "/"), "/"); verb == "EVALSHA" || verb == "EVAL" {
			path += "/" + us
		}
		status, _, reply, err := testkit.RoundTrip(context.Background(), http.MethodGet, f.webdis+path, headers, body)
		return status, reply, err
	}
	// A command is a POST of its JSON array of strings.
	var cmd []string
	if json.Unmarshal(body, &cmd) == nil && len(cmd) > 0 && (cmd[0] == "EVALSHA" || cmd[0] == "EVAL") {
		body, _ = json.Marshal(append(cmd, us))
	}
	req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(string(body)))
	for _, h := range headers {
		if !strings.HasPrefix(h[0], ":") {
			req.Header.Add(h[0], h[1])
		}
	}
	rec := httptest.NewRecorder()
	f.upstash.ServeHTTP(rec, req)
	return rec.Code, rec.Body.Bytes(), nil
}

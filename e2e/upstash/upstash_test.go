package upstash_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-proxy/sluice/e2e/redistest"
	"github.com/sluice-proxy/sluice/e2e/upstash"
)

func TestProtocol(t *testing.T) {
	rs := redistest.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr(), Protocol: 2})
	defer rdb.Close()
	srv := httptest.NewServer(upstash.New(rdb, "tok"))
	defer srv.Close()

	post := func(path, token, body string) (int, string) {
		req, _ := http.NewRequest("POST", srv.URL+path, strings.NewReader(body))
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	tests := []struct {
		name, path, token, body string
		status                  int
		want                    string
	}{
		{"set", "/", "tok", `["SET","a/b c","v"]`, 200, `{"result":"OK"}`},
		{"get", "/", "tok", `["GET","a/b c"]`, 200, `{"result":"v"}`},
		{"missing key is null", "/", "tok", `["GET","nope"]`, 200, `{"result":null}`},
		{"numbers accepted", "/", "tok", `["INCRBY","n",5]`, 200, `{"result":5}`},
		{"flat array", "/", "tok", `["EVAL","return {1,2,3}","0"]`, 200, `{"result":[1,2,3]}`},
		{"redis error", "/", "tok", `["EVALSHA","0000000000000000000000000000000000000000","0"]`, 400, `{"error":"NOSCRIPT No matching script. Please use EVAL."}`},
		{"wrong token", "/", "bad", `["PING"]`, 401, `{"error":"Unauthorized"}`},
		{"no token", "/", "", `["PING"]`, 401, `{"error":"Unauthorized"}`},
		{"not an array", "/", "tok", `{"cmd":"PING"}`, 400, `{"error":"body must be a JSON array"}`},
		{"nested argument", "/", "tok", `["GET",["x"]]`, 400, `{"error":"argument 1 must be a string or number"}`},
		{"pipeline", "/pipeline", "tok", `[["INCR","p"],["GET","p"],["HGET","a/b c","f"]]`, 200,
			`[{"result":1},{"result":"1"},{"error":"WRONGTYPE Operation against a key holding the wrong kind of value"}]`},
		{"unknown path", "/nope", "tok", `["PING"]`, 404, `{"error":"unknown path"}`},
	}
	for _, tt := range tests {
		status, body := post(tt.path, tt.token, tt.body)
		if status != tt.status || !jsonEqual(body, tt.want) {
			t.Errorf("%s: HTTP %d %s, want %d %s", tt.name, status, body, tt.status, tt.want)
		}
	}
	rs.Kill()
	if status, body := post("/", "tok", `["PING"]`); status != http.StatusServiceUnavailable {
		t.Errorf("redis down: HTTP %d %s, want 503", status, body)
	}
}

func jsonEqual(a, b string) bool {
	var x, y any
	if json.Unmarshal([]byte(a), &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		return false
	}
	xb, _ := json.Marshal(x)
	yb, _ := json.Marshal(y)
	return string(xb) == string(yb)
}

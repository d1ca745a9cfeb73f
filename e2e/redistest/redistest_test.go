package redistest

import (
	"context"
	"io"
	"net/http"
	"testing"
)

func TestParseCommandStats(t *testing.T) {
	info := "# Commandstats\r\ncmdstat_evalsha:calls=12,usec=345,usec_per_call=28.75,rejected_calls=0,failed_calls=1\r\n" +
		"cmdstat_script|load:calls=3,usec=10,usec_per_call=3.33\r\ncmdstat_ping:calls=1,usec=0\r\n"
	got, err := parseCommandStats(info)
	if err != nil {
		t.Fatal(err)
	}
	if got["evalsha"] != 12 || got["script|load"] != 3 || got["ping"] != 1 || len(got) != 3 {
		t.Fatalf("got %v", got)
	}
	if _, err := parseCommandStats("cmdstat_get:calls=x\r\n"); err == nil {
		t.Fatal("bad number accepted")
	}
}

func TestRedisLifecycle(t *testing.T) {
	r := StartRedis(t)
	c := r.Client()
	ctx := context.Background()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	stats, err := CommandStats(r.Addr())
	if err != nil || stats["set"] != 1 {
		t.Fatalf("commandstats %v %v", stats, err)
	}
	r.Kill()
	if Ping(r.Addr()) == nil {
		t.Fatal("PING answered after Kill")
	}
	r.Restart()
	if err := Ping(r.Addr()); err != nil {
		t.Fatalf("after Restart: %v", err)
	}
	if n, _ := c.Exists(ctx, "k").Result(); n != 0 {
		t.Fatal("data survived a restart without persistence")
	}
}

func TestWebdisProxiesRedis(t *testing.T) {
	r := StartRedis(t)
	w := StartWebdis(t, r.Addr())
	resp, err := http.Get(w.URL() + "/SET/hello/world")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if v, _ := r.Client().Get(context.Background(), "hello").Result(); v != "world" {
		t.Fatalf("webdis SET did not reach redis: %q", v)
	}
	r.Kill()
	resp, err = http.Get(w.URL() + "/GET/hello")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("with redis down: HTTP %d %q, want 503", resp.StatusCode, body)
	}
}

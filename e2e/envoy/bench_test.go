package envoy

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
)

// BenchmarkServe measures a full request through sluice-envoy (HTTP in,
// header mutation, filter chain, router, HTTP out) with no wasm filter, the
// SDK no-op module and the Sluice module, on two workers. The differences
// between the three are the cost of the wasm path.
func BenchmarkServe(b *testing.B) {
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	defer ok.Close()
	_, port, _ := net.SplitHostPort(ok.Listener.Addr().String())
	for _, tc := range []struct{ name, module string }{{"router-only", ""}, {"noop", "noop.wasm"}, {"sluice", "sluice.wasm"}} {
		b.Run(tc.name, func(b *testing.B) {
			r := routerOnly{aPort: port, bPort: port, downPort: port}
			if tc.module != "" {
				r.wasm = wasmModule(b, tc.module)
			}
			cfg, err := Load([]byte(r.yaml()))
			if err != nil {
				b.Fatal(err)
			}
			srv := startServer(b, cfg, Options{Concurrency: 2, Logger: NewLogger(io.Discard, LevelOff)})
			url := "http://" + srv.ListenerAddr("main") + "/a/bench"
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}}
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if !getOK(b, client, url) {
						return
					}
				}
			})
		})
	}
}

// getOK sends one GET and drains its body; false (with the test marked
// failed) when it did not answer 200.
func getOK(tb testing.TB, client *http.Client, url string) bool {
	resp, err := client.Get(url)
	if err != nil {
		tb.Error(err)
		return false
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		tb.Errorf("status %d", resp.StatusCode)
		return false
	}
	return true
}

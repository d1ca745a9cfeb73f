package backend_test

import (
	"net/http"
	"sort"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/filter/backend"
	"github.com/sluice-proxy/sluice/limiter"
)

var benchLimit = limiter.Limit{Rate: 100, Period: time.Second, Burst: 20}

func BenchmarkEncode(b *testing.B) {
	for _, ep := range []backend.Endpoint{
		{Authority: "webdis"},
		{Protocol: backend.Upstash, Authority: "upstash", Token: "t"},
	} {
		b.Run(ep.Protocol.String(), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				cmd, _ := backend.Decide(benchLimit, "tenant:acme/api", 1)
				if _, err := ep.EvalSHA(cmd); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkParse(b *testing.B) {
	for _, c := range []struct {
		protocol backend.Protocol
		body     string
	}{
		{backend.Webdis, `{"EVALSHA":[1,119,0,10,0,1700000000123456]}`},
		{backend.Upstash, `{"result":[1,119,0,10,0,1700000000123456]}`},
	} {
		b.Run(c.protocol.String(), func(b *testing.B) {
			body := []byte(c.body)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := backend.ParseReply(c.protocol, 200, body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRoundTrip measures one strict decision through real Webdis and
// the Upstash test server over loopback, sequentially, and reports the
// latency percentiles.
func BenchmarkRoundTrip(b *testing.B) {
	fx := newFixture(b)
	for _, rm := range fx.remotes {
		b.Run(rm.name, func(b *testing.B) {
			rm.client = &http.Client{Timeout: 5 * time.Second}
			l := limiter.Limit{Rate: 1_000_000, Period: time.Second}
			cmd, _ := backend.Decide(l, "bench:"+rm.name, 1)
			lat := make([]time.Duration, 0, b.N)
			for b.Loop() {
				start := time.Now()
				if _, err := rm.call(b, cmd); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(start))
			}
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			if len(lat) > 0 {
				b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
				b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
			}
		})
	}
}

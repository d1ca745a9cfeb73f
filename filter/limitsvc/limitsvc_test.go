package limitsvc

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/breaker"
	"github.com/sluice-proxy/sluice/filter/backend"
)

func TestParseAnswers(t *testing.T) {
	cases := []struct {
		name string
		body string
		want Answer
	}{
		{"average and period", `{"average":1000,"burst":200,"period":"1s","tenant_key":"acme-corp"}`,
			Answer{Rate: 1000, Period: time.Second, Burst: 200, TenantKey: "acme-corp"}},
		{"requests per second", `{"requests_per_second":5,"tenant_key":"t"}`, Answer{Rate: 5, Period: time.Second, TenantKey: "t"}},
		{"limit and window", `{"limit":60,"window":"1m","burst":0}`, Answer{Rate: 60, Period: time.Minute}},
		{"period in seconds", `{"average":10,"period":30}`, Answer{Rate: 10, Period: 30 * time.Second}},
		{"unlimited", `{"average":0,"period":"1s","burst":9,"tenant_key":"vip"}`, Answer{Unlimited: true, TenantKey: "vip"}},
		{"cache fields", `{"average":1,"period":"1s","cache_max_age_seconds":300,"cache_no_store":true}`,
			Answer{Rate: 1, Period: time.Second, MaxAge: 300 * time.Second, NoStore: true}},
		{"policy", `{"average":1,"period":"1s","failure_policy":"deny"}`, Answer{Rate: 1, Period: time.Second, Policy: PolicyDeny}},
		{"policy alias", `{"average":1,"period":"1s","failure_policy":"inMemoryFallback"}`, Answer{Rate: 1, Period: time.Second, Policy: PolicyLocal}},
		{"passthrough", `{"average":1,"period":"1s","failure_policy":"passthrough"}`, Answer{Rate: 1, Period: time.Second, Policy: PolicyAllow}},
		{"unknown members ignored", `{"average":1,"period":"1s","x-own":[1]}`, Answer{Rate: 1, Period: time.Second}},
		{"failure code", `{"average":1,"period":"1s","failure_policy":"failclosed","failure_code":503}`,
			Answer{Rate: 1, Period: time.Second, Policy: PolicyDeny, FailureCode: 503}},
		{"backend url", `{"average":1,"period":"1s","backend_url":"acme-backend"}`,
			Answer{Rate: 1, Period: time.Second, BackendURL: "acme-backend"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Parse(200, []byte(c.body))
			if err != nil {
				t.Fatal(err)
			}
			if got != c.want {
				t.Errorf("got %+v, want %+v", got, c.want)
			}
		})
	}
}

func TestParseRefuses(t *testing.T) {
	cases := []struct {
		name   string
		status int
		body   string
		kind   backend.Kind
	}{
		{"5xx", 503, `{"average":1,"period":"1s"}`, backend.KindUnavailable},
		{"404", 404, `not found`, backend.KindHTTPStatus},
		{"204", 204, ``, backend.KindHTTPStatus},
		{"html", 200, `<html>oops</html>`, backend.KindMalformed},
		{"failure code 200", 200, `{"average":1,"period":"1s","failure_code":200}`, backend.KindMalformed},
		{"failure code 600", 200, `{"average":1,"period":"1s","failure_code":600}`, backend.KindMalformed},
		{"failure code string", 200, `{"average":1,"period":"1s","failure_code":"503"}`, backend.KindMalformed},
		{"failure code fraction", 200, `{"average":1,"period":"1s","failure_code":503.5}`, backend.KindMalformed},
		{"backend url not string", 200, `{"average":1,"period":"1s","backend_url":["a"]}`, backend.KindMalformed},
		{"empty backend url", 200, `{"average":1,"period":"1s","backend_url":""}`, backend.KindMalformed},
		{"long backend url", 200, `{"average":1,"period":"1s","backend_url":"` + strings.Repeat("u", MaxBackendURL+1) + `"}`, backend.KindMalformed},
		{"empty", 200, ``, backend.KindMalformed},
		{"array", 200, `[1,2]`, backend.KindMalformed},
		{"no rate", 200, `{"period":"1s","tenant_key":"t"}`, backend.KindMalformed},
		{"two rates", 200, `{"average":1,"limit":2,"period":"1s"}`, backend.KindMalformed},
		{"two periods", 200, `{"average":1,"period":"1s","window":"1s"}`, backend.KindMalformed},
		{"rps with period", 200, `{"requests_per_second":1,"period":"1m"}`, backend.KindMalformed},
		{"average without period", 200, `{"average":1}`, backend.KindMalformed},
		{"negative rate", 200, `{"average":-5,"period":"1s"}`, backend.KindMalformed},
		{"fractional rate", 200, `{"average":1.5,"period":"1s"}`, backend.KindMalformed},
		{"exponent rate", 200, `{"average":1e3,"period":"1s"}`, backend.KindMalformed},
		{"string rate", 200, `{"average":"10","period":"1s"}`, backend.KindMalformed},
		{"absurd rate", 200, `{"average":99999999999999999999,"period":"1s"}`, backend.KindMalformed},
		{"rate above max", 200, `{"average":1000000001,"period":"1s"}`, backend.KindMalformed},
		{"negative burst", 200, `{"average":1,"period":"1s","burst":-1}`, backend.KindMalformed},
		{"zero period", 200, `{"average":1,"period":"0s"}`, backend.KindMalformed},
		{"negative period", 200, `{"average":1,"period":"-1s"}`, backend.KindMalformed},
		{"huge period", 200, `{"average":1,"period":"10000h"}`, backend.KindMalformed},
		{"huge period seconds", 200, `{"average":1,"period":999999999999}`, backend.KindMalformed},
		{"bad period", 200, `{"average":1,"period":"soon"}`, backend.KindMalformed},
		{"null period", 200, `{"average":1,"period":null}`, backend.KindMalformed},
		{"tenant not string", 200, `{"average":1,"period":"1s","tenant_key":7}`, backend.KindMalformed},
		{"empty tenant", 200, `{"average":1,"period":"1s","tenant_key":""}`, backend.KindMalformed},
		{"long tenant", 200, `{"average":1,"period":"1s","tenant_key":"` + strings.Repeat("t", MaxTenantKey+1) + `"}`, backend.KindMalformed},
		{"unknown policy", 200, `{"average":1,"period":"1s","failure_policy":"maybe"}`, backend.KindMalformed},
		{"max age negative", 200, `{"average":1,"period":"1s","cache_max_age_seconds":-1}`, backend.KindMalformed},
		{"max age absurd", 200, `{"average":1,"period":"1s","cache_max_age_seconds":99999999}`, backend.KindMalformed},
		{"no store string", 200, `{"average":1,"period":"1s","cache_no_store":"yes"}`, backend.KindMalformed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, err := Parse(c.status, []byte(c.body))
			if got := backend.KindOf(err); got != c.kind {
				t.Fatalf("kind %v (%v), want %v", got, err, c.kind)
			}
			if a != (Answer{}) {
				t.Fatalf("an error came with an answer %+v", a)
			}
		})
	}
}

func TestParseLongTenantAtLimit(t *testing.T) {
	key := strings.Repeat("k", MaxTenantKey)
	a, err := Parse(200, []byte(`{"average":1,"period":"1s","tenant_key":"`+key+`"}`))
	if err != nil || a.TenantKey != key {
		t.Fatalf("%v %q", err, a.TenantKey)
	}
}

func sampleEntries(t testing.TB) []Entry {
	m, err := breaker.NewMachine(breaker.Settings{FailureThreshold: 5, OpenTimeout: 30 * time.Second, SuccessThreshold: 1})
	if err != nil {
		t.Fatal(err)
	}
	var closed, open breaker.Record
	m.Reset(&closed)
	m.Reset(&open)
	now := time.Unix(1_700_000_000, 0)
	for range 5 {
		tk, _, _ := m.Check(&open, now)
		m.Report(&open, tk, breaker.Outcome{Failure: true}, now)
	}
	if open.State() != breaker.Open {
		t.Fatal("sample breaker did not open")
	}
	ns := now.UnixNano()
	return []Entry{
		{FP: 1, Breaker: closed},
		{FP: 2, Seq: 3, Inflight: ns, Breaker: closed},
		{FP: 3, Seq: 9, HasAnswer: true, FreshUntil: ns + 60e9, StaleUntil: ns + 360e9,
			Answer: Answer{Rate: 100, Period: time.Second, Burst: 50, TenantKey: "acme", Policy: PolicyLocal, FailureCode: 503,
				BackendURL: "acme-backend"}, Breaker: closed},
		{FP: 4, HasAnswer: true, Failed: true, FreshUntil: ns, StaleUntil: ns,
			Answer: Answer{Unlimited: true, TenantKey: strings.Repeat("x", MaxTenantKey), BackendURL: strings.Repeat("u", MaxBackendURL)}, Breaker: open},
	}
}

func TestEntryRoundTrip(t *testing.T) {
	for _, e := range sampleEntries(t) {
		b := e.Encode(nil)
		if len(b) > MaxEntryLen {
			t.Fatalf("encoded %d bytes, MaxEntryLen %d", len(b), MaxEntryLen)
		}
		var got Entry
		if err := got.Decode(b); err != nil {
			t.Fatalf("%+v: %v", e, err)
		}
		if !reflect.DeepEqual(got, e) {
			t.Fatalf("round trip changed the entry:\n%+v\n%+v", e, got)
		}
		if !bytes.Equal(got.Encode(nil), b) {
			t.Fatal("re-encoding differs")
		}
	}
}

func TestEntryDecodeRefuses(t *testing.T) {
	good := sampleEntries(t)[2].Encode(nil)
	mutate := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	cases := map[string][]byte{
		"empty":            nil,
		"short":            good[:entryHeaderLen-1],
		"version 1":        mutate(func(b []byte) []byte { b[0] = 1; return b }),
		"flags":            mutate(func(b []byte) []byte { b[1] |= 0x80; return b }),
		"policy":           mutate(func(b []byte) []byte { b[2] = 9; return b }),
		"negative rate":    mutate(func(b []byte) []byte { b[46] = 0xff; return b }),
		"zero period":      mutate(func(b []byte) []byte { clear(b[47:55]); return b }),
		"stale before":     mutate(func(b []byte) []byte { clear(b[31:39]); return b }),
		"tenant too long":  mutate(func(b []byte) []byte { b[65], b[66] = 0xff, 0xff; return b }),
		"failure code 1":   mutate(func(b []byte) []byte { b[63], b[64] = 1, 0; return b }),
		"route too long":   mutate(func(b []byte) []byte { b[67], b[68] = 0xff, 0xff; return b }),
		"truncated record": good[:len(good)-1],
		"trailing byte":    append(append([]byte(nil), good...), 0),
		"bad record":       mutate(func(b []byte) []byte { b[len(b)-breakerLen] = 9; return b }),
		"no answer with a rate": mutate(func(b []byte) []byte {
			b[1] &^= flagHasAnswer
			return b
		}),
	}
	for name, b := range cases {
		var e Entry
		if err := e.Decode(b); err == nil {
			t.Errorf("%s: decoded %+v", name, e)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range parseSeeds {
		f.Add(s.status, []byte(s.body))
	}
	f.Fuzz(func(t *testing.T, status int, body []byte) {
		a, err := Parse(status, body)
		checkParsed(t, a, err)
	})
}

// checkParsed holds what every answer the parsers accept must be, and
// what a refusal must look like.
func checkParsed(t *testing.T, a Answer, err error) {
	t.Helper()
	var fresh breaker.Record
	m, _ := breaker.NewMachine(breaker.DefaultSettings())
	m.Reset(&fresh)
	if err != nil {
		if backend.KindOf(err) == 0 || a != (Answer{}) {
			t.Fatalf("error %v with answer %+v", err, a)
		}
		return
	}
	if a.Unlimited {
		if a.Rate != 0 || a.Period != 0 || a.Burst != 0 {
			t.Fatalf("unlimited with a limit: %+v", a)
		}
	} else if err := a.Limit().Validate(); err != nil || a.Rate > MaxRate || a.Burst > MaxRate {
		t.Fatalf("accepted an invalid limit %+v: %v", a, err)
	}
	if len(a.TenantKey) > MaxTenantKey || len(a.BackendURL) > MaxBackendURL || a.MaxAge < 0 || a.MaxAge > MaxAge || a.Policy > PolicyLocal ||
		(a.FailureCode != 0 && (a.FailureCode < MinFailureCode || a.FailureCode > MaxFailureCode)) {
		t.Fatalf("accepted out-of-range fields %+v", a)
	}
	// Whatever is accepted can be cached.
	e := Entry{FP: 1, HasAnswer: true, Answer: a, FreshUntil: 1, StaleUntil: 2, Breaker: fresh}
	e.Answer.MaxAge, e.Answer.NoStore = 0, false
	var back Entry
	if err := back.Decode(e.Encode(nil)); err != nil || back != e {
		t.Fatalf("accepted answer %+v does not survive the cache: %v", a, err)
	}
}

func FuzzDecodeEntry(f *testing.F) {
	for _, e := range sampleEntries(f) {
		f.Add(e.Encode(nil))
	}
	f.Add([]byte{1})
	f.Fuzz(func(t *testing.T, b []byte) {
		var e Entry
		if err := e.Decode(b); err != nil {
			return
		}
		// Accepted bytes are canonical: they re-encode to themselves.
		if !bytes.Equal(e.Encode(nil), b) {
			t.Fatalf("%x decodes to %+v, which encodes differently", b, e)
		}
	})
}

// parseSeeds are answers a real service sends, and the mistakes a broken
// one makes.
var parseSeeds = []struct {
	status int
	body   string
}{
	{200, `{"average":1000,"burst":200,"period":"1s","tenant_key":"acme-corp","cache_max_age_seconds":300}`},
	{200, `{"requests_per_second":5,"tenant_key":"t","failure_policy":"deny"}`},
	{200, `{"limit":60,"window":60,"failure_policy":"failclosed","cache_no_store":true}`},
	{200, `{"average":0,"period":"1s","tenant_key":"vip"}`},
	{200, `{"average":-1,"period":"1s"}`},
	{200, `{"average":1.5,"period":"1m"}`},
	{200, `{"average":1,"period":"-5s"}`},
	{200, `{"average":99999999999999999999,"period":"1s"}`},
	{200, `<html><body>Bad Gateway</body></html>`},
	{200, ``},
	{503, `upstream connect error`},
	{404, `{}`},
	{200, `{"limit":60,"window":60,"failure_policy":"failclosed","failure_code":503}`},
	{200, `{"limit":60,"window":60,"tenant_key":"acme","backend_url":"acme-backend"}`},
	{200, `{"limit":60,"window":60,"backend_url":"http://evil.example/\r\nx-injected: 1"}`},
}

// TestWriteFuzzCorpus regenerates testdata/fuzz from parseSeeds and
// sampleEntries when LIMITSVC_WRITE_CORPUS=1; otherwise it checks that the
// committed corpora are there, so the seeds run in every plain go test.
func TestWriteFuzzCorpus(t *testing.T) {
	write := os.Getenv("LIMITSVC_WRITE_CORPUS") == "1"
	corpora := map[string][]string{}
	for _, s := range parseSeeds {
		corpora["FuzzParse"] = append(corpora["FuzzParse"], fmt.Sprintf("int(%d)\n[]byte(%s)\n", s.status, strconv.Quote(s.body)))
	}
	for _, e := range sampleEntries(t) {
		corpora["FuzzDecodeEntry"] = append(corpora["FuzzDecodeEntry"], "[]byte("+strconv.Quote(string(e.Encode(nil)))+")\n")
	}
	for target, seeds := range corpora {
		dir := filepath.Join("testdata", "fuzz", target)
		if write {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			for i, s := range seeds {
				name := filepath.Join(dir, fmt.Sprintf("seed%02d", i))
				if err := os.WriteFile(name, []byte("go test fuzz v1\n"+s), 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
		entries, err := os.ReadDir(dir)
		if err != nil || len(entries) < len(seeds) {
			t.Fatalf("committed fuzz corpus missing in %s (%v); run with LIMITSVC_WRITE_CORPUS=1", dir, err)
		}
	}
}

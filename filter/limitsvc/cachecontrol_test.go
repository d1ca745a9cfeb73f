package limitsvc

import (
	"strings"
	"testing"
	"time"
)

func TestParseCacheControl(t *testing.T) {
	week := MaxAge
	for _, c := range []struct {
		in   string
		want CacheControl
	}{
		{"max-age=30", CacheControl{MaxAge: 30 * time.Second, HasMaxAge: true}},
		{`Max-Age="45", public`, CacheControl{MaxAge: 45 * time.Second, HasMaxAge: true}},
		{"max-age=0", CacheControl{HasMaxAge: true}},
		{"no-store", CacheControl{NoStore: true}},
		{"private, no-cache, max-age=10", CacheControl{MaxAge: 10 * time.Second, HasMaxAge: true, NoCache: true}},
		{`no-cache="set-cookie, x-a"`, CacheControl{NoCache: true}},
		{"max-age=99999999999999999999999", CacheControl{MaxAge: week, HasMaxAge: true}},
		{"", CacheControl{}},
		{" , ,, ", CacheControl{}},
		{"s-maxage=5, stale-while-revalidate=9, x-own=\"a,b\"", CacheControl{}},
		// Garbage: counted, and the directive is ignored.
		{"max-age=abc", CacheControl{Invalid: true}},
		{"max-age=-1", CacheControl{Invalid: true}},
		{"max-age", CacheControl{Invalid: true}},
		{"max-age=1.5", CacheControl{Invalid: true}},
		{`max-age="12`, CacheControl{Invalid: true}},
		{"max-age=abc, no-store", CacheControl{Invalid: true, NoStore: true}},
		{strings.Repeat("x", 5000) + ", no-store", CacheControl{Invalid: true}},
	} {
		if got := ParseCacheControl(c.in); got != c.want {
			t.Errorf("ParseCacheControl(%.40q) = %+v, want %+v", c.in, got, c.want)
		}
	}
}

// TestCacheControlBodyWins: the header applies where the body is
// silent; the body's fields win where both speak.
func TestCacheControlBodyWins(t *testing.T) {
	for _, c := range []struct {
		body, header string
		want         Answer
	}{
		{`{"limit":1,"window":"1s"}`, "max-age=30", Answer{MaxAge: 30 * time.Second}},
		{`{"limit":1,"window":"1s"}`, "no-store", Answer{NoStore: true}},
		{`{"limit":1,"window":"1s"}`, "no-cache", Answer{NoCache: true}},
		{`{"limit":1,"window":"1s"}`, "max-age=0", Answer{NoCache: true}},
		{`{"limit":1,"window":"1s","cache_max_age_seconds":5}`, "max-age=30, no-cache", Answer{MaxAge: 5 * time.Second}},
		{`{"limit":1,"window":"1s","cache_no_store":false}`, "no-store", Answer{}},
		{`{"limit":1,"window":"1s","cache_no_store":true}`, "max-age=30", Answer{MaxAge: 30 * time.Second, NoStore: true}},
		{`{"limit":1,"window":"1s"}`, "max-age=junk", Answer{}},
	} {
		a, err := ParseWith(200, []byte(c.body), ParseCacheControl(c.header))
		if err != nil {
			t.Fatal(err)
		}
		got := Answer{MaxAge: a.MaxAge, NoStore: a.NoStore, NoCache: a.NoCache}
		if got != c.want {
			t.Errorf("body %s, Cache-Control %q: got %+v, want %+v", c.body, c.header, got, c.want)
		}
	}
}

// FuzzCacheControl: any header parses without panicking into bounded
// values.
func FuzzCacheControl(f *testing.F) {
	for _, s := range []string{"max-age=30", `no-cache="a,b", no-store`, "max-age=abc", `max-age="1`, ",,,"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		cc := ParseCacheControl(v)
		if cc.MaxAge < 0 || cc.MaxAge > MaxAge || (!cc.HasMaxAge && cc.MaxAge != 0) {
			t.Fatalf("ParseCacheControl(%q) = %+v", v, cc)
		}
		a, err := ParseWith(200, []byte(`{"limit":1,"window":"1s"}`), cc)
		if err != nil {
			t.Fatal(err)
		}
		if a.MaxAge < 0 || a.MaxAge > MaxAge {
			t.Fatalf("applied %+v: %+v", cc, a)
		}
	})
}

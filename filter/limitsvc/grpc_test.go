package limitsvc

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

func varintField(num protowire.Number, v uint64) []byte {
	return protowire.AppendVarint(protowire.AppendTag(nil, num, protowire.VarintType), v)
}

func textField(num protowire.Number, s string) []byte {
	return protowire.AppendString(protowire.AppendTag(nil, num, protowire.BytesType), s)
}

func msg(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// TestParseGrpc: a GetLimitsResponse means what its JSON form means, with
// protobuf's rules for repeated and unknown fields.
func TestParseGrpc(t *testing.T) {
	full := (&Limits{Average: 100, Burst: 150, Period: "1m", TenantKey: "acme", FailurePolicy: "inmemoryfallback",
		FailureCode: 503, BackendURL: "gold", CacheMaxAgeSeconds: 30, CacheNoStore: true}).AppendProto(nil)
	cases := []struct {
		name string
		in   []byte
		want Answer
		err  string
	}{
		{"every field", full, Answer{Rate: 100, Burst: 150, Period: time.Minute, TenantKey: "acme", Policy: PolicyLocal,
			FailureCode: 503, BackendURL: "gold", MaxAge: 30 * time.Second, NoStore: true}, ""},
		{"explicit zero average is no limit", msg(varintField(1, 0), textField(3, "1s")), Answer{Unlimited: true}, ""},
		{"no average", textField(3, "1s"), Answer{}, "no average"},
		{"empty message", nil, Answer{}, "no average"},
		{"last value wins", msg(varintField(1, 1000), textField(3, "1s"), varintField(1, 5)), Answer{Rate: 5, Period: time.Second}, ""},
		{"unknown fields skipped", msg(textField(99, "x"), varintField(1, 5), textField(3, "1s"), protowire.AppendFixed32(protowire.AppendTag(nil, 50, protowire.Fixed32Type), 7)),
			Answer{Rate: 5, Period: time.Second}, ""},
		{"negative average", msg(varintField(1, uint64(1<<64-1)), textField(3, "1s")), Answer{}, "negative"},
		{"negative failure_code", msg(varintField(1, 1), textField(3, "1s"), varintField(6, uint64(1<<64-451))), Answer{}, "negative"},
		{"failure_code wrapping int32", msg(varintField(1, 1), textField(3, "1s"), varintField(6, 1<<32+451)), Answer{Rate: 1, Period: time.Second, FailureCode: 451}, ""},
		{"average as text", msg(textField(1, "5"), textField(3, "1s")), Answer{}, "wrong protobuf wire type"},
		{"period not UTF-8", msg(varintField(1, 5), textField(3, "1\xffs")), Answer{}, "not UTF-8"},
		{"tenant_key quoting", msg(varintField(1, 5), textField(3, "1s"), textField(4, `a"b\c`+"\x00")), Answer{Rate: 5, Period: time.Second, TenantKey: `a"b\c` + "\x00"}, ""},
		{"truncated", full[:len(full)-1], Answer{}, "truncated"},
		{"group", protowire.AppendTag(nil, 2, protowire.StartGroupType), Answer{}, "groups"},
		{"bad tag", []byte{0x80}, Answer{}, "bad protobuf tag"},
	}
	for _, tc := range cases {
		a, err := ParseGrpc(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: %+v, %v; want an error with %q", tc.name, a, err, tc.err)
			}
			continue
		}
		if err != nil || a != tc.want {
			t.Errorf("%s: %+v, %v; want %+v", tc.name, a, err, tc.want)
		}
	}
}

// TestLookupForms: the JSON lookup the filter renders and its protobuf
// form carry the same request.
func TestLookupForms(t *testing.T) {
	l, err := ParseLookupJSON([]byte(`{"method":"GET","path":"/a","headers":{"x-tenant-id":"acme","x-plan":"gold, silver"}}`))
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseLookupProto(l.AppendProto(nil))
	want := Lookup{Method: "GET", Path: "/a", Headers: [][2]string{{"x-tenant-id", "acme"}, {"x-plan", "gold, silver"}}}
	if err != nil || !reflect.DeepEqual(l, want) || !reflect.DeepEqual(back, want) {
		t.Fatalf("JSON %+v, protobuf %+v (%v); want %+v", l, back, err, want)
	}
	for _, bad := range [][]byte{[]byte(`[]`), []byte(`{`)} {
		if _, err := ParseLookupJSON(bad); err == nil {
			t.Errorf("ParseLookupJSON(%q) accepted", bad)
		}
	}
	for _, bad := range [][]byte{textField(2, "G\xff"), varintField(3, 1), msg(protowire.AppendTag(nil, 1, protowire.BytesType), []byte{5, 1})} {
		if _, err := ParseLookupProto(bad); err == nil {
			t.Errorf("ParseLookupProto(%x) accepted", bad)
		}
	}
}

func FuzzParseGrpc(f *testing.F) {
	f.Add((&Limits{Average: 100, Burst: 150, Period: "1m", TenantKey: "acme", FailurePolicy: "deny",
		FailureCode: 503, BackendURL: "gold", CacheMaxAgeSeconds: 30, CacheNoStore: true}).AppendProto(nil))
	f.Add(msg(varintField(1, 0), textField(3, "1s")))
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := ParseGrpc(b)
		checkParsed(t, a, err)
		if err != nil {
			return
		}
		// What is accepted, written back, means the same.
		l := Limits{Average: a.Rate, Burst: a.Burst, TenantKey: a.TenantKey, FailureCode: int32(a.FailureCode),
			BackendURL: a.BackendURL, CacheMaxAgeSeconds: int64(a.MaxAge / time.Second), CacheNoStore: a.NoStore}
		if !a.Unlimited {
			l.Period = a.Period.String()
		} else {
			l.Period = "1s"
		}
		l.FailurePolicy = [...]string{"", "allow", "deny", "local"}[a.Policy]
		again, err := ParseGrpc(l.AppendProto(nil))
		if err != nil || again != a {
			t.Fatalf("accepted %+v, written back reads %+v, %v", a, again, err)
		}
	})
}

func FuzzParseLookupProto(f *testing.F) {
	l := Lookup{Method: "GET", Path: "/a", Headers: [][2]string{{"x-tenant-id", "acme"}}}
	f.Add(l.AppendProto(nil))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		l, err := ParseLookupProto(b)
		if err != nil {
			return
		}
		back, err := ParseLookupProto(l.AppendProto(nil))
		if err != nil || !reflect.DeepEqual(back, l) {
			t.Fatalf("accepted %+v, written back reads %+v, %v", l, back, err)
		}
	})
}

package breaker

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// sampleRecords returns records in every state and window kind, built by
// driving real machines, for codec tests and the fuzz seeds.
func sampleRecords(t testing.TB) map[string][]byte {
	out := map[string][]byte{}
	settings := map[string]Settings{
		"none":      {FailureThreshold: 3, OpenTimeout: 10 * sec, HalfOpenMaxRequests: 3},
		"count1":    {FailureRatePercent: 50, Window: Window{Size: 1}, FailureThreshold: 3, OpenTimeout: 10 * sec},
		"count100":  {FailureRatePercent: 50, SlowCallDuration: sec, Window: Window{Size: 100, MinimumCalls: 50}, FailureThreshold: 3},
		"count1024": {FailureRatePercent: 90, Window: Window{Size: 1024, MinimumCalls: 10}, FailureThreshold: 3},
		"time":      {FailureRatePercent: 50, SlowCallDuration: sec, Window: Window{Type: WindowTime, Duration: 10 * sec, MinimumCalls: 100}, FailureThreshold: 3},
	}
	for name, s := range settings {
		m, err := NewMachine(s)
		if err != nil {
			t.Fatal(err)
		}
		var r Record
		m.Reset(&r)
		out[name+"_fresh"] = r.Encode(nil)
		now := t0
		for i := 0; i < 1500; i++ {
			tk, _, _ := m.Check(&r, now)
			m.Report(&r, tk, Outcome{Failure: i%3 == 0, Duration: time.Duration(i%4) * sec / 2}, now)
			now = now.Add(37 * time.Millisecond)
		}
		out[name+"_closed"] = r.Encode(nil)
		for i := 0; i < 3; i++ {
			tk, _, _ := m.Check(&r, now)
			m.Report(&r, tk, Outcome{Failure: true}, now)
		}
		out[name+"_open"] = r.Encode(nil)
		now = now.Add(time.Hour)
		m.Check(&r, now)
		m.Check(&r, now)
		out[name+"_halfopen"] = r.Encode(nil)
	}
	return out
}

func TestEncodedSizes(t *testing.T) {
	recs := sampleRecords(t)
	for name, want := range map[string]int{
		"none_closed": 24, "count1_closed": 46, "count100_closed": 62,
		"count1024_closed": MaxEncodedLen, "time_closed": 152,
	} {
		if got := len(recs[name]); got != want {
			t.Errorf("%s: %d bytes, want %d", name, got, want)
		}
	}
	if MaxEncodedLen != 286 {
		t.Errorf("MaxEncodedLen = %d", MaxEncodedLen)
	}
}

func TestDecodeRoundTrip(t *testing.T) {
	for name, b := range sampleRecords(t) {
		var r Record
		if err := r.Decode(b); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got := r.Encode(nil); string(got) != string(b) {
			t.Fatalf("%s: re-encoding differs", name)
		}
	}
}

func TestDecodeRejects(t *testing.T) {
	recs := sampleRecords(t)
	mutate := func(name string, f func(b []byte) []byte) []byte {
		return f(append([]byte(nil), recs[name]...))
	}
	le := binary.LittleEndian
	cases := map[string][]byte{
		"empty":                  nil,
		"short header":           recs["none_closed"][:23],
		"version 0":              mutate("none_closed", func(b []byte) []byte { b[0] = 0; return b }),
		"version 2":              mutate("none_closed", func(b []byte) []byte { b[0] = 2; return b }),
		"reserved flags":         mutate("none_closed", func(b []byte) []byte { b[1] |= 0x10; return b }),
		"state 3":                mutate("none_closed", func(b []byte) []byte { b[1] |= 3; return b }),
		"window kind 3":          mutate("none_closed", func(b []byte) []byte { b[1] |= 3 << 2; return b }),
		"generation 0":           mutate("none_closed", func(b []byte) []byte { le.PutUint32(b[2:], 0); return b }),
		"closed with probes":     mutate("none_closed", func(b []byte) []byte { le.PutUint32(b[20:], 1); return b }),
		"closed with deadline":   mutate("none_closed", func(b []byte) []byte { le.PutUint64(b[6:], 5); return b }),
		"closed with streak":     mutate("none_closed", func(b []byte) []byte { le.PutUint16(b[14:], 1); return b }),
		"open without streak":    mutate("none_open", func(b []byte) []byte { le.PutUint16(b[14:], 0); return b }),
		"open with probes":       mutate("none_open", func(b []byte) []byte { le.PutUint32(b[20:], 1); return b }),
		"half-open stray at":     mutate("none_open", func(b []byte) []byte { b[1] = byte(HalfOpen); return b }),
		"half-open huge probes":  mutate("none_halfopen", func(b []byte) []byte { le.PutUint32(b[20:], 1<<30); return b }),
		"trailing bytes":         mutate("none_closed", func(b []byte) []byte { return append(b, 0) }),
		"count truncated":        recs["count100_closed"][:61],
		"count extended":         mutate("count100_closed", func(b []byte) []byte { return append(b, 0, 0, 0, 0, 0, 0, 0, 0) }),
		"count fixed truncated":  recs["count100_closed"][:27],
		"count size 0":           mutate("count100_closed", func(b []byte) []byte { le.PutUint16(b[24:], 0); return b }),
		"count size 1025":        mutate("count1024_closed", func(b []byte) []byte { le.PutUint16(b[24:], 1025); return b }),
		"count filled > size":    mutate("count100_closed", func(b []byte) []byte { le.PutUint16(b[26:], 101); return b }),
		"count head = size":      mutate("count100_closed", func(b []byte) []byte { le.PutUint16(b[28:], 100); return b }),
		"count head != filled":   mutate("count100_fresh", func(b []byte) []byte { le.PutUint16(b[28:], 1); return b }),
		"count bit past size":    mutate("count100_closed", func(b []byte) []byte { b[30+15] |= 0x80; return b }),
		"count bit past filled":  mutate("count100_fresh", func(b []byte) []byte { b[30] = 1; return b }),
		"count slow past filled": mutate("count100_fresh", func(b []byte) []byte { b[30+16] = 1; return b }),
		"time truncated":         recs["time_closed"][:151],
		"time negative epoch":    mutate("time_fresh", func(b []byte) []byte { b[31] = 0x80; return b }),
		"time fails > calls":     mutate("time_fresh", func(b []byte) []byte { le.PutUint32(b[32+4:], 1); return b }),
		"time slow > calls":      mutate("time_fresh", func(b []byte) []byte { le.PutUint32(b[32+8:], 1); return b }),
	}
	for name, b := range cases {
		var r Record
		err := r.Decode(b)
		if !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: Decode = %v, want ErrCorrupt", name, err)
		}
	}
}

func FuzzDecode(f *testing.F) {
	for _, b := range sampleRecords(f) {
		f.Add(b)
	}
	machines := []*Machine{}
	for _, s := range []Settings{
		{FailureThreshold: 3, HalfOpenMaxRequests: 2},
		{FailureRatePercent: 50, SlowCallDuration: sec, Window: Window{Size: 100}},
		{FailureRatePercent: 50, Window: Window{Type: WindowTime, Duration: 10 * sec}},
	} {
		m, err := NewMachine(s)
		if err != nil {
			f.Fatal(err)
		}
		machines = append(machines, m)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var r Record
		if err := r.Decode(b); err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		if got := r.Encode(nil); string(got) != string(b) {
			t.Fatalf("accepted %x but re-encodes to %x", b, got)
		}
		// Whatever decodes must be safe to decide on under any settings.
		for _, m := range machines {
			c := r
			m.adopt(&c)
			for _, now := range []time.Time{time.Unix(0, 0), t0, time.Unix(0, 1<<62)} {
				tk, _, _ := m.Check(&c, now)
				m.Report(&c, tk, Outcome{Failure: true, Duration: 2 * sec}, now)
				m.Report(&c, Ticket{gen: c.gen, probe: true}, Outcome{}, now)
				m.Report(&c, Ticket{gen: c.gen}, Outcome{}, now)
				var back Record
				if err := back.Decode(c.Encode(nil)); err != nil {
					t.Fatalf("state reached from %x does not decode: %v", b, err)
				}
			}
		}
	})
}

// TestWriteFuzzCorpus regenerates testdata/fuzz/FuzzDecode from
// sampleRecords when BREAKER_WRITE_CORPUS=1; otherwise it checks that the
// committed corpus is there, so the seeds run in every plain `go test`.
func TestWriteFuzzCorpus(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzDecode")
	if os.Getenv("BREAKER_WRITE_CORPUS") == "1" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, b := range sampleRecords(t) {
			body := "go test fuzz v1\n[]byte(" + strconv.Quote(string(b)) + ")\n"
			if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) < 20 {
		t.Fatalf("committed fuzz corpus missing in %s (%v); run with BREAKER_WRITE_CORPUS=1", dir, err)
	}
}

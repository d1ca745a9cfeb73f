package config

import (
	"encoding/json"
	"testing"
	"time"
)

func init() {
	goodConfigs = append(goodConfigs,
		`{"backend": {"cluster": "webdis", "breaker": {"open_timeout": "1s", "open_timeout_multiplier": 2, "open_timeout_max": "1m", "jitter_percent": 0}}}`,
		`{"backend": {"cluster": "webdis", "breaker": {"open_timeout_multiplier": 1.5, "jitter_percent": 100}}}`,
		`{"backend": {"cluster": "webdis", "breaker": {"open_timeout_multiplier": 1}}}`,
	)
	bb := func(fields string) string { return `{"backend": {"cluster": "webdis", "breaker": {` + fields + `}}}` }
	badCases = append(badCases,
		badCase{name: "multiplier below 1", in: bb(`"open_timeout_multiplier": 0.5`),
			want: []string{"backend.breaker.open_timeout_multiplier: must be >= 1"}},
		badCase{name: "multiplier above 100", in: bb(`"open_timeout_multiplier": 1e9`),
			want: []string{"backend.breaker.open_timeout_multiplier: must be <= 100"}},
		badCase{name: "multiplier not a number", in: bb(`"open_timeout_multiplier": "2"`),
			want: []string{"backend.breaker.open_timeout_multiplier: must be a number"}},
		badCase{name: "open_timeout_max without multiplier", in: bb(`"open_timeout_max": "1m"`),
			want: []string{"backend.breaker.open_timeout_max: has no effect without open_timeout_multiplier > 1"}},
		badCase{name: "open_timeout_max with multiplier 1", in: bb(`"open_timeout_multiplier": 1, "open_timeout_max": "1m"`),
			want: []string{"backend.breaker.open_timeout_max: has no effect without open_timeout_multiplier > 1"}, schemaAccepts: true},
		badCase{name: "open_timeout_max below open_timeout", in: bb(`"open_timeout": "10s", "open_timeout_multiplier": 2, "open_timeout_max": "5s"`),
			want: []string{"backend.breaker.open_timeout_max: 5s is less than open_timeout 10s"}, schemaAccepts: true},
		badCase{name: "jitter above 100", in: bb(`"jitter_percent": 101`),
			want: []string{"backend.breaker.jitter_percent: must be <= 100"}},
		badCase{name: "jitter negative and multiplier null", in: bb(`"jitter_percent": -1, "open_timeout_multiplier": null`),
			want: []string{"backend.breaker.jitter_percent: must be >= 0", "backend.breaker.open_timeout_multiplier: must be a number"}},
	)
}

func TestParseBackendRecovery(t *testing.T) {
	for _, c := range []struct {
		in   string
		want BackendBreaker
	}{
		{`{}`, BackendBreaker{OpenTimeout: DefaultBackendBreakerOpenTimeout, JitterPercent: 20}},
		{`{"open_timeout": "2s", "open_timeout_multiplier": 3}`,
			BackendBreaker{OpenTimeout: 2 * time.Second, OpenTimeoutMultiplier: 3, OpenTimeoutMax: 20 * time.Second, JitterPercent: 20}},
		{`{"open_timeout": "2h", "open_timeout_multiplier": 3}`,
			BackendBreaker{OpenTimeout: 2 * time.Hour, OpenTimeoutMultiplier: 3, OpenTimeoutMax: 20 * time.Hour, JitterPercent: 20}},
		{`{"open_timeout": "5h", "open_timeout_multiplier": 3}`, // 10 × 5h is past the 24h bound of durations
			BackendBreaker{OpenTimeout: 5 * time.Hour, OpenTimeoutMultiplier: 3, OpenTimeoutMax: 24 * time.Hour, JitterPercent: 20}},
		{`{"open_timeout_multiplier": 1.5, "open_timeout_max": "1m", "jitter_percent": 0}`,
			BackendBreaker{OpenTimeout: DefaultBackendBreakerOpenTimeout, OpenTimeoutMultiplier: 1.5, OpenTimeoutMax: time.Minute}},
	} {
		cfg := mustParse(t, `{"backend": {"cluster": "webdis", "breaker": `+c.in+`}}`)
		got := cfg.Backend.Breaker
		got.FailureThreshold, got.Window, got.HalfOpenMaxRequests = 0, 0, 0
		if got != c.want {
			t.Errorf("%s: got %+v, want %+v", c.in, got, c.want)
		}
	}
}

func TestSchemaJitterDefault(t *testing.T) {
	var s struct {
		Defs map[string]struct {
			Properties map[string]struct {
				Properties map[string]struct {
					Default any `json:"default"`
				} `json:"properties"`
			} `json:"properties"`
		} `json:"$defs"`
	}
	if err := json.Unmarshal(Schema(), &s); err != nil {
		t.Fatal(err)
	}
	got := s.Defs["backend"].Properties["breaker"].Properties["jitter_percent"].Default
	if got != float64(DefaultBackendJitterPercent) {
		t.Errorf("schema backend.breaker.jitter_percent default %v, parser default %d", got, DefaultBackendJitterPercent)
	}
}

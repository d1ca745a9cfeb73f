package config

import (
	"testing"
)

func init() {
	goodConfigs = append(goodConfigs,
		`{"limits": [{"name": "a", "requests_per_second": 1, "enabled": false}, {"name": "b", "requests_per_second": 1, "enabled": true}],
		  "breakers": [{"name": "b", "enabled": false}], "concurrency": [{"name": "c", "max_in_flight": 1, "enabled": false}]}`,
		// A switched-off limit is still a complete limit: global needs the backend.
		`{"limits": [{"name": "a", "requests_per_second": 1, "mode": "global", "enabled": false}], "backend": {"cluster": "webdis"}}`,
	)
	badCases = append(badCases,
		badCase{name: "limit enabled type", in: lim(`, "enabled": "no"`), want: []string{"limits[0].enabled: must be a boolean"}},
		badCase{name: "breaker enabled type", in: `{"breakers": [{"name": "b", "enabled": 0}]}`,
			want: []string{"breakers[0].enabled: must be a boolean"}},
		badCase{name: "concurrency enabled type", in: `{"concurrency": [{"name": "c", "max_in_flight": 1, "enabled": null}]}`,
			want: []string{"concurrency[0].enabled: must be a boolean"}},
		// Switched off is not unchecked: the rest of the entry must be valid.
		badCase{name: "disabled limit still checked", in: `{"limits": [{"name": "a", "enabled": false}]}`,
			want: []string{"limits[0]: one of requests_per_second or limit with window is required"}},
	)
}

func TestParseEnabled(t *testing.T) {
	c := mustParse(t, `{"limits": [{"name": "a", "requests_per_second": 1, "enabled": false}, {"name": "b", "requests_per_second": 1, "enabled": true},
		{"name": "c", "requests_per_second": 1}],
		"breakers": [{"name": "b", "enabled": false}, {"name": "d"}],
		"concurrency": [{"name": "c", "max_in_flight": 1, "enabled": false}, {"name": "d", "max_in_flight": 1}]}`)
	if !c.Limits[0].Disabled || c.Limits[1].Disabled || c.Limits[2].Disabled {
		t.Errorf("limits Disabled = %v %v %v, want true false false", c.Limits[0].Disabled, c.Limits[1].Disabled, c.Limits[2].Disabled)
	}
	if !c.Breakers[0].Disabled || c.Breakers[1].Disabled {
		t.Errorf("breakers Disabled = %v %v, want true false", c.Breakers[0].Disabled, c.Breakers[1].Disabled)
	}
	if !c.Concurrency[0].Disabled || c.Concurrency[1].Disabled {
		t.Errorf("concurrency Disabled = %v %v, want true false", c.Concurrency[0].Disabled, c.Concurrency[1].Disabled)
	}
}

// TestSchemaEnabledDefault keeps the schema's "enabled" default equal to
// what Parse fills in when the field is absent.
func TestSchemaEnabledDefault(t *testing.T) {
	c := mustParse(t, `{"limits": [{"name": "a", "requests_per_second": 1}], "breakers": [{"name": "b"}],
		"concurrency": [{"name": "c", "max_in_flight": 1}]}`)
	parsed := map[string]bool{"limit": !c.Limits[0].Disabled, "breaker": !c.Breakers[0].Disabled, "concurrency": !c.Concurrency[0].Disabled}
	for def, enabled := range parsed {
		if got := schemaDefault(t, def, "enabled"); got != enabled {
			t.Errorf("schema %s.enabled default %v, parser default %v", def, got, enabled)
		}
	}
}

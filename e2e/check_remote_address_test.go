package e2e_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-proxy/sluice/e2e/envoy"
	"github.com/sluice-proxy/sluice/filter/ops"
	"github.com/sluice-proxy/sluice/internal/fixtures/testkit"
)

// sluicectl check reads use_remote_address as our Envoy stand-in reads
// it: a YAML boolean in any of its spellings is its value, and a value the
// stand-in refuses to start with (a quoted "true", yes, 1, a mapping) is
// an error of check's, not a silent false that warns about the admin
// route and the peer key.
func TestCheckReadsUseRemoteAddressAsTheStandIn(t *testing.T) {
	const plugin = `{"limits":[{"name":"p","key":["client_ip"],"limit":3,"window":"1h"}],
	  "admin":{"client_cidrs":["127.0.0.4/32"],"token_sha256":"757224ba37701e155c211a2dc2ed5debaf36faba66aa0cde42587cfc27fa1c30"}}`
	wasm := testkit.Built(t, filepath.Join("..", "build", "sluice.wasm"))
	base := pluginBootstrap(wasm, plugin, "127.0.0.1:1", nil).YAML()
	const line = "          use_remote_address: true\n"
	for _, spelling := range []string{"true", "True", "TRUE", "false", "False", `"true"`, "'true'", "yes", "on", "1", "{value: true}", "", "~"} {
		t.Run(spelling, func(t *testing.T) {
			b := pluginBootstrap(wasm, plugin, "127.0.0.1:1", nil)
			b.Listener.UseRemoteAddress = true
			yaml := b.YAML()
			if !strings.Contains(yaml, line) || strings.Contains(base, line) {
				t.Fatal("the bootstrap builder no longer writes use_remote_address as this test expects")
			}
			yaml = strings.Replace(yaml, line, "          use_remote_address: "+spelling+"\n", 1)
			cfg, loadErr := envoy.Load([]byte(yaml))
			r := ops.Check("envoy.yaml", []byte(yaml))
			var checkErr, warned bool
			for _, e := range r.Errors {
				checkErr = checkErr || strings.Contains(e.Message, "use_remote_address")
			}
			for _, w := range r.Warnings {
				warned = warned || w.Code == "admin_without_use_remote_address"
			}
			switch {
			case (loadErr != nil) != checkErr:
				t.Fatalf("the stand-in: %v; check's errors: %+v", loadErr, r.Errors)
			case loadErr == nil && cfg.Listeners[0].UseRemoteAddress == warned:
				t.Fatalf("the stand-in reads use_remote_address %v; check warns %v", cfg.Listeners[0].UseRemoteAddress, warned)
			}
		})
	}
}

// The same for the other ways Envoy's YAML loader reads a field: the
// protobuf JSON name (useRemoteAddress) and merge keys are its value; a
// key given twice in one mapping, or the field in both spellings, is a
// file the stand-in refuses to start with, so an error of check's.
func TestCheckReadsUseRemoteAddressSpellingsAndMergesAsTheStandIn(t *testing.T) {
	const plugin = `{"limits":[{"name":"p","key":["client_ip"],"limit":3,"window":"1h"}],
	  "admin":{"client_cidrs":["127.0.0.4/32"],"token_sha256":"757224ba37701e155c211a2dc2ed5debaf36faba66aa0cde42587cfc27fa1c30"}}`
	wasm := testkit.Built(t, filepath.Join("..", "build", "sluice.wasm"))
	const indent = "          "
	const line = indent + "use_remote_address: true\n"
	for _, c := range []struct {
		name  string
		lines []string
		// refused is whether the stand-in refuses the file; ura is
		// what it reads otherwise.
		refused, ura bool
	}{
		{"camel true", []string{"useRemoteAddress: true"}, false, true},
		{"camel false", []string{"useRemoteAddress: false"}, false, false},
		{"merge", []string{"<<: {use_remote_address: true}"}, false, true},
		{"merge camel", []string{"<<: {useRemoteAddress: true}"}, false, true},
		{"merge list, first wins", []string{"<<: [{use_remote_address: true}, {use_remote_address: false}]"}, false, true},
		{"own key wins over merge", []string{"<<: {use_remote_address: false}", "use_remote_address: true"}, false, true},
		{"duplicate key", []string{"use_remote_address: true", "use_remote_address: false"}, true, false},
		{"duplicate camel key", []string{"useRemoteAddress: true", "useRemoteAddress: true"}, true, false},
		{"snake then camel", []string{"use_remote_address: false", "useRemoteAddress: true"}, true, false},
		{"camel then snake", []string{"useRemoteAddress: true", "use_remote_address: false"}, true, false},
		{"camel from a merge", []string{"<<: {useRemoteAddress: false}", "use_remote_address: true"}, true, false},
		{"duplicate other key", []string{"use_remote_address: true", "stat_prefix: again"}, true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := pluginBootstrap(wasm, plugin, "127.0.0.1:1", nil)
			b.Listener.UseRemoteAddress = true
			yaml := b.YAML()
			if !strings.Contains(yaml, line) {
				t.Fatal("the bootstrap builder no longer writes use_remote_address as this test expects")
			}
			yaml = strings.Replace(yaml, line, indent+strings.Join(c.lines, "\n"+indent)+"\n", 1)
			cfg, loadErr := envoy.Load([]byte(yaml))
			if (loadErr != nil) != c.refused || loadErr == nil && cfg.Listeners[0].UseRemoteAddress != c.ura {
				t.Fatalf("the stand-in no longer reads this as the test says: %v", loadErr)
			}
			r := ops.Check("envoy.yaml", []byte(yaml))
			var warned bool
			for _, w := range r.Warnings {
				warned = warned || w.Code == "admin_without_use_remote_address"
			}
			switch {
			case c.refused && (len(r.Errors) != 1 || r.Errors[0].YAMLPath == "" || r.Errors[0].Line == 0):
				t.Fatalf("the stand-in refuses it (%v); check's errors: %+v", loadErr, r.Errors)
			case !c.refused && len(r.Errors) > 0:
				t.Fatalf("the stand-in starts; check's errors: %+v", r.Errors)
			case !c.refused && warned == c.ura:
				t.Fatalf("the stand-in reads use_remote_address %v; check warns %v", c.ura, warned)
			}
		})
	}
}

package config

import (
	"reflect"
	"testing"
)

func init() {
	badCases = append(badCases, clientIPSourcesBadCases...)
	goodConfigs = append(goodConfigs,
		`{"client_ip": {"sources": ["xff", "header:X-Real-IP", "peer"], "trusted_hops": 2}}`,
		`{"client_ip": {"sources": ["header:x-real-ip"]}}`,
	)
}

var clientIPSourcesBadCases = []badCase{
	{name: "source and sources", in: `{"client_ip": {"source": "peer", "sources": ["peer"]}}`,
		want: []string{"client_ip.sources: cannot be combined with source"}},
	{name: "bad sources", in: `{"client_ip": {"sources": ["xff", "real-ip", "header:", 1, "peer", "peer"]}}`,
		want: []string{`client_ip.sources[1]: unknown source "real-ip"; want xff, header:<name> or peer`,
			`client_ip.sources[2]: unknown source "header:"; want xff, header:<name> or peer`,
			"client_ip.sources[3]: must be a string", `client_ip.sources[5]: duplicate source "peer"`}},
	{name: "sources with header field", in: `{"client_ip": {"sources": ["peer"], "header": "x"}}`,
		want: []string{`client_ip.header: only valid with source "header"`}},
	{name: "sources duplicate header case", in: `{"client_ip": {"sources": ["header:X-A", "header:x-a"]}}`,
		want: []string{`client_ip.sources[1]: duplicate source "header:x-a"`}, schemaAccepts: true},
	{name: "sources empty", in: `{"client_ip": {"sources": []}}`, want: []string{"client_ip.sources: must not be empty; omit it to use source"}},
	{name: "trusted_hops with sources lacking xff", in: `{"client_ip": {"sources": ["peer"], "trusted_hops": 2}}`,
		want: []string{`client_ip.trusted_hops: only valid with source "xff" or sources with "xff"`}},
}

func TestClientIPSourcesParse(t *testing.T) {
	c := mustParse(t, `{"client_ip": {"sources": ["xff", "header:X-Real-IP", "peer"], "trusted_hops": 2}}`)
	want := ClientIP{TrustedHops: 2, Sources: []ClientIPFrom{{Kind: ClientIPXFF}, {Kind: ClientIPHeader, Header: "x-real-ip"}, {Kind: ClientIPPeer}}}
	if !reflect.DeepEqual(c.ClientIP, want) {
		t.Fatalf("client_ip = %+v, want %+v", c.ClientIP, want)
	}
}

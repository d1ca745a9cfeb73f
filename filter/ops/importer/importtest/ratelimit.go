package importtest

import (
	"fmt"
	"net/netip"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sluice-proxy/sluice/internal/fixtures/ratelimitsvc"
)

// RatelimitScenario is one of envoyproxy/ratelimit's documented examples (its
// README, "Examples"), the route rate_limits that make its descriptors,
// and traffic for it.
type RatelimitScenario struct {
	Name   string
	Domain string
	Config string // the service's YAML
	// rateLimits is the route's rate_limits, indented for the route.
	RateLimits string
	// traffic is sent in order; a nil request waits for the next second.
	Traffic []*RatelimitRequest
	// units are the windows the config counts in, to see a request that
	// straddled a window edge.
	Units []time.Duration
	// WantDenials: the traffic must make the service refuse some.
	WantDenials bool
	// Overcounts: the traffic shows the documented difference of several
	// descriptors per request: the service counts a request it refuses
	// against every descriptor, so it then refuses some that Sluice,
	// which counted the refused request against none, admits. Only that
	// difference may appear, and it must.
	Overcounts bool
}

// RatelimitRequest is one request of a scenario's traffic.

type RatelimitRequest struct {
	Method  string
	Headers [][2]string
	Client  string
}

func reqs(n int, method, client string, headers ...string) []*RatelimitRequest {
	var hs [][2]string
	for i := 0; i+1 < len(headers); i += 2 {
		hs = append(hs, [2]string{headers[i], headers[i+1]})
	}
	out := make([]*RatelimitRequest, n)
	for i := range out {
		out[i] = &RatelimitRequest{Method: method, Headers: hs, Client: client}
	}
	return out
}

func cat(parts ...[]*RatelimitRequest) []*RatelimitRequest {
	var out []*RatelimitRequest
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// example2Config is the README's example 2, and example2RateLimits the
// route's actions that make its descriptors.
const (
	example2Config = `domain: messaging
descriptors:
  # Only allow 5 marketing messages a day
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit:
          unit: day
          requests_per_unit: 5

  # Only allow 100 messages a day to any unique phone number
  - key: to_number
    rate_limit:
      unit: day
      requests_per_unit: 100
`
	example2RateLimits = `
- actions:
  - request_headers: {header_name: x-message-type, descriptor_key: message_type}
  - request_headers: {header_name: x-to, descriptor_key: to_number}
- actions:
  - request_headers: {header_name: x-to, descriptor_key: to_number}`
)

// remoteAddressRateLimits makes a descriptor of the client address.
const remoteAddressRateLimits = `
- actions:
  - remote_address: {}`

// client is the scenarios' default client address.
const client = "10.0.0.1"

var RatelimitScenarios = []RatelimitScenario{
	{
		Name: "example1", Domain: "mongo_cps", Units: []time.Duration{time.Second}, WantDenials: true,
		Config: `domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit:
      unit: second
      requests_per_unit: 500

  - key: database
    value: default
    rate_limit:
      unit: second
      requests_per_unit: 500
`,
		RateLimits: `
- actions:
  - request_headers: {header_name: x-database, descriptor_key: database}`,
		Traffic: cat(reqs(503, "GET", client, "x-database", "users"), reqs(3, "GET", client, "x-database", "default"),
			reqs(3, "GET", client, "x-database", "other"), reqs(2, "GET", client), []*RatelimitRequest{nil},
			reqs(3, "GET", client, "x-database", "users")),
	},
	{
		Name: "example2", Domain: "messaging", Units: []time.Duration{24 * time.Hour}, WantDenials: true,
		Config:     example2Config,
		RateLimits: example2RateLimits,
		Traffic: cat(reqs(7, "POST", client, "x-message-type", "marketing", "x-to", "2061111111"),
			reqs(3, "POST", client, "x-message-type", "marketing", "x-to", "2062222222"),
			reqs(4, "POST", client, "x-message-type", "transactional", "x-to", "2061111111"),
			reqs(2, "POST", client, "x-message-type", "marketing")),
	},
	{
		Name: "example3", Domain: "edge_proxy_per_ip", Units: []time.Duration{time.Second}, WantDenials: true,
		Config: `domain: edge_proxy_per_ip
descriptors:
  - key: remote_address
    rate_limit:
      unit: second
      requests_per_unit: 10

  # Black list IP
  - key: remote_address
    value: 50.0.0.5
    rate_limit:
      unit: second
      requests_per_unit: 0
`,
		RateLimits: remoteAddressRateLimits,
		Traffic:    cat(reqs(12, "GET", "50.0.0.1"), reqs(3, "GET", "50.0.0.5"), reqs(11, "GET", "2001:db8::1"), reqs(2, "GET", "50.0.0.2")),
	},
	{
		Name: "example4", Domain: "example4", Units: []time.Duration{time.Second}, WantDenials: true,
		Config: `domain: example4
descriptors:
  - key: key
    value: value
    descriptors:
      - key: subkey
        rate_limit:
          requests_per_unit: 300
          unit: second
`,
		RateLimits: `
- actions:
  - generic_key: {descriptor_key: key, descriptor_value: value}
  - request_headers: {header_name: x-subkey, descriptor_key: subkey}`,
		Traffic: cat(reqs(303, "GET", client, "x-subkey", "subvalue"), reqs(2, "GET", client, "x-subkey", "other")),
	},
	{
		// The README's first configuration of example 4, under a domain
		// of its own: a two-entry descriptor never matches it.
		Name: "example4-flat", Domain: "example4_flat", Units: []time.Duration{time.Second},
		Config: `domain: example4_flat
descriptors:
  - key: key
    value: value
    rate_limit:
      requests_per_unit: 300
      unit: second
`,
		RateLimits: `
- actions:
  - generic_key: {descriptor_key: key, descriptor_value: value}
  - request_headers: {header_name: x-subkey, descriptor_key: subkey}`,
		Traffic: reqs(303, "GET", client, "x-subkey", "subvalue"),
	},
	{
		Name: "example5", Domain: "internal", Units: []time.Duration{time.Minute}, WantDenials: true,
		Config: `domain: internal
descriptors:
  - key: ldap
    rate_limit:
      unlimited: true

  - key: azure
    rate_limit:
      unit: minute
      requests_per_unit: 100
`,
		RateLimits: `
- actions:
  - request_headers: {header_name: x-ldap, descriptor_key: ldap}
- actions:
  - request_headers: {header_name: x-azure, descriptor_key: azure}`,
		Traffic: cat(reqs(103, "GET", client, "x-azure", "a"), reqs(5, "GET", client, "x-ldap", "u"), reqs(3, "GET", client, "x-azure", "b")),
	},
	{
		Name: "example6", Domain: "example6", Units: []time.Duration{time.Second}, WantDenials: true,
		Config: `domain: example6
descriptors:
  - key: service
    descriptors:
      - key: user
        value: user-a
        rate_limit:
          requests_per_unit: 10
          unit: second
        shadow_mode: true
      - key: user
        value: user-b
        rate_limit:
          requests_per_unit: 20
          unit: second
`,
		RateLimits: `
- actions:
  - request_headers: {header_name: x-service, descriptor_key: service}
  - request_headers: {header_name: x-user, descriptor_key: user}`,
		Traffic: cat(reqs(15, "GET", client, "x-service", "auth-service", "x-user", "user-a"),
			reqs(23, "GET", client, "x-service", "auth-service", "x-user", "user-b"),
			reqs(3, "GET", client, "x-service", "auth-service", "x-user", "user-c")),
	},
	{
		Name: "example7", Domain: "example7", Units: []time.Duration{time.Second}, WantDenials: true,
		Config: `domain: example7
descriptors:
  - key: key_1
    value: value_1
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          name: specific_limit
          requests_per_unit: 5
          unit: second
  - key: key_2
    value: value_2
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          replaces:
            - name: specific_limit
          requests_per_unit: 10
          unit: second
`,
		RateLimits: `
- actions:
  - header_value_match: {descriptor_key: key_1, descriptor_value: value_1, headers: [{name: x-k1, present_match: true}]}
  - request_headers: {header_name: x-user, descriptor_key: user}
- actions:
  - header_value_match: {descriptor_key: key_2, descriptor_value: value_2, headers: [{name: x-k2, present_match: true}]}
  - request_headers: {header_name: x-user, descriptor_key: user}`,
		Traffic: cat(reqs(7, "GET", client, "x-k1", "1", "x-user", "bkthomps"),
			reqs(12, "GET", client, "x-k1", "1", "x-k2", "1", "x-user", "bkthomps"),
			reqs(3, "GET", client, "x-k2", "1", "x-user", "bkthomps")),
	},
	{
		Name: "example8", Domain: "example8", Units: []time.Duration{time.Minute}, WantDenials: true,
		Config: `domain: example8
descriptors:
  - key: key1
    detailed_metric: true
    rate_limit:
      unit: minute
      requests_per_unit: 10
  - key: key1
    value: value1
    rate_limit:
      unit: minute
      requests_per_unit: 20
`,
		RateLimits: `
- actions:
  - request_headers: {header_name: x-key1, descriptor_key: key1}`,
		Traffic: cat(reqs(22, "GET", client, "x-key1", "value1"), reqs(12, "GET", client, "x-key1", "other"), reqs(11, "GET", client, "x-key1", "another")),
	},
	{
		Name: "example10", Domain: "example10", Units: []time.Duration{time.Minute}, WantDenials: true,
		Config: `domain: example10
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: http_method
        value_to_metric: true
        descriptors:
          - key: subject_id
            rate_limit:
              unit: minute
              requests_per_unit: 60
`,
		RateLimits: `
- actions:
  - request_headers: {header_name: x-route, descriptor_key: route}
  - request_headers: {header_name: ":method", descriptor_key: http_method}
  - request_headers: {header_name: x-subject, descriptor_key: subject_id}`,
		Traffic: cat(reqs(62, "GET", client, "x-route", "api", "x-subject", "123"),
			reqs(3, "POST", client, "x-route", "api", "x-subject", "123"),
			reqs(2, "GET", client, "x-route", "web", "x-subject", "456")),
	},
	{
		// Not from the README: masked_remote_address, with one /24
		// given its own limit and another blocked.
		Name: "masked-address", Domain: "masked", Units: []time.Duration{time.Second}, WantDenials: true,
		Config: `domain: masked
descriptors:
  - key: masked_remote_address
    rate_limit: {unit: second, requests_per_unit: 3}
  - key: masked_remote_address
    value: 10.0.1.0/24
    rate_limit: {unit: second, requests_per_unit: 5}
  - key: masked_remote_address
    value: 192.0.2.0/24
    rate_limit: {unit: second, requests_per_unit: 0}
`,
		RateLimits: `
- actions:
  - masked_remote_address: {v4_prefix_mask_len: 24}`,
		Traffic: cat(reqs(2, "GET", "10.0.0.1"), reqs(2, "GET", "10.0.0.2"), reqs(7, "GET", "10.0.1.9"), reqs(2, "GET", "192.0.2.5"), reqs(4, "GET", "10.9.9.9")),
	},
	{
		// Example 2 again, with traffic past the 100 a day of one number:
		// the service counted the refused marketing messages against
		// to_number too.
		Name: "example2-overcount", Domain: "messaging", Units: []time.Duration{24 * time.Hour}, WantDenials: true, Overcounts: true,
		Config: example2Config, RateLimits: example2RateLimits,
		Traffic: cat(reqs(104, "POST", client, "x-message-type", "marketing", "x-to", "2063333333"),
			reqs(5, "POST", client, "x-message-type", "transactional", "x-to", "2063333333")),
	},
	{
		// Values that are no canonical address never match in the
		// service, which compares the text Envoy sends: they must not
		// exempt a range, an address or another spelling.
		Name: "remote-address-values", Domain: "address_values", Units: []time.Duration{time.Second}, WantDenials: true,
		Config: `domain: address_values
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: remote_address
    value: 10.0.0.0/8
    rate_limit: {unlimited: true}
  - key: remote_address
    value: 10.0.0.1/32
    rate_limit: {unlimited: true}
  - key: remote_address
    value: "2001:DB8::1"
    rate_limit: {unlimited: true}
  - key: remote_address
    value: "::ffff:10.0.0.2"
    rate_limit: {unlimited: true}
  - key: remote_address
    value: "2001:db8::2"
    rate_limit: {unlimited: true}
`,
		RateLimits: remoteAddressRateLimits,
		Traffic:    cat(reqs(4, "GET", "10.0.0.1"), reqs(4, "GET", "10.0.0.2"), reqs(4, "GET", "2001:db8::1"), reqs(4, "GET", "2001:db8::2")),
	},
	{
		// The service files descriptors as key or key_value in one map:
		// the entry user=vip finds the descriptor keyed user_vip.
		Name: "underscore-key", Domain: "underscore", Units: []time.Duration{time.Second}, WantDenials: true,
		Config: `domain: underscore
descriptors:
  - key: user_vip
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: user
    rate_limit: {unit: second, requests_per_unit: 100}
`,
		RateLimits: `
- actions:
  - request_headers: {header_name: x-user, descriptor_key: user}`,
		Traffic: cat(reqs(3, "GET", client, "x-user", "vip"), reqs(3, "GET", client, "x-user", "bob")),
	},
	{
		// replaces come only from the rule a descriptor resolves to:
		// alice, bob and carol resolve to their own descriptors, so the
		// default's replaces leave general in force for them.
		Name: "replaces-resolved", Domain: "replaces_resolved", Units: []time.Duration{time.Second}, WantDenials: true,
		Config: `domain: replaces_resolved
descriptors:
  - key: generic_key
    value: g
    rate_limit: {unit: second, requests_per_unit: 2, name: general}
  - key: user
    rate_limit: {unit: second, requests_per_unit: 100, name: spec, replaces: [{name: general}]}
  - key: user
    value: alice
    rate_limit: {unlimited: true}
  - key: user
    value: bob
    rate_limit: {unit: second, requests_per_unit: 1000}
  - key: user
    value: carol
`,
		RateLimits: `
- actions:
  - generic_key: {descriptor_key: generic_key, descriptor_value: g}
- actions:
  - request_headers: {header_name: x-user, descriptor_key: user}`,
		Traffic: cat(reqs(3, "GET", client, "x-user", "dave"), reqs(3, "GET", client, "x-user", "alice"),
			reqs(2, "GET", client, "x-user", "bob"), reqs(2, "GET", client, "x-user", "carol"), reqs(2, "GET", client, "x-user", "erin")),
	},
	{
		// Envoy's ignore_case folds ASCII only: x-class: ſK (U+017F)
		// is not sk there, so it is limited.
		Name: "ignore-case-ascii", Domain: "ignore_case", Units: []time.Duration{time.Second}, WantDenials: true,
		Config: `domain: ignore_case
descriptors:
  - key: header_match
    value: limited
    rate_limit: {unit: second, requests_per_unit: 1}
`,
		RateLimits: `
- actions:
  - header_value_match: {descriptor_value: limited, expect_match: false, headers: [{name: x-class, string_match: {exact: sk, ignore_case: true}}]}`,
		Traffic: cat(reqs(3, "GET", client, "x-class", "SK"), reqs(3, "GET", client, "x-class", "\u017fK"), reqs(2, "GET", client, "x-class", "s\u212a")),
	},
}

// EnvoyYAML is a listener whose one route, r, has rateLimits, with
// Envoy's ratelimit filter for domain.
func EnvoyYAML(domain, rateLimits string) string {
	return Listener("envoy.filters.http.ratelimit", `              "@type": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit
              domain: `+domain, `              - name: r
                match: {prefix: /}
                route:
                  cluster: backend
                  rate_limits:`+strings.ReplaceAll(rateLimits, "\n", "\n                  ")+"\n")
}

// envoyAction is the part of Envoy's RateLimit.Action the scenarios use,
// read by the test's own model of how Envoy makes descriptors.
type envoyAction struct {
	RequestHeaders *struct {
		HeaderName    string `yaml:"header_name"`
		DescriptorKey string `yaml:"descriptor_key"`
		SkipIfAbsent  bool   `yaml:"skip_if_absent"`
	} `yaml:"request_headers"`
	RemoteAddress       *struct{} `yaml:"remote_address"`
	MaskedRemoteAddress *struct {
		V4 int `yaml:"v4_prefix_mask_len"`
	} `yaml:"masked_remote_address"`
	GenericKey *struct {
		DescriptorKey   string `yaml:"descriptor_key"`
		DescriptorValue string `yaml:"descriptor_value"`
	} `yaml:"generic_key"`
	HeaderValueMatch *struct {
		DescriptorKey   string `yaml:"descriptor_key"`
		DescriptorValue string `yaml:"descriptor_value"`
		ExpectMatch     *bool  `yaml:"expect_match"`
		Headers         []struct {
			Name         string `yaml:"name"`
			PresentMatch bool   `yaml:"present_match"`
			StringMatch  *struct {
				Exact      string `yaml:"exact"`
				IgnoreCase bool   `yaml:"ignore_case"`
			} `yaml:"string_match"`
		} `yaml:"headers"`
	} `yaml:"header_value_match"`
}

// Descriptors is what Envoy sends the service for req: per entry of
// rate_limits, the entries of its actions, or no descriptor when an
// action cannot produce its entry (a header absent without
// skip_if_absent, a header match that fails).
func Descriptors(rateLimits string, req *RatelimitRequest) ([]ratelimitsvc.Descriptor, error) {
	var entries []struct {
		Actions []envoyAction `yaml:"actions"`
	}
	if err := yaml.Unmarshal([]byte(rateLimits), &entries); err != nil {
		return nil, err
	}
	header := func(name string) (string, bool) {
		if name == ":method" {
			return req.Method, true
		}
		for _, h := range req.Headers {
			if h[0] == name {
				return h[1], true
			}
		}
		return "", false
	}
	var out []ratelimitsvc.Descriptor
	for _, e := range entries {
		var d ratelimitsvc.Descriptor
		ok := true
		for _, a := range e.Actions {
			switch {
			case a.RequestHeaders != nil:
				v, present := header(a.RequestHeaders.HeaderName)
				if !present {
					ok = a.RequestHeaders.SkipIfAbsent
				} else {
					d.Entries = append(d.Entries, ratelimitsvc.Entry{Key: a.RequestHeaders.DescriptorKey, Value: v})
				}
			case a.MaskedRemoteAddress != nil:
				p := netip.PrefixFrom(netip.MustParseAddr(req.Client), a.MaskedRemoteAddress.V4).Masked()
				d.Entries = append(d.Entries, ratelimitsvc.Entry{Key: "masked_remote_address", Value: p.String()})
			case a.RemoteAddress != nil:
				d.Entries = append(d.Entries, ratelimitsvc.Entry{Key: "remote_address", Value: req.Client})
			case a.GenericKey != nil:
				d.Entries = append(d.Entries, ratelimitsvc.Entry{Key: a.GenericKey.DescriptorKey, Value: a.GenericKey.DescriptorValue})
			case a.HeaderValueMatch != nil:
				matched := true
				for _, h := range a.HeaderValueMatch.Headers {
					v, present := header(h.Name)
					if h.StringMatch != nil {
						matched = matched && present && (v == h.StringMatch.Exact || h.StringMatch.IgnoreCase && asciiEqualFold(v, h.StringMatch.Exact))
					} else if present != h.PresentMatch {
						matched = false
					}
				}
				ok = matched == (a.HeaderValueMatch.ExpectMatch == nil || *a.HeaderValueMatch.ExpectMatch)
				key := a.HeaderValueMatch.DescriptorKey
				if key == "" {
					key = "header_match"
				}
				if ok {
					d.Entries = append(d.Entries, ratelimitsvc.Entry{Key: key, Value: a.HeaderValueMatch.DescriptorValue})
				}
			default:
				return nil, fmt.Errorf("the tests' Envoy model lacks an action of %s", rateLimits)
			}
			if !ok {
				break
			}
		}
		if ok {
			out = append(out, d)
		}
	}
	return out, nil
}

// asciiEqualFold is absl::EqualsIgnoreCase, which Envoy's ignore_case
// uses: ASCII letters only, byte by byte.
func asciiEqualFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	lower := func(c byte) byte {
		if c >= 'A' && c <= 'Z' {
			return c + 'a' - 'A'
		}
		return c
	}
	for i := 0; i < len(a); i++ {
		if lower(a[i]) != lower(b[i]) {
			return false
		}
	}
	return true
}

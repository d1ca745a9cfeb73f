package envoy

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	h2mv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/header_to_metadata/v3"

	"github.com/sluice-proxy/sluice/e2e/host"
)

// HeaderToMetadataFilterName is the filter's name in Envoy.
const HeaderToMetadataFilterName = "envoy.filters.http.header_to_metadata"

// maxMetadataValueLen is Envoy's limit on a value this filter copies:
// longer ones are skipped.
const maxMetadataValueLen = 8 * 1024

// HeaderToMetadata is an envoy.filters.http.header_to_metadata filter's
// request_rules. Response rules, cookies, regex_value_rewrite, the
// PROTOBUF_VALUE type and base64 encoding are not implemented, so a
// config using them does not load.
type HeaderToMetadata struct {
	Rules []MetadataRule
}

// MetadataRule is one request rule.
type MetadataRule struct {
	// Header is lower-case.
	Header           string
	Present, Missing *MetadataPair
	Remove           bool
}

// MetadataPair is an on_header_present or on_header_missing entry.
type MetadataPair struct {
	Namespace, Key, Value string
	// Number is type NUMBER: the value is stored as a double.
	Number bool
}

func buildHeaderToMetadata(c *h2mv3.Config, path string) (*HeaderToMetadata, error) {
	// Envoy's own checks, with its messages.
	if len(c.GetRequestRules()) == 0 {
		return nil, &fieldError{Path: path, Msg: "header_to_metadata_filter: Per filter configs must at least specify either request or response rules"}
	}
	h := &HeaderToMetadata{}
	for i, r := range c.GetRequestRules() {
		rpath := fmt.Sprintf("%s.request_rules[%d]", path, i)
		if r.GetHeader() == "" {
			return nil, &fieldError{Path: rpath, Msg: "One of Cookie or Header option needs to be specified"}
		}
		if r.GetOnHeaderPresent() == nil && r.GetOnHeaderMissing() == nil {
			return nil, &fieldError{Path: rpath, Msg: "header to metadata filter: one of on_header_present or on_header_missing needs to be specified"}
		}
		if m := r.GetOnHeaderMissing(); m != nil && m.GetValue() == "" {
			return nil, &fieldError{Path: rpath + ".on_header_missing.value", Msg: "Cannot specify on_header_missing rule with empty value"}
		}
		rule := MetadataRule{Header: strings.ToLower(r.GetHeader()), Remove: r.GetRemove()}
		for _, kv := range []struct {
			name string
			in   *h2mv3.Config_KeyValuePair
			out  **MetadataPair
		}{{"on_header_present", r.GetOnHeaderPresent(), &rule.Present}, {"on_header_missing", r.GetOnHeaderMissing(), &rule.Missing}} {
			if kv.in == nil {
				continue
			}
			kpath := rpath + "." + kv.name
			// An empty key is refused by the proto's own validation.
			p := &MetadataPair{Namespace: kv.in.GetMetadataNamespace(), Key: kv.in.GetKey(), Value: kv.in.GetValue()}
			if p.Namespace == "" {
				p.Namespace = HeaderToMetadataFilterName
			}
			switch kv.in.GetType() {
			case h2mv3.Config_STRING:
			case h2mv3.Config_NUMBER:
				p.Number = true
			default:
				return nil, &fieldError{Path: kpath + ".type", Msg: fmt.Sprintf("type %s is not supported by sluice-envoy (only STRING and NUMBER)", kv.in.GetType())}
			}
			*kv.out = p
		}
		h.Rules = append(h.Rules, rule)
	}
	return h, nil
}

// apply runs the request rules on req, as Envoy's decodeHeaders does:
// a present header (repeats joined with ',') sets on_header_present's key
// to its value, or to the rule's value when one is given, and is removed
// if the rule says so; a missing header sets on_header_missing's key to
// its value. Empty values, values of 8 KiB or more, and NUMBER values
// that do not parse as a double are skipped. Keys are set flat in their
// namespace, replacing a value already there.
func (h *HeaderToMetadata) apply(req *host.Request) {
	for _, r := range h.Rules {
		v, ok := joinedHeader(req.Headers, r.Header)
		switch {
		case ok:
			if r.Present != nil {
				val := r.Present.Value
				if val == "" {
					val = v
				}
				r.Present.set(req, val)
			}
			if r.Remove {
				req.Headers = withoutHeader(req.Headers, r.Header)
			}
		case r.Missing != nil:
			r.Missing.set(req, r.Missing.Value)
		}
	}
}

func (p *MetadataPair) set(req *host.Request, v string) {
	if v == "" || len(v) >= maxMetadataValueLen {
		return
	}
	var val any = v
	if p.Number {
		// absl::SimpleAtod, which Envoy uses, allows surrounding spaces.
		f, err := strconv.ParseFloat(strings.Trim(v, " \t\n\v\f\r"), 64)
		if err != nil {
			return
		}
		val = f
	}
	if req.DynamicMetadata == nil {
		req.DynamicMetadata = map[string]map[string]any{}
	}
	if req.DynamicMetadata[p.Namespace] == nil {
		req.DynamicMetadata[p.Namespace] = map[string]any{}
	}
	req.DynamicMetadata[p.Namespace][p.Key] = val
}

func withoutHeader(hs [][2]string, name string) [][2]string {
	out := make([][2]string, 0, len(hs))
	for _, kv := range hs {
		if kv[0] != name {
			out = append(out, kv)
		}
	}
	return out
}

// filter wraps next with the rules.
func (h *HeaderToMetadata) filter(next host.Upstream) host.Upstream {
	return func(ctx context.Context, req *host.Request) (*host.Response, error) {
		h.apply(req)
		return next(ctx, req)
	}
}

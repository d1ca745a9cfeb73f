package limitsvc

// The gRPC form of the protocol (api/proto/ratelimit/v1/ratelimit.proto):
// the same request and answer as over HTTP, as protobuf messages. An
// answer is checked by turning it into the JSON object the HTTP form
// would carry and parsing that with ParseWith, so an answer means the
// same, and is refused for the same reasons, whichever way it came.

import (
	"encoding/json"
	"strconv"
	"unicode/utf8"

	"github.com/tidwall/gjson"
	"google.golang.org/protobuf/encoding/protowire"
)

// The service's full name and its method, as seed 003 names them.
const (
	GrpcService = "edgequota.ratelimit.v1.RateLimitService"
	GrpcMethod  = "GetLimits"
)

// Field numbers of GetLimitsRequest.
const (
	reqHeaders = 1 // map<string, string>: entries of key 1, value 2
	reqMethod  = 2
	reqPath    = 3
)

// Field numbers of GetLimitsResponse.
const (
	ansAverage = iota + 1
	ansBurst
	ansPeriod
	ansTenantKey
	ansFailurePolicy
	ansFailureCode
	ansBackendURL
	ansCacheMaxAge
	ansCacheNoStore
)

// The answer's fields by number, with the JSON member each becomes and
// its proto type.
var answerFields = [...]struct {
	name string
	kind fieldKind
}{
	ansAverage:       {"average", int64Field},
	ansBurst:         {"burst", int64Field},
	ansPeriod:        {"period", stringField},
	ansTenantKey:     {"tenant_key", stringField},
	ansFailurePolicy: {"failure_policy", stringField},
	ansFailureCode:   {"failure_code", int32Field},
	ansBackendURL:    {"backend_url", stringField},
	ansCacheMaxAge:   {"cache_max_age_seconds", int64Field},
	ansCacheNoStore:  {"cache_no_store", boolField},
}

type fieldKind uint8

const (
	noField fieldKind = iota
	int64Field
	int32Field
	stringField
	boolField
)

// Lookup is what a lookup asks the service: the request's method, its
// path and the forwarded headers, in order.
type Lookup struct {
	Method  string
	Path    string
	Headers [][2]string
}

// ParseLookupJSON reads the HTTP form of a lookup, the body the filter
// renders: {"method", "path", "headers": {name: value}}.
func ParseLookupJSON(b []byte) (Lookup, error) {
	if !gjson.ValidBytes(b) {
		return Lookup{}, malformed("lookup is not JSON")
	}
	root := gjson.ParseBytes(b)
	if !root.IsObject() {
		return Lookup{}, malformed("lookup is not a JSON object")
	}
	l := Lookup{Method: root.Get("method").String(), Path: root.Get("path").String()}
	root.Get("headers").ForEach(func(k, v gjson.Result) bool {
		l.Headers = append(l.Headers, [2]string{k.String(), v.String()})
		return true
	})
	return l, nil
}

// AppendProto appends the lookup as a GetLimitsRequest. Headers are
// entries of its map in order; a map has no order, but a repeated name
// is one comma-joined value already.
func (l *Lookup) AppendProto(dst []byte) []byte {
	for _, kv := range l.Headers {
		var entry []byte
		entry = protowire.AppendTag(entry, 1, protowire.BytesType)
		entry = protowire.AppendString(entry, kv[0])
		entry = protowire.AppendTag(entry, 2, protowire.BytesType)
		entry = protowire.AppendString(entry, kv[1])
		dst = protowire.AppendTag(dst, reqHeaders, protowire.BytesType)
		dst = protowire.AppendBytes(dst, entry)
	}
	if l.Method != "" {
		dst = protowire.AppendTag(dst, reqMethod, protowire.BytesType)
		dst = protowire.AppendString(dst, l.Method)
	}
	if l.Path != "" {
		dst = protowire.AppendTag(dst, reqPath, protowire.BytesType)
		dst = protowire.AppendString(dst, l.Path)
	}
	return dst
}

// ParseLookupProto reads a GetLimitsRequest: what a service built on
// filter/external/grpcserver is asked. Unknown fields are skipped, as
// protobuf parsers do; a field of the wrong type or text that is not
// UTF-8 is refused.
func ParseLookupProto(b []byte) (Lookup, error) {
	var l Lookup
	err := walk(b, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		if num < reqHeaders || num > reqPath {
			return nil
		}
		if typ != protowire.BytesType || !utf8.Valid(v) && num != reqHeaders {
			return malformed("request field " + strconv.Itoa(int(num)) + " is not a string")
		}
		switch num {
		case reqMethod:
			l.Method = string(v)
		case reqPath:
			l.Path = string(v)
		default:
			var kv [2]string
			err := walk(v, func(n protowire.Number, t protowire.Type, s []byte, _ uint64) error {
				if n != 1 && n != 2 {
					return nil
				}
				if t != protowire.BytesType || !utf8.Valid(s) {
					return malformed("header entry field is not a string")
				}
				kv[n-1] = string(s)
				return nil
			})
			if err != nil {
				return err
			}
			l.Headers = append(l.Headers, kv)
		}
		return nil
	})
	return l, err
}

// walk calls each for every field of a protobuf message: its number, wire
// type, and its bytes (length-delimited) or its value (varint, fixed).
// Groups and truncated or overlong data are refused.
func walk(b []byte, each func(num protowire.Number, typ protowire.Type, v []byte, n uint64) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return malformed("bad protobuf tag")
		}
		b = b[n:]
		var v []byte
		var x uint64
		switch typ {
		case protowire.VarintType:
			x, n = protowire.ConsumeVarint(b)
		case protowire.Fixed32Type:
			var f uint32
			f, n = protowire.ConsumeFixed32(b)
			x = uint64(f)
		case protowire.Fixed64Type:
			x, n = protowire.ConsumeFixed64(b)
		case protowire.BytesType:
			v, n = protowire.ConsumeBytes(b)
		default:
			return malformed("protobuf groups are not part of the protocol")
		}
		if n < 0 {
			return malformed("truncated protobuf field " + strconv.Itoa(int(num)))
		}
		b = b[n:]
		if err := each(num, typ, v, x); err != nil {
			return err
		}
	}
	return nil
}

// ParseGrpc reads the service's answer to a gRPC lookup, a
// GetLimitsResponse. As protobuf has it, a field given twice counts
// once, with its last value, and unknown fields are skipped; a known
// field of the wrong wire type, or text that is not UTF-8, is malformed.
// Fields are optional: an absent rate is no answer, while an explicit
// average of 0 is "no limit", exactly as in JSON.
func ParseGrpc(msg []byte) (Answer, error) {
	var seen [len(answerFields)][]byte
	err := walk(msg, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
		if num <= 0 || int(num) >= len(answerFields) || answerFields[num].kind == noField {
			return nil
		}
		f := answerFields[num]
		var member []byte
		switch {
		case f.kind == stringField && typ == protowire.BytesType:
			if !utf8.Valid(v) {
				return malformed(f.name + " is not UTF-8")
			}
			member, _ = json.Marshal(string(v))
		case f.kind == int64Field && typ == protowire.VarintType:
			member = strconv.AppendInt(nil, int64(x), 10)
		case f.kind == int32Field && typ == protowire.VarintType:
			member = strconv.AppendInt(nil, int64(int32(x)), 10)
		case f.kind == boolField && typ == protowire.VarintType:
			member = strconv.AppendBool(nil, x != 0)
		default:
			return malformed(f.name + " has the wrong protobuf wire type")
		}
		seen[num] = member
		return nil
	})
	if err != nil {
		return Answer{}, err
	}
	obj := []byte{'{'}
	for num, member := range seen {
		if member == nil {
			continue
		}
		if len(obj) > 1 {
			obj = append(obj, ',')
		}
		obj = append(obj, '"')
		obj = append(obj, answerFields[num].name...)
		obj = append(obj, '"', ':')
		obj = append(obj, member...)
	}
	return ParseWith(200, append(obj, '}'), CacheControl{})
}

// Limits is an answer as a service writes it: a GetLimitsResponse, or
// its JSON form. Average is always sent (0 means no limit); the other
// fields only when set.
type Limits struct {
	Average            int64  `json:"average"`
	Burst              int64  `json:"burst,omitempty"`
	Period             string `json:"period,omitempty"`
	TenantKey          string `json:"tenant_key,omitempty"`
	FailurePolicy      string `json:"failure_policy,omitempty"`
	FailureCode        int32  `json:"failure_code,omitempty"`
	BackendURL         string `json:"backend_url,omitempty"`
	CacheMaxAgeSeconds int64  `json:"cache_max_age_seconds,omitempty"`
	CacheNoStore       bool   `json:"cache_no_store,omitempty"`
}

// AppendProto appends the answer as a GetLimitsResponse.
func (l *Limits) AppendProto(dst []byte) []byte {
	varint := func(num protowire.Number, v uint64, set bool) {
		if set {
			dst = protowire.AppendTag(dst, num, protowire.VarintType)
			dst = protowire.AppendVarint(dst, v)
		}
	}
	text := func(num protowire.Number, s string) {
		if s != "" {
			dst = protowire.AppendTag(dst, num, protowire.BytesType)
			dst = protowire.AppendString(dst, s)
		}
	}
	varint(ansAverage, uint64(l.Average), true)
	varint(ansBurst, uint64(l.Burst), l.Burst != 0)
	text(ansPeriod, l.Period)
	text(ansTenantKey, l.TenantKey)
	text(ansFailurePolicy, l.FailurePolicy)
	varint(ansFailureCode, uint64(int64(l.FailureCode)), l.FailureCode != 0)
	text(ansBackendURL, l.BackendURL)
	varint(ansCacheMaxAge, uint64(l.CacheMaxAgeSeconds), l.CacheMaxAgeSeconds != 0)
	varint(ansCacheNoStore, 1, l.CacheNoStore)
	return dst
}

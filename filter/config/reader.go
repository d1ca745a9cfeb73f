package config

import (
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/tidwall/gjson"

	"github.com/sluice-proxy/sluice/internal/enum"
)

// object is a JSON object whose members were checked against a list of
// known names. Getters report type errors and return ok=false for absent or
// invalid members, so callers can fall back to defaults and keep going.
type object struct {
	p      *parser
	path   string
	at     int
	fields map[string]gjson.Result
}

func (p *parser) object(path string, v gjson.Result, known ...string) *object {
	if !v.IsObject() {
		p.errorf(path, v.Index, "must be an object")
		return nil
	}
	o := &object{p: p, path: path, at: v.Index, fields: map[string]gjson.Result{}}
	v.ForEach(func(k, val gjson.Result) bool {
		name := k.String()
		switch {
		case !contains(known, name):
			p.errorf(FieldPath(path, name), k.Index, "unknown field")
		case o.has(name):
			p.errorf(FieldPath(path, name), k.Index, "duplicate field")
		default:
			o.fields[name] = val
		}
		return true
	})
	return o
}

func (o *object) has(name string) bool {
	_, ok := o.fields[name]
	return ok
}

func (o *object) path1(name string) string { return FieldPath(o.path, name) }

// offset of a member, or of the object when the member is absent, so an
// error about a missing member sorts with its object.
func (o *object) offset(name string) int {
	if v, ok := o.fields[name]; ok {
		return v.Index
	}
	return o.at
}

func (o *object) errorf(name string, format string, args ...any) {
	o.p.errorf(o.path1(name), o.offset(name), format, args...)
}

// typed is member name when it is present and of JSON type t; a member of
// another type is reported with wrongType.
func (o *object) typed(name string, t gjson.Type, wrongType string) (gjson.Result, bool) {
	v, ok := o.fields[name]
	if !ok {
		return v, false
	}
	if v.Type != t {
		o.errorf(name, "%s", wrongType)
		return v, false
	}
	return v, true
}

func (o *object) str(name string) (string, bool) {
	v, ok := o.typed(name, gjson.String, "must be a string")
	return v.Str, ok
}

// headerName reads a member naming a header, lower-cased, or "" after an
// error or when it is absent; missing is the error for an absent member,
// none when it is "".
func (o *object) headerName(name, missing string) string {
	return o.readHeaderName(name, missing, strings.ToLower)
}

// requestHeaderName reads a member naming a request header the filter
// reads, as headerName does, in requestHeader's spelling; host is refused
// there, instead saying what to use.
func (o *object) requestHeaderName(name, missing, instead string) string {
	h := o.readHeaderName(name, missing, RequestHeaderName)
	if _, bad := requestHeader(h, instead); bad != "" {
		o.errorf(name, "%s", bad)
		return ""
	}
	return h
}

// requestHeader is the configured name s of a request header the filter
// reads, in RequestHeaderName's spelling, or why it is refused: Envoy
// moves Host into :authority, so no filter ever sees a header named host
// (instead, when not empty, says what to use).
func requestHeader(s, instead string) (name, bad string) {
	name = RequestHeaderName(s)
	if name != "host" {
		return name, ""
	}
	bad = "Envoy moves the Host header into :authority, so a request header named host is never present"
	if instead != "" {
		bad += ": " + instead
	}
	return "", bad
}

// RequestHeaderName is how a configured name of a request header the
// filter reads is kept: lower-cased, '_' as '-'. The filter reads a
// request header sent with '_' for '-' as the same header (CGI and WSGI
// upstreams read both as one variable), so a name configured either way
// reads both spellings, and "x_key" beside "x-key" is a duplicate.
func RequestHeaderName(s string) string {
	return strings.ReplaceAll(strings.ToLower(s), "_", "-")
}

func (o *object) readHeaderName(name, missing string, spell func(string) string) string {
	s, ok := o.str(name)
	switch {
	case ok && headerToken(s):
		return spell(s)
	case ok:
		o.errorf(name, "invalid header name %s", Quote(s))
	case !o.has(name) && missing != "":
		o.errorf(name, "%s", missing)
	}
	return ""
}

// clusterAuthority reads the required Envoy cluster a block calls and the
// :authority it sends, by default the cluster's name.
func (o *object) clusterAuthority() (cluster, authority string) {
	if s, ok := o.str("cluster"); ok {
		if s == "" {
			o.errorf("cluster", "must not be empty")
		}
		cluster = s
	} else if !o.has("cluster") {
		o.errorf("cluster", "required")
	}
	authority = cluster
	if s, ok := o.str("authority"); ok {
		switch {
		case s == "":
			o.errorf("authority", "must not be empty; omit it to use the cluster name")
		case !authorityText(s):
			o.errorf("authority", "must be a host, optionally with :port: visible ASCII without /, ?, #, @ or \\, as an HTTP/2 :authority carries it")
		}
		authority = s
	}
	return cluster, authority
}

// authorityText reports whether s can be sent as an :authority: visible
// ASCII, none of the characters that end or qualify a host in a URI.
// Anything else (a CR or LF above all) would be a header injection in the
// callout, or a call Envoy's codec refuses every time.
func authorityText(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte("/?#@\\", c) >= 0 {
			return false
		}
	}
	return true
}

// objects parses each entry of the optional array member name as an object
// with fields, and hands those that are objects to each.
func (p *parser) objects(o *object, name string, fields []string, each func(e *object)) {
	items, ok := o.array(name, anyIfOmitted)
	if !ok {
		return
	}
	for i, item := range items {
		if e := p.object(IndexPath(o.path1(name), i), item, fields...); e != nil {
			each(e)
		}
	}
}

// entryList hands the top-level list name of o to parse, if it is there
// and holds at most maxEntries entries.
func (p *parser) entryList(o *object, name string, cfg *Config, parse func(cfg *Config, path string, items []gjson.Result)) {
	items, ok := o.array(name, "")
	if !ok {
		return
	}
	if len(items) > maxEntries {
		o.errorf(name, "must have at most %d entries", maxEntries)
		return
	}
	parse(cfg, o.path1(name), items)
}

// namedEntries walks a list of named entries (limits, breakers,
// concurrency): parse reads entry i when it is an object and returns its
// name, which must be unique in the list, naming the first entry that has
// it; invalid stands in for an entry that is not an object.
func (p *parser) namedEntries(path string, items []gjson.Result, fields []string, parse func(i int, o *object) string, invalid func()) {
	first := map[string]string{}
	for i, item := range items {
		ipath := IndexPath(path, i)
		o := p.object(ipath, item, fields...)
		if o == nil {
			invalid()
			continue
		}
		name := parse(i, o)
		if name == "" {
			continue
		}
		if prev, dup := first[name]; dup {
			o.errorf("name", "duplicate name %s (also %s)", Quote(name), prev)
		} else {
			first[name] = ipath
		}
	}
}

func (o *object) boolean(name string) (bool, bool) {
	v, ok := o.fields[name]
	if !ok {
		return false, false
	}
	if v.Type != gjson.True && v.Type != gjson.False {
		o.errorf(name, "must be a boolean")
		return false, false
	}
	return v.Type == gjson.True, true
}

func (o *object) integer(name string, lo, hi int64) (int64, bool) {
	v, ok := o.fields[name]
	if !ok {
		return 0, false
	}
	return o.p.integer(o.path1(name), v, lo, hi)
}

// integer accepts any JSON number with an integral value ("5", "5.0",
// "0.5e1"), because JSON Schema's "integer" does and the two must agree.
func (p *parser) integer(path string, v gjson.Result, lo, hi int64) (int64, bool) {
	if v.Type != gjson.Number {
		p.errorf(path, v.Index, "must be an integer")
		return 0, false
	}
	n, isInt, huge := exactInteger(v.Raw)
	switch {
	case !isInt:
		p.errorf(path, v.Index, "must be an integer")
		return 0, false
	case huge && n < 0, !huge && n < lo:
		p.errorf(path, v.Index, "must be >= %d", lo)
		return 0, false
	case huge, n > hi:
		p.errorf(path, v.Index, "must be <= %d", hi)
		return 0, false
	}
	return n, true
}

// exactInteger reads a JSON number literal exactly, without floating point,
// so "5.0000000000000001" is not an integer and "1e999999999" costs nothing.
// huge reports a magnitude beyond 18 digits; n then only carries the sign.
func exactInteger(raw string) (n int64, isInt, huge bool) {
	neg := strings.HasPrefix(raw, "-")
	raw = strings.TrimPrefix(raw, "-")
	mant, exp := raw, 0
	if i := strings.IndexAny(raw, "eE"); i >= 0 {
		mant = raw[:i]
		e := strings.TrimPrefix(raw[i+1:], "+")
		x, err := strconv.Atoi(e)
		if err != nil {
			// Only an exponent too large for int fails here; clamp it, the
			// digits below then decide between huge and fractional.
			if strings.HasPrefix(e, "-") {
				x = -1 << 30
			} else {
				x = 1 << 30
			}
		}
		exp = max(min(x, 1<<30), -1<<30)
	}
	intPart, frac, _ := strings.Cut(mant, ".")
	digits := strings.TrimLeft(intPart+frac, "0")
	// The decimal point falls after point digits of digits: leading zeros
	// removed from intPart+frac shift it left by as many places.
	point := len(digits) - len(frac) + exp
	digits = strings.TrimRight(digits, "0")
	if digits == "" {
		return 0, true, false
	}
	if len(digits) > point {
		return 0, false, false
	}
	if point > 18 {
		if neg {
			return -1, true, true
		}
		return 1, true, true
	}
	v, err := strconv.ParseInt(digits+strings.Repeat("0", point-len(digits)), 10, 64)
	if err != nil {
		return 0, false, false
	}
	if neg {
		v = -v
	}
	return v, true, false
}

// number reads a finite JSON number in [lo, hi].
func (o *object) number(name string, lo, hi float64) (float64, bool) {
	v, ok := o.typed(name, gjson.Number, "must be a number")
	if !ok {
		return 0, false
	}
	f, err := strconv.ParseFloat(v.Raw, 64)
	switch {
	case err != nil && !math.IsInf(f, 0), math.IsNaN(f):
		o.errorf(name, "must be a number")
		return 0, false
	case f < lo:
		o.errorf(name, "must be >= %v", lo)
		return 0, false
	case f > hi:
		o.errorf(name, "must be <= %v", hi)
		return 0, false
	}
	return f, true
}

// percent reads a number from 0 to 100, fractions allowed.
func (o *object) percent(name string) (float64, bool) {
	v, ok := o.typed(name, gjson.Number, "must be a number from 0 to 100")
	if !ok {
		return 0, false
	}
	if v.Num < 0 || v.Num > 100 {
		o.errorf(name, "must be from 0 to 100, got %s", Excerpt(v.Raw))
		return 0, false
	}
	return v.Num, true
}

func (o *object) duration(name string, lo, hi time.Duration) (time.Duration, bool) {
	v, ok := o.fields[name]
	if !ok {
		return 0, false
	}
	return o.p.duration(o.path1(name), v, lo, hi)
}

func (p *parser) duration(path string, v gjson.Result, lo, hi time.Duration) (time.Duration, bool) {
	if v.Type != gjson.String || !durationSyntax(v.Str) {
		p.errorf(path, v.Index, `must be a duration string such as "500ms", "60s" or "1m"`)
		return 0, false
	}
	d, err := time.ParseDuration(v.Str)
	if err != nil {
		p.errorf(path, v.Index, "must be <= %s", hi)
		return 0, false
	}
	if d < lo {
		if lo == time.Nanosecond {
			p.errorf(path, v.Index, "must be > 0")
		} else {
			p.errorf(path, v.Index, "must be >= %s", lo)
		}
		return 0, false
	}
	if d > hi {
		p.errorf(path, v.Index, "must be <= %s", hi)
		return 0, false
	}
	return d, true
}

// durationSyntax is the subset of time.ParseDuration that schema.json's
// pattern ^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$ accepts: no sign, no
// bare number, no ".5s".
func durationSyntax(s string) bool {
	if s == "" {
		return false
	}
	for s != "" {
		i := 0
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		if i == 0 {
			return false
		}
		if i < len(s) && s[i] == '.' {
			j := i + 1
			for j < len(s) && s[j] >= '0' && s[j] <= '9' {
				j++
			}
			if j == i+1 {
				return false
			}
			i = j
		}
		s = s[i:]
		switch {
		case strings.HasPrefix(s, "ns"), strings.HasPrefix(s, "us"), strings.HasPrefix(s, "ms"):
			s = s[2:]
		case strings.HasPrefix(s, "µs"):
			s = s[len("µs"):]
		case strings.HasPrefix(s, "s"), strings.HasPrefix(s, "m"), strings.HasPrefix(s, "h"):
			s = s[1:]
		default:
			return false
		}
	}
	return true
}

// readEnum reads member name of o, one of the names of an enum type.
func readEnum[T enum.Integer](o *object, name string, names enum.Names[T]) (T, bool) {
	s, ok := o.str(name)
	if !ok {
		return 0, false
	}
	if v, ok := names.Parse(s); ok {
		return v, true
	}
	o.errorf(name, "unknown value %s; want one of %s", Quote(s), names.List())
	return 0, false
}

// array returns the elements of an array member. A non-empty ifEmpty is
// the error for [] (for lists where [] could only be a mistake).
func (o *object) array(name string, ifEmpty string) ([]gjson.Result, bool) {
	v, ok := o.fields[name]
	if !ok {
		return nil, false
	}
	if !v.IsArray() {
		o.errorf(name, "must be an array")
		return nil, false
	}
	items := v.Array()
	if ifEmpty != "" && len(items) == 0 {
		o.errorf(name, "%s", ifEmpty)
		return nil, false
	}
	return items, true
}

func (o *object) child(name string, known ...string) *object {
	v, ok := o.fields[name]
	if !ok {
		return nil
	}
	return o.p.object(o.path1(name), v, known...)
}

func (o *object) onlyWith(name, condition string) {
	if o.has(name) {
		o.errorf(name, "only valid with %s", condition)
	}
}

func (o *object) conflicts(name, other string) {
	if o.has(name) && o.has(other) {
		o.errorf(name, "cannot be combined with %s", other)
	}
}

func validName(s string) bool {
	return len(s) <= maxNameLen && plainName(s)
}

// headerToken reports whether s is an RFC 9110 token, i.e. a valid header name.
func headerToken(s string) bool {
	return s != "" && alnumOr(s, "!#$%&'*+-.^_`|~")
}

// alnumOr reports whether every byte of s is an ASCII letter or digit or
// one of the bytes of extra.
func alnumOr(s, extra string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte(extra, c) >= 0) {
			return false
		}
	}
	return true
}

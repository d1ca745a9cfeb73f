package engine

// The admin route (config "admin", off by default): an operator reads or
// resets one local key of a limit (sluicectl quota --envoy), whose state
// lives only in this Envoy's shared data.
//
// Which requests are admin requests: every request whose normalised path
// (normalPath) is path_prefix or under it, and every request, whatever
// its path, that carries the admin token (adminCredential). Normalising
// decodes every percent escape, turns '\' into '/', lower-cases ASCII
// letters, merges runs of '/' and removes "." and ".." segments, and
// ignores the query; so "/%2esluice/", "//.sluice/", "/.SLUICE/",
// "/x/../.sluice/" and "/.sluice?quota" are all admin requests. The
// token test catches the spellings no normalisation can enumerate (a
// path parameter, a NUL, an overlong UTF-8 dot, fullwidth dots, a double
// escape): a request carrying the token is the operator's, so it never
// leaves the filter. Every admin request is answered here and none
// reaches the upstream, whether or not it passes the checks.
//
// The checks, all always evaluated:
//   - the connection's address must be in client_cidrs. That is Envoy's
//     source.address, but only when it carries a port: Envoy sets
//     source.address from X-Forwarded-For when the connection manager
//     does not set use_remote_address (or from an original_ip_detection
//     extension), and an address parsed from a header has port 0. No
//     attribute gives a Wasm filter the connection's own address in that
//     case (Envoy's downstreamDirectRemoteAddress is not one), so an
//     address that may have come from a header is refused, whatever
//     client_ip says; client_ip is not used here at all.
//   - the source must not have sent too many wrong tokens lately: a
//     request from an allowed address needs one unit of a per-address
//     (IPv6: per-/64) token bucket in shared data (adminFailLimit), and a
//     wrong token takes it; an address whose bucket is empty is refused,
//     right token or not, until it refills. (A request of more than one
//     bearer credential never gets here: refuseCredentials.)
//   - "Authorization: Bearer <token>" must carry a token whose SHA-256
//     equals token_sha256, compared in constant time.
//
// A request failing any is counted (sluice.admin.denied, and
// sluice.admin.throttled for the throttled ones) and logged with its
// source and reason, then treated as any request up to the moment it
// would be forwarded: the limits, breakers and bulkheads decide it,
// charge it and refuse it as they would a request to the upstream, and
// where they admit it, it gets an empty 404 with the rate-limit headers
// an admitted response gets (hideAdmin), as a path the upstream does not
// have; so the route's existence does not show. An answered call is
// counted (sluice.admin.calls) and logged with its source, action and
// limit, never its key values.

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-proxy/sluice/filter/config"
	"github.com/sluice-proxy/sluice/filter/host"
	"github.com/sluice-proxy/sluice/filter/request"
	"github.com/sluice-proxy/sluice/filter/request/pathnorm"
	"github.com/sluice-proxy/sluice/limiter"
)

const (
	metricAdminCalls     = "sluice.admin.calls"
	metricAdminDenied    = "sluice.admin.denied"
	metricAdminThrottled = "sluice.admin.throttled"
	metricAdminInvalid   = "sluice.admin.invalid_credentials"
)

// adminFailLimit is how many wrong tokens one address may send: 10 at
// once, then one more every 6 seconds. A token of 32 random bytes cannot
// be guessed at any rate; the limit stops a short or reused token from
// being tried at line rate, and bounds what one address costs in hashing
// and log lines. Its table is small: only addresses in client_cidrs that
// send wrong tokens take a slot.
var adminFailLimit = limiter.Limit{Algorithm: limiter.TokenBucket, Rate: 10, Period: time.Minute}

const (
	adminFailPrefix = "sluice.admin.fail."
	adminFailSlots  = 256
)

// adminRuntime is the configured admin route.
type adminRuntime struct {
	cfg                      *config.Admin
	calls, denied, throttled host.Counter
	// invalid counts requests refused for carrying more than one bearer
	// credential (refuseCredentials).
	invalid host.Counter
	// fails counts wrong tokens per caller address, across workers.
	fails *limiter.Table
	// pathBuf holds the normalised path of the current request; a VM runs
	// one callback at a time.
	pathBuf []byte
}

func newAdminRuntime(hc *host.Host, cfg *config.Admin) (*adminRuntime, error) {
	fails, err := limiter.NewTable(hc.Store, adminFailLimit, limiter.TableConfig{
		Prefix: adminFailPrefix,
		Seed:   limiter.Hash(0, adminFailPrefix),
		Slots:  adminFailSlots,
	})
	if err != nil {
		return nil, err
	}
	hm := hc.Metrics
	return &adminRuntime{cfg: cfg, fails: fails, calls: hm.Counter(metricAdminCalls),
		denied: hm.Counter(metricAdminDenied), throttled: hm.Counter(metricAdminThrottled),
		invalid: hm.Counter(metricAdminInvalid)}, nil
}

// route returns what follows path_prefix in the normalised path (always
// ending in '/', "" for the prefix itself), and whether the request is an
// admin request at all.
func (a *adminRuntime) route(path string) (string, bool) {
	a.pathBuf = appendNormalPath(a.pathBuf[:0], path)
	prefix := a.cfg.PathPrefix
	norm := arenaString(a.pathBuf)
	if !strings.HasPrefix(norm, prefix) {
		return "", false
	}
	return norm[len(prefix):], true
}

// appendNormalPath appends the admin route's normal form of the path
// part of a :path (pathnorm.Append): it starts with '/' and, after each
// segment, ends with '/', so that the prefix "/.sluice/" matches
// "/.sluice" too.
func appendNormalPath(dst []byte, path string) []byte {
	dst = pathnorm.Append(dst, path, pathnorm.Admin)
	if dst[len(dst)-1] != '/' {
		dst = append(dst, '/')
	}
	return dst
}

// tokenMatches reports whether an Authorization value is "Bearer <token>"
// with SHA-256(token) = want, and whether it is a bearer credential at
// all. The scheme is matched without regard to case and may be followed
// by any run of spaces or tabs, as lenient servers read it. The digests
// are compared in constant time, and a value without a token is hashed
// all the same.
func tokenMatches(authorization string, want *[32]byte) (match, bearer bool) {
	token, bearer := bearerToken(authorization)
	return digestMatches(token, want) && bearer, bearer
}

// bearerCredentials counts the comma-separated credentials of list whose
// scheme is Bearer (a client or proxy may fold repeated fields into one
// line) and reports whether one of them is the admin token. Every
// credential is hashed. A list of more than maxTokenCandidates
// credentials is read no further and counts maxTokenCandidates+1 bearer
// credentials, more than the wrong-token bucket ever holds.
func bearerCredentials(list string, want *[32]byte) (n int, found bool) {
	for read := 0; list != ""; read++ {
		if read == maxTokenCandidates {
			return maxTokenCandidates + 1, found
		}
		c := list
		if i := strings.IndexByte(list, ','); i >= 0 {
			c, list = list[:i], list[i+1:]
		} else {
			list = ""
		}
		match, bearer := tokenMatches(c, want)
		if bearer {
			n++
		}
		found = match || found
	}
	return n, found
}

// propAuthorization is Envoy's request.headers attribute for
// Authorization: every value of the header, joined with ',' (Envoy's
// HeadersWrapper, getAllOfHeaderAsString), where the single-header read
// gives only the first.
var propAuthorization = []string{"request", "headers", "authorization"}

// digestMatches reports whether SHA-256(word) = want, in constant time,
// hashed from a stack buffer: application bearer tokens pass through here
// on every request, and a conversion would allocate.
func digestMatches(word string, want *[32]byte) bool {
	var buf [256]byte
	sum := sha256.Sum256(append(buf[:0], word...))
	return subtle.ConstantTimeCompare(sum[:], want[:]) == 1 && word != ""
}

// maxTokenCandidates bounds the hashes one request costs: the words of its
// Authorization, its access_token values, its credentials on the admin
// path. A header of 60 KiB of one-letter words would otherwise cost
// 30,000 hashes. The bound is for the operator's honest mistakes (the
// token after a few other credentials); no one without the token gains
// anything from hiding it further.
const maxTokenCandidates = 16

// authorization is every Authorization value of the request, joined with
// ','; ok is false when it has none. A request without Authorization
// costs one header read; one with it, one property read more. A host
// without the attribute has the header map read instead.
func (h *Stream) authorization() (string, bool) {
	info := &h.info
	if _, ok := info.Source().RequestHeader("authorization"); !ok {
		return "", false
	}
	if all := info.Property(propAuthorization); all != "" {
		return all, true
	}
	all, _ := info.Header("authorization") // joined as the attribute joins them
	return all, true
}

// RFC 6750 §2: a client MUST NOT use more than one method to transmit
// the token in a request. A request that does anyway is refused here
// (400 invalid_request, as RFC 6750 §3.1 answers a malformed request)
// before any of its credentials is compared with the admin token. Were
// they compared, a request carrying the token is answered here and one
// without it is forwarded, and that difference is an oracle: one request
// with 31 credentials tests 31 guesses, at any path, from any address,
// at the request rate. With the refusal a request tests at most one.

// tokenCandidates gathers the words of a request that may be a bearer
// token (its token candidates) and its bearer credentials, to decide
// whether the request carries the admin token (adminCredential).
type tokenCandidates struct {
	// first is the digest of the first candidate; distinct counts the
	// candidates that differ from it, and it.
	first    [32]byte
	distinct int
	// bearer counts the bearer credentials: Authorization credentials of
	// scheme Bearer, and access_token parameters (the most any reading
	// of the query finds). malformed is a bearer credential whose token
	// is not one word.
	bearer    int
	malformed bool
}

// add takes one candidate word; an empty word is none. Repeats of one
// word are one candidate, a spelling a proxy may fold or double.
func (t *tokenCandidates) add(word string) {
	if word == "" || t.distinct > maxTokenCandidates {
		return
	}
	var buf [256]byte
	sum := sha256.Sum256(append(buf[:0], word...))
	switch {
	case t.distinct == 0:
		t.first, t.distinct = sum, 1
	case sum != t.first:
		t.distinct++
	}
}

// tokenWordSeps separate the words of a credential: the characters a
// token (b64token) never holds but credential syntaxes put around one,
// "Bearer:<token>", "Token <token>", "a,<token>".
const tokenWordSeps = " \t,:;\""

// addCredential takes one credential, an Authorization credential or a
// decoded access_token value (bearer): the word after a leading scheme
// word, or its only word. A bearer credential must be one token after
// its scheme; any other syntax (Digest, AWS signatures) names many words
// and is no candidate of one.
func (t *tokenCandidates) addCredential(c string, bearer bool) {
	words, last, first := 0, "", ""
	for s := c; s != ""; {
		w := s
		if i := strings.IndexAny(s, tokenWordSeps); i >= 0 {
			w, s = s[:i], s[i+1:]
		} else {
			s = ""
		}
		if w == "" {
			continue
		}
		if words == 0 {
			first = w
		}
		last = w
		words++
	}
	switch {
	case words == 1:
		t.add(first)
	case words == 2:
		t.add(last)
	default:
		t.distinct = maxTokenCandidates + 1 // many words: many candidates
	}
	if bearer && words > 1 {
		t.malformed = true
	}
}

// readAuthorization takes the credentials of every Authorization value
// (joined with ',', as a client or proxy may fold repeated fields).
func (t *tokenCandidates) readAuthorization(list string) {
	for n := 0; list != "" && n <= maxTokenCandidates; n++ {
		c := list
		if i := strings.IndexByte(list, ','); i >= 0 {
			c, list = list[:i], list[i+1:]
		} else {
			list = ""
		}
		c = strings.Trim(c, " \t")
		if c == "" {
			continue
		}
		if token, ok := bearerToken(c); ok {
			t.bearer++
			t.addCredential(token, true)
			continue
		}
		t.addCredential(c, false)
	}
	if list != "" {
		t.distinct = maxTokenCandidates + 1
	}
}

// readQuery takes every access_token parameter of query, in every
// reading of it (request.QueryReadings), under every name an upstream reads as
// access_token (isAccessTokenName).
func (t *tokenCandidates) readQuery(query string) {
	bearer := 0
	for _, seps := range request.QueryReadings(query) {
		n := 0
		for q := query; q != "" && n <= maxTokenCandidates; {
			var name, raw string
			name, raw, q = request.NextQueryParam(q, seps)
			if !isAccessTokenName(name) {
				continue
			}
			n++
			var buf [256]byte
			t.addCredential(arenaString(request.AppendQueryUnescaped(buf[:0], raw)), true)
		}
		bearer = max(bearer, n)
	}
	t.bearer += bearer
}

// invalid reports whether the request is refused without comparing any
// candidate: it carries more than one bearer credential, a malformed one,
// or one beside other candidates (RFC 6750 §2's one method).
func (t *tokenCandidates) invalid() bool {
	return t.bearer > 1 || t.malformed || t.bearer == 1 && t.distinct > 1
}

// matches reports whether the request's one candidate is the admin
// token, compared in constant time. A request of several candidates and
// no bearer credential (a signature, Digest) is compared with nothing:
// no one request tests more than one guess.
func (t *tokenCandidates) matches(want *[32]byte) bool {
	return t.distinct == 1 && subtle.ConstantTimeCompare(t.first[:], want[:]) == 1
}

// bearerToken is the token of a credential of scheme Bearer ("Bearer"
// without regard to case, then spaces or tabs), and whether it is one.
func bearerToken(c string) (string, bool) {
	const scheme = "bearer"
	v := strings.TrimLeft(c, " \t")
	if len(v) > len(scheme) && strings.EqualFold(v[:len(scheme)], scheme) && (v[len(scheme)] == ' ' || v[len(scheme)] == '\t') {
		return strings.Trim(v[len(scheme):], " \t"), true
	}
	return "", false
}

// adminCredential reports whether the request carries the admin token
// where a client may send a bearer token: a word of its Authorization (in
// any credential syntax, or none), or an access_token query parameter
// (RFC 6750's URI query form) however an upstream may spell its name.
// Such a request is the operator's and must not reach the upstream,
// however the rest of it is spelled. invalid is a request refused
// without comparing (tokenCandidates.invalid).
func (h *Stream) adminCredential() (carries, invalid bool) {
	var t tokenCandidates
	if all, ok := h.authorization(); ok {
		t.readAuthorization(all)
	}
	if q, ok := request.RawQuery(h.info.Path()); ok {
		t.readQuery(q)
	}
	if t.invalid() {
		return false, true
	}
	return t.matches(&h.plugin.admin.cfg.TokenSHA256), false
}

// refuseCredentials answers a request carrying more than one bearer
// credential: 400 with RFC 6750's error, before its limits, so that it
// costs no one's quota and tells nothing of any credential in it.
func (h *Stream) refuseCredentials() {
	p := h.plugin
	p.admin.invalid.Increment(1)
	headers := [][2]string{{"www-authenticate", `Bearer error="invalid_request"`},
		{"content-type", "application/json"}, {"cache-control", "no-store"}}
	h.phase = phaseAnswered
	body := adminError("invalid_request: send one bearer token, in one place (RFC 6750 section 2)")
	if err := p.host.Stream.Reply(400, headers, body); err != nil {
		p.log.Errorf("sluice: sending the credentials reply: %v", err)
	}
}

// isAccessTokenName reports whether an upstream may read the raw query
// name as access_token: decoded ('+' and %XX), without regard to ASCII
// case (ASP.NET's reading); with leading spaces, '[' and ']' dropped
// (PHP drops spaces; Rails' normalize_params and Node's qs brackets,
// "[access_token]", "]access_token"); ' ', '.' and '[' inside read as
// '_' (PHP's); and ending at trailing spaces or at the first '[' or ']'
// after it (PHP's and Rack's arrays, Rails' cut at the next bracket:
// "access_token]]"). It decodes without memory.
func isAccessTokenName(raw string) bool {
	const want = "access_token"
	if len(raw) < len(want) {
		return false // the fast common case: no escape makes a name longer
	}
	j := 0
	for i := 0; i < len(raw); {
		var c byte
		c, i = request.QueryByte(raw, i)
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		switch {
		case j == 0 && (c == ' ' || c == '[' || c == ']'):
			continue
		case j == len(want):
			if c == '[' || c == ']' {
				return true
			}
			if c != ' ' {
				return false
			}
			continue
		case c == ' ' || c == '.' || c == '[':
			c = '_'
		}
		if want[j] != c {
			return false
		}
		j++
	}
	return j == len(want)
}

// callerAddr is the address of the connection a request came on, from
// Envoy's source.address ("ip:port"), and why it is unusable: "address"
// when it is not an IP address with a port (a pipe, say), "forwarded"
// when its port is 0. Envoy parses an address it takes from
// X-Forwarded-For (without use_remote_address) or from an
// original_ip_detection extension without a port, so port 0 is the mark
// of an address a request header may have chosen; a connection's own
// peer never has port 0.
func callerAddr(sourceAddress string) (netip.Addr, string) {
	ap, err := netip.ParseAddrPort(sourceAddress)
	if err != nil {
		return netip.Addr{}, "address"
	}
	addr := ap.Addr().WithZone("").Unmap()
	if ap.Port() == 0 {
		return addr, "forwarded"
	}
	return addr, ""
}

// serveAdmin answers an admin request: one under path_prefix (inPrefix,
// and rest is what follows the prefix) or one that carries the admin
// token on another path, which passes the checks only to be told there
// is no such call. A request failing the checks is counted and logged,
// marked phaseAdminDenied and not answered (false): the request path limits
// it as any request and, where it would go on, answers hideAdmin's 404.
func (h *Stream) serveAdmin(rest string, inPrefix bool, now time.Time) bool {
	p := h.plugin
	a := p.admin
	info := &h.info
	addr, reason := callerAddr(info.Property(request.SourceAddressProperty))
	source := "unknown"
	if addr.IsValid() {
		source = addr.String()
	}
	if reason == "" && !a.cfg.ClientCIDRs.Contains(addr) {
		reason = "address"
	}
	// Each bearer credential is one guess. A request needs a unit of its
	// address's bucket for every one it carries (one when it carries
	// none), and each wrong one, or the want of any, takes its unit: no
	// request tries more tokens than the bucket holds.
	all, _ := h.authorization()
	creds, tokenOK := bearerCredentials(all, &a.cfg.TokenSHA256)
	wrong := creds
	if tokenOK {
		wrong--
	} else {
		wrong = max(wrong, 1)
	}
	if reason == "" {
		// Only allowed addresses take a slot, so no one outside
		// client_cidrs can crowd the table. An IPv6 caller is counted by
		// its /64, which one host usually holds whole: a fresh address
		// of it is no fresh allowance. A store failure throttles: the
		// route fails closed.
		failKey := source
		if addr.Is6() {
			p, _ := addr.Prefix(64)
			failKey = p.String()
		}
		ns := now.UnixNano()
		switch res, err := a.fails.Peek(failKey, ns, int64(max(creds, 1))); {
		case err != nil || !res.Allowed:
			reason = "throttled"
			a.throttled.Increment(1)
		case wrong > 0:
			_, _ = a.fails.AllowN(failKey, ns, int64(wrong))
			if !tokenOK {
				reason = "token"
			}
		}
	}
	if reason != "" {
		a.denied.Increment(1)
		h.logAdmin("admin_denied", source, "reason", reason, 404)
		h.phase = phaseAdminDenied
		return false
	}
	a.calls.Increment(1)
	method := info.Method()
	var action string
	switch {
	case inPrefix && rest == "quota/" && method == "GET":
		action = "get"
	case inPrefix && rest == "quota/reset/" && method == "POST":
		action = "reset"
	default:
		h.logAdmin("admin", source, "action", "unknown", 404)
		h.replyAdmin(404, adminError("no such admin call: GET quota or POST quota/reset"))
		return true
	}
	query, _ := request.RawQuery(info.Path())
	status, body := p.adminQuota(action, query, now)
	h.logAdmin("admin", source, "action", action, status)
	h.replyAdmin(status, body)
	return true
}

// hideAdmin answers an admin request that failed the checks and that the
// limits admitted, at now, charged as an upstream's 404 without usage
// is: an empty 404 carrying what an admitted response carries from this
// filter, the rate-limit headers (with headers_on_allowed), and nothing
// else of it, not even reply_headers. So it is told from an upstream's
// 404 only by what the upstream and Envoy's router put on a forwarded
// response.
func (h *Stream) hideAdmin(now time.Time) {
	p := h.plugin
	if len(h.charges.pending) > 0 {
		// Charged as the upstream 404 it stands for, a response without
		// usage: each cost_from_response limit its default, before the
		// rate-limit headers are read, as respond does.
		h.charges.chargeResponse(p, nil, &h.quota, h.start)
		if len(h.charges.pending) > 0 {
			h.charges.chargeBody(p, now) // an empty body reports no usage
		}
	}
	var headers [][2]string
	if h.quota.applies && p.cfg.Response.HeadersOnAllowed {
		// Reset times are relative to the decision, as respond's.
		p.respHeaders, p.respBuf = appendRateLimitHeaders(p.respHeaders[:0], p.respBuf, p.cfg.Response.Headers, h.quota, h.start, false)
		headers = p.respHeaders
	}
	h.phase = phaseAnswered
	if err := p.host.Stream.Reply(404, headers, nil); err != nil {
		p.log.Errorf("sluice: sending the admin reply: %v", err)
	}
}

// adminQuota reads (get) or resets (reset) the local key named by the
// query's limit and key parameters: one key parameter per part of the
// limit's key, in order.
func (p *Plugin) adminQuota(action, query string, now time.Time) (int, []byte) {
	names := request.QueryValues(query, "limit")
	if len(names) != 1 {
		return 400, adminError("want exactly one limit parameter")
	}
	var l *limitRuntime
	for _, c := range p.limits {
		if c.cfg.Name == names[0] && c.ext == nil {
			l = c
		}
	}
	switch {
	case l == nil:
		return 404, adminError("no limit " + strconv.Quote(names[0]))
	case l.disabled:
		return 400, adminError("limit " + strconv.Quote(names[0]) + " is switched off (enabled: false): it has no state")
	case l.remote != nil:
		return 400, adminError("limit " + strconv.Quote(names[0]) + " is " + l.cfg.Mode.String() +
			": its state is in Redis; use sluicectl quota --webdis or --upstash")
	}
	q, err := ResolveQuotaKey(l.cfg, request.QueryValues(query, "key"))
	if err != nil {
		return 400, adminError(err.Error())
	}
	t, _, _ := l.table(q.Override)
	ns := now.UnixNano()
	held := false
	if action == "reset" {
		if held, err = t.Reset(q.Key, ns); err != nil {
			return 503, adminError(err.Error())
		}
	}
	res, err := t.Peek(q.Key, ns, 0)
	if err != nil {
		return 503, adminError(err.Error())
	}
	lim := t.Limit()
	b := make([]byte, 0, 192)
	b = append(b, `{"limit":`...)
	b = appendJSONString(b, l.cfg.Name)
	b = append(b, `,"mode":"local","algorithm":`...)
	b = appendJSONString(b, l.cfg.Algorithm.String())
	if q.Override != "" {
		b = append(b, `,"override":`...)
		b = appendJSONString(b, q.Override)
	}
	b = append(b, `,"capacity":`...)
	b = strconv.AppendInt(b, lim.Capacity(), 10)
	b = append(b, `,"remaining":`...)
	b = strconv.AppendInt(b, res.Remaining, 10)
	b = append(b, `,"reset_after_ms":`...)
	b = strconv.AppendInt(b, int64((res.ResetAfter+time.Millisecond-1)/time.Millisecond), 10)
	if action == "reset" {
		b = append(b, `,"reset":`...)
		b = strconv.AppendBool(b, held)
	}
	return 200, append(b, "}\n"...)
}

func adminError(msg string) []byte {
	return append(appendJSONString([]byte(`{"error":`), msg), "}\n"...)
}

// replyAdmin answers an admin request that passed the checks, in JSON.
func (h *Stream) replyAdmin(status int, body []byte) {
	headers := [][2]string{{"content-type", "application/json"}, {"cache-control", "no-store"}}
	h.phase = phaseAnswered
	if err := h.plugin.host.Stream.Reply(status, headers, body); err != nil {
		h.plugin.log.Errorf("sluice: sending the admin reply: %v", err)
	}
}

// logAdmin writes one JSON line per admin request: the event, the client
// address it came from, one detail and the status answered.
func (h *Stream) logAdmin(event, source, field, value string, status int) {
	b := make([]byte, 0, 128)
	b = append(b, `{"sluice":`...)
	b = appendJSONString(b, event)
	b = append(b, `,"source":`...)
	b = appendJSONString(b, source)
	b = append(b, ',')
	b = appendJSONString(b, field)
	b = append(b, ':')
	b = appendJSONString(b, value)
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(status), 10)
	b = append(b, '}')
	if event == "admin_denied" {
		h.plugin.log.Warn(string(b))
		return
	}
	h.plugin.log.Info(string(b))
}

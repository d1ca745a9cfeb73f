package engine

// The admin route (config "admin", off by default): an operator reads or
// resets one local key of a limit (sluicectl quota --envoy), whose state
// lives only in this Envoy's shared data.
//
// Which requests are admin requests: every request whose normalised path
// (normalPath) is path_prefix or under it. Normalising decodes every
// percent escape, turns '\' into '/', lower-cases ASCII letters, merges
// runs of '/' and removes "." and ".." segments, and ignores the query;
// so "/%2esluice/", "//.sluice/", "/.SLUICE/", "/x/../.sluice/" and
// "/.sluice?quota" are all admin requests. Every admin request is answered
// here and none reaches the upstream, whether or not it passes the checks:
// a request carrying an admin token in a spelling the upstream might
// resolve differently never leaves the filter.
//
// The checks, both always evaluated: the client address as client_ip
// resolves it (the one limits key on: with the default "peer" source the
// connection's address, which X-Forwarded-For cannot change) must be in
// client_cidrs, and "Authorization: Bearer <token>" must carry a token
// whose SHA-256 equals token_sha256, compared in constant time. A request
// failing either gets an empty 404 with no header of ours, as a path the
// upstream does not have, so the route's existence does not show; it is
// counted (sluice.admin.denied) and logged with its source and reason.
// An answered call is counted (sluice.admin.calls) and logged with its
// source, action and limit, never its key values.

import (
	"crypto/sha256"
	"crypto/subtle"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-proxy/sluice/filter/config"
	"github.com/sluice-proxy/sluice/filter/host"
)

const (
	metricAdminCalls  = "sluice.admin.calls"
	metricAdminDenied = "sluice.admin.denied"
)

// adminRuntime is the configured admin route.
type adminRuntime struct {
	cfg           *config.Admin
	calls, denied host.Counter
	// pathBuf holds the normalised path of the current request; a VM runs
	// one callback at a time.
	pathBuf []byte
}

func newAdminRuntime(hm host.Metrics, cfg *config.Admin) *adminRuntime {
	return &adminRuntime{cfg: cfg, calls: hm.Counter(metricAdminCalls), denied: hm.Counter(metricAdminDenied)}
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
// part of a :path (config.AppendPath): it starts with '/' and, after each
// segment, ends with '/', so that the prefix "/.sluice/" matches
// "/.sluice" too.
func appendNormalPath(dst []byte, path string) []byte {
	dst = config.AppendPath(dst, path, config.PathAdmin)
	if dst[len(dst)-1] != '/' {
		dst = append(dst, '/')
	}
	return dst
}

// tokenMatches reports whether an Authorization value is "Bearer <token>"
// with SHA-256(token) = want. The digests are compared in constant time,
// and a value without a token is hashed all the same.
func tokenMatches(authorization string, want *[32]byte) bool {
	const scheme = "bearer "
	token, ok := "", false
	if len(authorization) > len(scheme) && strings.EqualFold(authorization[:len(scheme)], scheme) {
		token, ok = strings.TrimSpace(authorization[len(scheme):]), true
	}
	sum := sha256.Sum256([]byte(token))
	return subtle.ConstantTimeCompare(sum[:], want[:]) == 1 && ok && token != ""
}

// serveAdmin answers an admin request whose route (after path_prefix) is
// rest.
func (h *Stream) serveAdmin(rest string, now time.Time) {
	p := h.plugin
	a := p.admin
	info := &h.info
	source, _ := info.client(&p.cfg.ClientIP)
	addr, ok := info.ClientAddr() // source, parsed as client_cidrs matches parse it
	fromAllowed := ok && a.cfg.ClientCIDRs.Contains(addr)
	auth, _ := info.header("authorization")
	tokenOK := tokenMatches(auth, &a.cfg.TokenSHA256)
	if !fromAllowed || !tokenOK {
		a.denied.Increment(1)
		reason := "address"
		if fromAllowed {
			reason = "token"
		}
		h.logAdmin("admin_denied", source, "reason", reason, 404)
		h.replyAdmin(404, nil)
		return
	}
	a.calls.Increment(1)
	method := info.pseudo(needMethod)
	var action string
	switch {
	case rest == "quota/" && method == "GET":
		action = "get"
	case rest == "quota/reset/" && method == "POST":
		action = "reset"
	default:
		h.logAdmin("admin", source, "action", "unknown", 404)
		h.replyAdmin(404, adminError("no such admin call: GET quota or POST quota/reset"))
		return
	}
	query, _ := rawQuery(info.pseudo(needPath))
	status, body := p.adminQuota(action, query, now)
	h.logAdmin("admin", source, "action", action, status)
	h.replyAdmin(status, body)
}

// adminQuota reads (get) or resets (reset) the local key named by the
// query's limit and key parameters: one key parameter per part of the
// limit's key, in order.
func (p *Plugin) adminQuota(action, query string, now time.Time) (int, []byte) {
	names := queryValues(query, "limit")
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
	q, err := ResolveQuotaKey(l.cfg, queryValues(query, "key"))
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

// replyAdmin answers an admin request: JSON when there is a body, and for
// the 404 of a failed check nothing at all, not even the configured
// reply_headers, which would tell the filter answered.
func (h *Stream) replyAdmin(status int, body []byte) {
	var headers [][2]string
	if body != nil {
		headers = [][2]string{{"content-type", "application/json"}, {"cache-control", "no-store"}}
	}
	h.localReply = true
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

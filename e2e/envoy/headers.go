package envoy

import (
	"crypto/rand"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/sluice-proxy/sluice/e2e/host"
)

// Header names reach the host in lower case (proxy-wasm, HTTP/2 and
// Envoy's own maps all use it), while net/http wants them canonical in
// its Header maps, and http.CanonicalHeaderKey allocates a new string for
// every lower-case name it rewrites. Envoy writes a name from its header
// map as it is, with no per-request work; without a cache, every header a
// filter adds would cost the host an allocation and a scan per response.
// The cache is bounded, so names sent by clients cannot grow it without
// end; past the bound, names are rewritten per call as before.
const maxCanonicalKeys = 1024

var (
	canonicalKeys     sync.Map // lower-case or any name -> its canonical form
	canonicalKeyCount atomic.Int32
)

// canonicalKey is http.CanonicalHeaderKey(name), cached.
func canonicalKey(name string) string {
	if c, ok := canonicalKeys.Load(name); ok {
		return c.(string)
	}
	c := http.CanonicalHeaderKey(name)
	if c != name && canonicalKeyCount.Add(1) <= maxCanonicalKeys {
		// Stored only when rewritten: a name already canonical costs
		// CanonicalHeaderKey no allocation. The key is a copy: name may
		// view a buffer its caller reuses.
		canonicalKeys.Store(string([]byte(name)), c)
	}
	return c
}

// request builds the header map filters see, applying the HCM's request
// header mutations (x-forwarded-*, x-request-id, :scheme).
func (l *listener) request(r *http.Request, worker int, body []byte) *host.Request {
	authority := r.Host
	path := r.RequestURI
	if !strings.HasPrefix(path, "/") && path != "*" && r.URL.Host != "" {
		// Absolute-form request line: Envoy splits it into :authority and
		// :path.
		authority = r.URL.Host
		path = r.URL.RequestURI()
	}
	if l.cfg.MergeSlashes {
		path = mergeSlashes(path)
	}
	// Pseudo headers lead the map, as in Envoy's; :scheme is filled in once
	// x-forwarded-proto is settled.
	hs := [][2]string{{":authority", authority}, {":path", path}, {":method", r.Method}, {":scheme", "http"}}
	keys := make([]string, 0, len(r.Header))
	for k := range r.Header {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var xff, xfp, reqID string
	hasXFF := false
	for _, k := range keys {
		lk := strings.ToLower(k)
		if hopByHop[lk] || lk == "host" {
			continue
		}
		vs := r.Header[k]
		switch lk {
		case "x-forwarded-for":
			hasXFF = true
			xff = strings.Join(vs, ",")
			continue // re-added below, possibly with our hop appended
		case "x-forwarded-proto":
			xfp = vs[0]
			continue
		case "x-request-id":
			reqID = vs[0]
			continue
		}
		for _, v := range vs {
			hs = append(hs, [2]string{lk, v})
		}
	}
	if r.ContentLength > 0 && r.Header.Get("Content-Length") == "" {
		hs = append(hs, [2]string{"content-length", strconv.FormatInt(r.ContentLength, 10)})
	}

	remote, _ := netip.ParseAddrPort(r.RemoteAddr)
	source := r.RemoteAddr
	external := false
	if l.cfg.UseRemoteAddress {
		// Envoy appends the peer to x-forwarded-for and, with no trusted
		// hops configured, overwrites x-forwarded-proto.
		if remote.IsValid() {
			ip := remote.Addr().Unmap().String()
			if hasXFF && strings.TrimSpace(xff) != "" {
				xff = xff + "," + ip
			} else {
				xff = ip
			}
			hasXFF = true
			external = !isInternal(remote.Addr())
		}
		xfp = "http"
	} else if hasXFF {
		// Without use_remote_address the downstream address is the last
		// x-forwarded-for entry (zero trusted hops), if it is an IP.
		parts := strings.Split(xff, ",")
		if a, err := netip.ParseAddr(strings.TrimSpace(parts[len(parts)-1])); err == nil {
			source = netip.AddrPortFrom(a, 0).String()
		}
	}
	if xfp == "" {
		xfp = "http"
	}
	if hasXFF {
		hs = append(hs, [2]string{"x-forwarded-for", xff})
	}
	hs = append(hs, [2]string{"x-forwarded-proto", xfp})
	if external {
		// Envoy strips x-envoy-* headers an external client sent and marks
		// where the request came from.
		kept := hs[:0]
		for _, h := range hs {
			if !strings.HasPrefix(h[0], "x-envoy-") {
				kept = append(kept, h)
			}
		}
		hs = append(kept, [2]string{"x-envoy-external-address", remote.Addr().Unmap().String()})
	} else if l.cfg.UseRemoteAddress {
		hs = append(hs, [2]string{"x-envoy-internal", "true"})
	}
	if l.cfg.GenerateRequestID && (reqID == "" || external) {
		reqID = newUUID()
	}
	if reqID != "" {
		hs = append(hs, [2]string{"x-request-id", reqID})
	}
	if xfp == "https" {
		hs[3][1] = "https"
	}

	req := &host.Request{
		Worker:        worker,
		Headers:       hs,
		Body:          body,
		SourceAddress: source,
		RequestID:     reqID,
	}
	if la, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		req.DestinationAddress = la.String()
	}
	req.RouteName, req.ClusterName = l.routeNames(hs)
	req.Route = l.routeNames
	return req
}

// mergeSlashes is Envoy's PathUtil::mergeSlashes: in the path before any
// "?", runs of "/" become one, keeping a leading and a trailing "/"; the
// query is left alone. Like Envoy's, a path of only slashes becomes "//"
// (the leading and the trailing one), and a path without "//" is returned
// as it is.
func mergeSlashes(p string) string {
	path, query := p, ""
	if i := strings.IndexByte(p, '?'); i >= 0 {
		path, query = p[:i], p[i:]
	}
	if !strings.Contains(path, "//") {
		return p
	}
	var b strings.Builder
	if strings.HasPrefix(path, "/") {
		b.WriteByte('/')
	}
	first := true
	for _, seg := range strings.Split(path, "/") {
		if seg == "" {
			continue
		}
		if !first {
			b.WriteByte('/')
		}
		b.WriteString(seg)
		first = false
	}
	if strings.HasSuffix(path, "/") {
		b.WriteByte('/')
	}
	b.WriteString(query)
	return b.String()
}

// isInternal is Envoy's legacy default internal address set: RFC 1918,
// loopback, and unique-local IPv6.
func isInternal(a netip.Addr) bool {
	a = a.Unmap()
	return a.IsLoopback() || a.IsPrivate()
}

func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

func headerValue(hs [][2]string, name string) string {
	for _, h := range hs {
		if h[0] == name {
			return h[1]
		}
	}
	return ""
}

// joinedHeader is the value of header name with repeats joined by ",",
// as Envoy joins them, and whether the header is present. A single value
// is returned as it is, without a copy.
func joinedHeader(hs [][2]string, name string) (v string, found bool) {
	for _, kv := range hs {
		if kv[0] != name {
			continue
		}
		if found {
			v += "," + kv[1]
		} else {
			v, found = kv[1], true
		}
	}
	return v, found
}

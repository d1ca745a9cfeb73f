package envoy

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-proxy/sluice/e2e/host"
)

// selectRoute is Envoy's route selection: the route matching the headers,
// and the cluster it sends to, which for cluster_header is the first value
// of that header (Envoy reads only the first: the header is untrusted), ""
// when it is missing.
func (l *listener) selectRoute(hs [][2]string) (*Route, string) {
	_, rt := l.match(hs)
	switch {
	case rt == nil:
		return nil, ""
	case rt.ClusterHeader != "":
		return rt, headerValue(hs, rt.ClusterHeader)
	}
	return rt, rt.Cluster
}

// routeNames are xds.route_name and xds.cluster_name of a request with
// these headers. The host asks again after a Wasm filter changed the
// request headers, because Envoy's Wasm filter then clears the route
// cache (Context::replaceHeaderMapValue and the other header map writes
// call clearRouteCache for the request headers:
// source/extensions/common/wasm/context.cc, since envoyproxy/envoy#14318).
func (l *listener) routeNames(hs [][2]string) (route, cluster string) {
	rt, cluster := l.selectRoute(hs)
	if rt == nil {
		return "", ""
	}
	return rt.Name, cluster
}

// match finds the route as Envoy does: the virtual host by :authority
// (exact, then longest suffix wildcard, then longest prefix wildcard, then
// "*"), then the first matching route in order.
func (l *listener) match(hs [][2]string) (*VirtualHost, *Route) {
	vh := l.virtualHost(strings.ToLower(headerValue(hs, ":authority")))
	if vh == nil {
		return nil, nil
	}
	path := headerValue(hs, ":path")
	noQuery := path
	if i := strings.IndexAny(noQuery, "?#"); i >= 0 {
		noQuery = noQuery[:i]
	}
	for _, rt := range vh.Routes {
		if routeMatches(rt, path, noQuery) && headersMatch(rt.Headers, hs) {
			return vh, rt
		}
	}
	return vh, nil
}

// headersMatch is Envoy's HeaderUtility::matchHeaders for the matchers we
// implement: every matcher must hold; a missing header matches only
// present_match false (or present_match true inverted); values of a
// repeated header are joined by "," before an exact comparison.
func headersMatch(ms []HeaderMatch, hs [][2]string) bool {
	for _, m := range ms {
		joined, present := joinedHeader(hs, m.Name)
		var ok bool
		switch {
		case !m.HasExact:
			ok = present == m.Present != m.Invert
		case !present:
			ok = false
		default:
			ok = (joined == m.Exact) != m.Invert
		}
		if !ok {
			return false
		}
	}
	return true
}

func routeMatches(rt *Route, path, noQuery string) bool {
	switch {
	case rt.Regex != nil:
		return rt.Regex.MatchString(noQuery)
	case rt.Path != "":
		if !rt.CaseSensitive {
			return strings.EqualFold(noQuery, rt.Path)
		}
		return noQuery == rt.Path
	case rt.SeparatedPrefix != "":
		p := noQuery
		if !rt.CaseSensitive {
			p = strings.ToLower(p)
		}
		return p == rt.SeparatedPrefix || strings.HasPrefix(p, rt.SeparatedPrefix+"/")
	default:
		p := path
		if !rt.CaseSensitive {
			p = strings.ToLower(p)
		}
		return strings.HasPrefix(p, rt.Prefix)
	}
}

func (l *listener) virtualHost(authority string) *VirtualHost {
	var best *VirtualHost
	bestLen, bestKind := -1, 4
	for _, vh := range l.cfg.VirtualHosts {
		for _, d := range vh.Domains {
			kind, n := -1, len(d)
			switch {
			case d == authority:
				return vh
			case d == "*":
				kind = 3
			case strings.HasPrefix(d, "*") && strings.HasSuffix(authority, d[1:]) && len(authority) > len(d)-1:
				kind = 1
			case strings.HasSuffix(d, "*") && strings.HasPrefix(authority, d[:len(d)-1]) && len(authority) > len(d)-1:
				kind = 2
			}
			if kind < 0 {
				continue
			}
			if kind < bestKind || (kind == bestKind && n > bestLen) {
				best, bestKind, bestLen = vh, kind, n
			}
		}
	}
	return best
}

// router is the terminal filter: it resolves the route from the final
// headers (filters may have changed them; Envoy clears the route cache when
// wasm modifies request headers) and forwards to the cluster.
func (l *listener) router(ctx context.Context, req *host.Request) (*host.Response, error) {
	rt, cluster := l.selectRoute(req.Headers)
	if rt == nil {
		return nil, &host.UpstreamError{Status: 404, Details: "route_not_found", Body: []byte{}}
	}
	c := l.s.clusters.clusters[cluster]
	if c == nil {
		// Only a cluster_header route gets here: Envoy's router counts
		// no_cluster, flags the stream NC and answers
		// cluster_not_found_response_code with an empty body.
		l.s.log.Logf(LevelDebug, "router", "unknown cluster '%s'", cluster)
		return nil, &host.UpstreamError{Status: rt.NotFoundStatus, Details: "cluster_not_found", Body: []byte{}}
	}
	hs := req.Headers
	uctx, cancel := ctx, context.CancelFunc(func() {})
	if rt.Timeout > 0 {
		// The route timeout covers the whole response, a streamed body
		// included, so it is cancelled only when the body has ended.
		uctx, cancel = context.WithTimeout(ctx, rt.Timeout)
		hs = append(hs[:len(hs):len(hs)], [2]string{"x-envoy-expected-rq-timeout-ms", strconv.FormatInt(rt.Timeout.Milliseconds(), 10)})
	}
	start := time.Now()
	resp, err := c.roundTrip(uctx, hs, req.Body, true)
	if ub, ok := respBodyStream(resp); ok {
		ub.done = cancel
	} else {
		defer cancel()
	}
	if err != nil {
		var ce *errConnect
		switch {
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case errors.Is(uctx.Err(), context.DeadlineExceeded):
			return nil, &host.UpstreamError{Status: 504, Details: "upstream_response_timeout", Body: []byte("upstream request timeout")}
		case errors.As(err, &ce):
			l.s.log.Logf(LevelDebug, "router", "upstream connect error on cluster %s: %v", cluster, err)
			return nil, &host.UpstreamError{Status: 503, Details: "upstream_reset_before_response_started{connection_failure}",
				Body: []byte("upstream connect error or disconnect/reset before headers. reset reason: connection failure")}
		default:
			l.s.log.Logf(LevelDebug, "router", "upstream reset on cluster %s: %v", cluster, err)
			return nil, &host.UpstreamError{Status: 503, Details: "upstream_reset_before_response_started{connection_termination}",
				Body: []byte("upstream connect error or disconnect/reset before headers. reset reason: connection termination")}
		}
	}
	resp.Headers = append(resp.Headers, [2]string{"x-envoy-upstream-service-time", strconv.FormatInt(time.Since(start).Milliseconds(), 10)})
	resp.Details = "via_upstream"
	return resp, nil
}

package envoy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sluice-proxy/sluice/e2e/host"
)

// maxUpstreamBody caps a buffered upstream response: one with a
// Content-Length, or a callout's reply. Something has to stop a runaway
// upstream from exhausting memory; a streamed body is never held whole.
const maxUpstreamBody = 64 << 20

// upstreamReadSize is the most one read of a streamed body takes, the
// size of the slices Envoy reads a connection into (16 KiB).
const upstreamReadSize = 16 << 10

// errConnect marks a failure to open the upstream connection, which Envoy
// reports differently from a failure on an open one.
type errConnect struct{ err error }

func (e *errConnect) Error() string { return "upstream connect: " + e.err.Error() }
func (e *errConnect) Unwrap() error { return e.err }

// clusterManager owns the upstream clusters. It serves the router and
// proxy_http_call from one table, as Envoy's cluster manager does.
type clusterManager struct {
	clusters map[string]*upstreamCluster
}

type upstreamCluster struct {
	cfg  *Cluster
	next atomic.Uint64
	// One pool per endpoint: round robin picks the host per request, as
	// Envoy's load balancer does, and each host keeps its own connections.
	pools []*http.Transport
}

func newClusterManager(cfgs []*Cluster) *clusterManager {
	cm := &clusterManager{clusters: map[string]*upstreamCluster{}}
	for _, c := range cfgs {
		uc := &upstreamCluster{cfg: c}
		for _, ep := range c.Endpoints {
			uc.pools = append(uc.pools, newPool(c, ep))
		}
		cm.clusters[c.Name] = uc
	}
	return cm
}

func newPool(c *Cluster, endpoint string) *http.Transport {
	d := &net.Dialer{Timeout: c.ConnectTimeout}
	network := c.Network
	return &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			// Resolving on every new connection keeps STRICT_DNS hosts as
			// fresh as Envoy's periodic re-resolution does.
			conn, err := d.DialContext(ctx, network, endpoint)
			if err != nil {
				return nil, &errConnect{err}
			}
			return conn, nil
		},
		// A proxy must not add Accept-Encoding or decompress bodies behind
		// the filters' backs.
		DisableCompression:  true,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     time.Hour,
		// Envoy's HTTP/1 upstream codec: no HTTP/2 upgrade.
		ForceAttemptHTTP2: false,
	}
}

func (cm *clusterManager) close() {
	for _, c := range cm.clusters {
		for _, p := range c.pools {
			p.CloseIdleConnections()
		}
	}
}

// HasCluster implements host.Caller.
func (cm *clusterManager) HasCluster(name string) bool { return cm.clusters[name] != nil }

// GrpcEndpoint implements host.GrpcCaller: the cluster's next endpoint in
// round-robin order, the one a gRPC callout connects to over HTTP/2.
func (cm *clusterManager) GrpcEndpoint(name string) (network, address string, ok bool) {
	c := cm.clusters[name]
	if c == nil || len(c.cfg.Endpoints) == 0 {
		return "", "", false
	}
	i := c.next.Add(1) - 1
	return c.cfg.Network, c.cfg.Endpoints[i%uint64(len(c.cfg.Endpoints))], true
}

// Call implements host.Caller for proxy_http_call.
func (cm *clusterManager) Call(ctx context.Context, cluster string, headers [][2]string, body []byte, trailers [][2]string, timeout time.Duration) (*host.Response, error) {
	c := cm.clusters[cluster]
	if c == nil {
		return nil, fmt.Errorf("unknown cluster %q", cluster)
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	return c.roundTrip(ctx, headers, body, false)
}

// hopByHop are connection-level headers that Envoy never forwards.
var hopByHop = map[string]bool{
	"connection": true, "keep-alive": true, "proxy-connection": true,
	"transfer-encoding": true, "upgrade": true, "te": true, "trailer": true,
}

// upstreamURL is the URL whose request line net/http writes as path, byte
// for byte, as Envoy forwards :path. Opaque carries any path unchanged and
// unescaped, except one that starts with "//": net/http takes such an
// Opaque for a scheme-relative URL and would send "//.x/y" as the absolute
// URL "http://.x/y". That path goes through Path and RawPath instead, which
// keep it whenever it is validly escaped; a path neither form carries is
// an error, never a different request.
func upstreamURL(host, path string) (*url.URL, error) {
	u := &url.URL{Scheme: "http", Host: host, Opaque: path}
	if strings.HasPrefix(path, "//") {
		raw, query, hasQuery := strings.Cut(path, "?")
		unescaped, err := url.PathUnescape(raw)
		if err != nil {
			return nil, fmt.Errorf("path %q cannot be forwarded unchanged: %v", path, err)
		}
		u = &url.URL{Scheme: "http", Host: host, Path: unescaped, RawPath: raw, RawQuery: query, ForceQuery: hasQuery && query == ""}
	}
	if got := u.RequestURI(); got != path {
		return nil, fmt.Errorf("path %q cannot be forwarded unchanged (it would be sent as %q)", path, got)
	}
	return u, nil
}

// roundTrip sends one buffered request to the next endpoint in round-robin
// order. headers carry the pseudo headers; they become the request line and
// Host and are never sent as headers. With stream, a response body sent
// without a Content-Length (chunked: server-sent events, a streamed LLM
// answer) comes back as a host.BodyStream, read as it arrives.
func (c *upstreamCluster) roundTrip(ctx context.Context, headers [][2]string, body []byte, stream bool) (*host.Response, error) {
	if len(c.pools) == 0 {
		return nil, &errConnect{errors.New("no healthy upstream")}
	}
	pool := c.pools[(c.next.Add(1)-1)%uint64(len(c.pools))]
	var method, path, authority string
	hdr := http.Header{}
	for _, h := range headers {
		k := strings.ToLower(h[0])
		switch {
		case k == ":method":
			method = h[1]
		case k == ":path":
			path = h[1]
		case k == ":authority":
			authority = h[1]
		case strings.HasPrefix(k, ":"), k == "host", k == "content-length", hopByHop[k]:
		default:
			ck := canonicalKey(k)
			hdr[ck] = append(hdr[ck], h[1])
		}
	}
	if method == "" || path == "" {
		return nil, errors.New("request without :method or :path")
	}
	if _, ok := hdr["User-Agent"]; !ok {
		// Present-but-empty stops net/http from inventing a User-Agent the
		// client never sent.
		hdr["User-Agent"] = nil
	}
	target, err := upstreamURL(c.cfg.Name, path)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://upstream/", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.URL = target
	req.Host = authority
	req.Header = hdr
	req.ContentLength = int64(len(body))
	if len(body) == 0 {
		req.Body = http.NoBody
		if method == http.MethodGet || method == http.MethodHead {
			req.ContentLength = 0
		}
	}
	resp, err := pool.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	out := &host.Response{Status: resp.StatusCode}
	if stream && resp.ContentLength < 0 {
		out.BodyStream = &upstreamBody{r: resp.Body, trailer: resp}
	} else {
		defer resp.Body.Close()
		rb, err := io.ReadAll(io.LimitReader(resp.Body, maxUpstreamBody+1))
		if err != nil {
			return nil, err
		}
		if len(rb) > maxUpstreamBody {
			return nil, fmt.Errorf("upstream response body larger than %d bytes", maxUpstreamBody)
		}
		out.Body = rb
	}
	for k, vs := range resp.Header {
		lk := strings.ToLower(k)
		if hopByHop[lk] {
			continue
		}
		for _, v := range vs {
			out.Headers = append(out.Headers, [2]string{lk, v})
		}
	}
	if resp.ContentLength >= 0 && resp.Header.Get("Content-Length") == "" {
		out.Headers = append(out.Headers, [2]string{"content-length", fmt.Sprint(resp.ContentLength)})
	}
	if out.BodyStream == nil {
		out.Trailers = trailerPairs(resp.Trailer)
	}
	sortPairs(out.Headers)
	return out, nil
}

// trailerPairs are an upstream's trailers, read once its body ended,
// lower-cased and sorted by name.
func trailerPairs(t http.Header) [][2]string {
	var out [][2]string
	for k, vs := range t {
		for _, v := range vs {
			out = append(out, [2]string{strings.ToLower(k), v})
		}
	}
	sortPairs(out)
	return out
}

// upstreamBody is a streamed upstream body, one read at a time: each read
// off the connection is one chunk, as Envoy hands each read to the filter
// chain. done runs once, when the body ends or fails.
type upstreamBody struct {
	r    io.ReadCloser
	done func()
	// trailer is the response whose Trailer net/http fills in when the
	// body has been read to its end.
	trailer *http.Response
}

// Trailers are the trailers that followed the body (a chunked HTTP/1.1
// body can have them), once Next returned io.EOF.
func (b *upstreamBody) Trailers() [][2]string { return trailerPairs(b.trailer.Trailer) }

func (b *upstreamBody) Next(context.Context) ([]byte, error) {
	buf := make([]byte, upstreamReadSize)
	for {
		n, err := b.r.Read(buf)
		if err != nil {
			_ = b.Close()
			return buf[:n], err
		}
		if n > 0 {
			return buf[:n], nil
		}
	}
}

// Close drops the upstream response, as Envoy resets an upstream request
// whose downstream stream ended first.
func (b *upstreamBody) Close() error {
	err := b.r.Close()
	if b.done != nil {
		b.done()
		b.done = nil
	}
	return err
}

func sortPairs(p [][2]string) {
	sort.SliceStable(p, func(i, j int) bool { return p[i][0] < p[j][0] })
}

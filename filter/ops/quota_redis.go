package ops

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/sluice-proxy/sluice/filter/backend"
	"github.com/sluice-proxy/sluice/filter/config"
	"github.com/sluice-proxy/sluice/filter/engine"
	"github.com/sluice-proxy/sluice/filter/host"
	"github.com/sluice-proxy/sluice/limiter"
)

// redisQuota reads or resets a global or hybrid limit's bucket in Redis
// with the filter's own key derivation and scripts (backend.Peek,
// backend.Reset), over the same HTTP protocols.
func redisQuota(a *quotaArgs, lim *config.Limit, q engine.QuotaKey) (quotaState, error) {
	ep, base, err := redisEndpoint(a)
	if err != nil {
		return quotaState{}, err
	}
	l := q.Rate.Limiter(lim.Algorithm)
	rkey := backend.Key(lim.Name, l.Algorithm, q.Key)
	build := backend.Peek
	if a.action == "reset" {
		build = backend.Reset
	}
	cmd, err := build(l, rkey)
	if err != nil {
		return quotaState{}, err
	}
	r, err := evalRedis(ep, base, cmd)
	if err != nil {
		return quotaState{}, err
	}
	st := quotaState{
		Limit: lim.Name, Mode: lim.Mode.String(), Algorithm: lim.Algorithm.String(), Override: q.Override,
		Capacity: l.Capacity(), RedisKey: rkey, Remaining: r.Remaining, ResetAfterMS: r.ResetAfter.Milliseconds(),
		ResetAt: time.UnixMicro(r.ServerMicros).Add(r.ResetAfter),
	}
	if lim.Mode == config.ModeHybrid && l.Algorithm == limiter.TokenBucket {
		n := backend.Reserved(l, r)
		st.Reserved = &n
	}
	if a.action == "reset" {
		done := true
		st.Reset = &done
	}
	return st, nil
}

// redisEndpoint is the backend.Endpoint of --webdis or --upstash and the
// base URL its paths go under.
func redisEndpoint(a *quotaArgs) (*backend.Endpoint, string, error) {
	raw, proto := a.webdis, backend.Webdis
	if a.upstash != "" {
		raw, proto = a.upstash, backend.Upstash
	}
	u, err := httpURL(raw)
	if err != nil {
		return nil, "", err
	}
	ep := &backend.Endpoint{Protocol: proto, Authority: u.Host, PathPrefix: u.EscapedPath()}
	if proto == backend.Upstash {
		if ep.Token = os.Getenv(envBackendToken); ep.Token == "" {
			return nil, "", fmt.Errorf("--upstash needs the REST token in %s", envBackendToken)
		}
	} else {
		ep.BasicAuth = os.Getenv(envBackendBasicAuth)
	}
	return ep, u.Scheme + "://" + u.Host, nil
}

// evalRedis sends cmd with EVALSHA and, when Redis does not know the
// script yet, loads it and sends it again: the filter's recovery.
func evalRedis(ep *backend.Endpoint, base string, cmd backend.Command) (backend.Reply, error) {
	r, err := evalOnce(ep, base, cmd)
	if backend.KindOf(err) != backend.KindNoScript {
		return r, err
	}
	status, body, err := sendBackend(base, ep.LoadScript(cmd.Script))
	if err != nil {
		return backend.Reply{}, err
	}
	if err := backend.ParseScriptLoad(ep.Protocol, status, body, cmd.Script); err != nil {
		return backend.Reply{}, err
	}
	return evalOnce(ep, base, cmd)
}

func evalOnce(ep *backend.Endpoint, base string, cmd backend.Command) (backend.Reply, error) {
	req, err := ep.EvalSHA(cmd)
	if err != nil {
		return backend.Reply{}, err
	}
	status, body, err := sendBackend(base, req)
	if err != nil {
		return backend.Reply{}, err
	}
	return backend.ParseReply(ep.Protocol, status, body)
}

// httpClient follows no redirect: the URL given is the Envoy or backend
// meant, and a redirect elsewhere (with the token, for the same host)
// would read or reset another's state, or print a stranger's reply as
// the answer.
var httpClient = &http.Client{Timeout: quotaTimeout, CheckRedirect: func(*http.Request, []*http.Request) error {
	return http.ErrUseLastResponse
}}

// sendBackend sends a backend.Request as the filter's proxy_http_call
// would: its path byte for byte (already percent-encoded), its headers
// but the pseudo-headers, its body. Replies are read up to the filter's
// own bound.
func sendBackend(base string, req backend.Request) (int, []byte, error) {
	var body io.Reader
	if req.Body != nil {
		body = bytes.NewReader(req.Body)
	}
	hr, err := http.NewRequest(req.Method, base+req.Path, body)
	if err != nil {
		return 0, nil, err
	}
	hr.URL.RawPath = req.Path
	for _, h := range req.Headers {
		if !strings.HasPrefix(h[0], ":") {
			hr.Header.Set(h[0], h[1])
		}
	}
	resp, err := httpClient.Do(hr)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, host.MaxReplyBody+1))
	if err == nil && len(b) > host.MaxReplyBody {
		err = errors.New("reply body over the filter's 64 KiB bound")
	}
	return resp.StatusCode, b, err
}

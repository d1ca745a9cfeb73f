package envoy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
)

// RemoteCode is vm_config.code.remote: a module fetched over HTTP through a
// cluster and accepted only if its SHA-256 matches.
type RemoteCode struct {
	URI     string
	Cluster string
	// SHA256 is the expected digest as 64 lowercase hex digits.
	SHA256 string
	// Timeout bounds the whole fetch; 0 means none.
	Timeout time.Duration
	// Authority and Path are the request's :authority and :path, taken from
	// URI the way Envoy's HttpUri handling does.
	Authority string
	Path      string

	// cluster lets LoadCode fetch without a running server.
	cluster *Cluster
}

// sha256Hex is the only spelling that can ever match: Envoy compares the
// configured string verbatim with the lowercase hex digest of the body.
var sha256Hex = regexp.MustCompile(`^[0-9a-f]{64}$`)

func buildRemoteCode(r *corev3.RemoteDataSource, path string, clusters map[string]*Cluster) (*RemoteCode, error) {
	hu := r.GetHttpUri()
	rc := &RemoteCode{
		URI:     hu.GetUri(),
		Cluster: hu.GetCluster(),
		SHA256:  r.GetSha256(),
		Timeout: hu.GetTimeout().AsDuration(),
	}
	if !sha256Hex.MatchString(rc.SHA256) {
		return nil, &fieldError{Path: path + ".sha256", Msg: fmt.Sprintf("%q is not a SHA-256 digest: Envoy compares it with the 64 lowercase hex digits of the module's SHA-256 (sha256sum prints them), so any other spelling never matches", rc.SHA256)}
	}
	u, err := url.Parse(rc.URI)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, &fieldError{Path: path + ".http_uri.uri", Msg: fmt.Sprintf("%q is not an absolute http(s) URI with a host", rc.URI)}
	}
	rc.Authority = u.Host
	rc.Path = u.EscapedPath()
	if rc.Path == "" {
		rc.Path = "/"
	}
	if u.RawQuery != "" {
		rc.Path += "?" + u.RawQuery
	}
	if rc.Cluster == "" {
		return nil, &fieldError{Path: path + ".http_uri.cluster", Msg: "a cluster is required"}
	}
	if clusters != nil {
		rc.cluster = clusters[rc.Cluster]
		if rc.cluster == nil {
			return nil, &fieldError{Path: path + ".http_uri.cluster", Msg: fmt.Sprintf("unknown cluster '%s' (remote code is fetched through a static cluster)", rc.Cluster)}
		}
	}
	return rc, nil
}

// fetch gets the module through cm and checks its digest. Any failure is
// an error: a proxy that started without its rate limiter would fail
// either open or closed without anyone having chosen which.
func (rc *RemoteCode) fetch(ctx context.Context, cm *clusterManager, plugin string) ([]byte, error) {
	where := fmt.Sprintf("wasm filter %q: vm_config.code.remote %s via cluster '%s'", plugin, rc.URI, rc.Cluster)
	headers := [][2]string{{":method", "GET"}, {":path", rc.Path}, {":authority", rc.Authority}, {":scheme", "http"}}
	resp, err := cm.Call(ctx, rc.Cluster, headers, nil, nil, rc.Timeout)
	if err != nil {
		return nil, fmt.Errorf("%s: fetch failed: %w", where, err)
	}
	if resp.Status != 200 {
		return nil, fmt.Errorf("%s: fetch failed: HTTP %d", where, resp.Status)
	}
	if len(resp.Body) == 0 {
		return nil, fmt.Errorf("%s: fetch failed: empty body", where)
	}
	sum := sha256.Sum256(resp.Body)
	if got := hex.EncodeToString(sum[:]); got != rc.SHA256 {
		return nil, fmt.Errorf("%s: sha256 mismatch: the configured sha256 is %s but the fetched module (%s bytes) has sha256 %s",
			where, rc.SHA256, strconv.Itoa(len(resp.Body)), got)
	}
	return resp.Body, nil
}

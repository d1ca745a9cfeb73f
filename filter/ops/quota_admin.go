package ops

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/sluice-proxy/sluice/filter/config"
)

// adminQuota reads or resets a local limit's key in one Envoy through the
// filter's admin route (engine/admin.go), under the admin.path_prefix of
// the configuration given.
func adminQuota(a *quotaArgs, cfg *config.Config) (quotaState, error) {
	if cfg.Admin == nil {
		return quotaState{}, fmt.Errorf("%s has no admin block: the filter serves no admin route", a.configFile)
	}
	token := os.Getenv(envAdminToken)
	if token == "" {
		return quotaState{}, fmt.Errorf("--envoy needs the admin route's bearer token in %s", envAdminToken)
	}
	base, err := httpURL(a.envy)
	if err != nil {
		return quotaState{}, err
	}
	q := url.Values{"limit": {a.limit}, "key": a.keys}
	method, route := http.MethodGet, "quota"
	if a.action == "reset" {
		method, route = http.MethodPost, "quota/reset"
	}
	u := base.Scheme + "://" + base.Host + cfg.Admin.PathPrefix + route + "?" + q.Encode()
	req, err := http.NewRequest(method, u, nil)
	if err != nil {
		return quotaState{}, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := httpClient.Do(req)
	if err != nil {
		return quotaState{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return quotaState{}, err
	}
	var st struct {
		quotaState
		Error string `json:"error"`
	}
	jsonErr := json.Unmarshal(body, &st)
	switch {
	case resp.StatusCode == http.StatusNotFound && len(body) == 0:
		return quotaState{}, fmt.Errorf("%s answered an empty 404: the admin route refused the call (a token whose SHA-256 is not admin.token_sha256, "+
			"a connection from outside admin.client_cidrs, an address Envoy took from X-Forwarded-For because the connection manager lacks "+
			"use_remote_address, too many wrong tokens from this address lately), or that Envoy serves no admin route under %s", a.envy, cfg.Admin.PathPrefix)
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		return quotaState{}, fmt.Errorf("%s answered a redirect (HTTP %d to %q), which sluicectl does not follow: give the URL of the Envoy listener itself",
			a.envy, resp.StatusCode, resp.Header.Get("Location"))
	case resp.StatusCode != http.StatusOK && st.Error != "":
		return quotaState{}, fmt.Errorf("%s: HTTP %d: %s", a.envy, resp.StatusCode, st.Error)
	case resp.StatusCode != http.StatusOK || jsonErr != nil:
		return quotaState{}, fmt.Errorf("%s: HTTP %d: %q", a.envy, resp.StatusCode, strings.TrimSpace(string(body)))
	case st.Limit != a.limit || st.Mode != "local" || st.Algorithm == "" || st.Capacity <= 0 || (a.action == "reset") != (st.Reset != nil):
		// Whatever else answers 200 on that URL (a catch-all route, a
		// stub) is no state of the limit's.
		return quotaState{}, fmt.Errorf("%s: HTTP 200 with a reply that is not the admin route's answer for limit %q: %s",
			a.envy, a.limit, config.Quote(strings.TrimSpace(string(body))))
	}
	// The filter answers a duration; the instant is this machine's.
	st.ResetAt = time.Now().Add(time.Duration(st.ResetAfterMS) * time.Millisecond)
	return st.quotaState, nil
}

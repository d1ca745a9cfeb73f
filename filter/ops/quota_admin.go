package ops

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-proxy/sluice/filter/config"
	"github.com/sluice-proxy/sluice/filter/engine"
)

// adminQuota reads or resets a local limit's key in one Envoy through the
// filter's admin route (engine/admin.go), under the admin.path_prefix of
// the configuration given.
func adminQuota(a *quotaArgs, cfg *config.Config, lim *config.Limit, q engine.QuotaKey) (quotaState, error) {
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
	query := url.Values{"limit": {a.limit}, "key": a.keys}
	method, route := http.MethodGet, "quota"
	if a.action == "reset" {
		method, route = http.MethodPost, "quota/reset"
	}
	u := base.Scheme + "://" + base.Host + cfg.Admin.PathPrefix + route + "?" + query.Encode()
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
	case resp.StatusCode != http.StatusOK && jsonErr == nil && st.Error != "":
		return quotaState{}, fmt.Errorf("%s: HTTP %d: %s", a.envy, resp.StatusCode, st.Error)
	case resp.StatusCode != http.StatusOK:
		return quotaState{}, fmt.Errorf("%s: HTTP %d: %q", a.envy, resp.StatusCode, strings.TrimSpace(string(body)))
	}
	want := adminReply{action: a.action, limit: lim, q: q}
	state, why := want.read(resp.Header.Get("Content-Type"), body)
	if why != "" {
		// Whatever else answers 200 on that URL (a catch-all route, a
		// stub, a proxy's error page) is no state of the limit's.
		return quotaState{}, fmt.Errorf("%s: HTTP 200 with a reply that is not the admin route's answer for limit %q (%s): %s",
			a.envy, a.limit, why, config.Quote(strings.TrimSpace(string(body))))
	}
	// The filter answers a duration; the instant is this machine's.
	state.ResetAt = time.Now().Add(time.Duration(state.ResetAfterMS) * time.Millisecond)
	return state, nil
}

// adminReply is what the admin route answers (engine/admin.go) for one
// key of a local limit, as the configuration says: its name, mode local,
// the algorithm and capacity of the rate the key is decided at (its
// override's, if any), remaining in [0, capacity], reset_after_ms >= 0,
// override only when an override gives the rate, reset only to a reset;
// in a JSON object with exactly those names, each once, served as
// application/json.
type adminReply struct {
	action string
	limit  *config.Limit
	q      engine.QuotaKey
}

// read parses body as the reply, or says why it is not.
func (want adminReply) read(contentType string, body []byte) (quotaState, string) {
	if mt, _, err := mime.ParseMediaType(contentType); err != nil || mt != "application/json" {
		return quotaState{}, fmt.Sprintf("content type %s, not application/json", config.Quote(contentType))
	}
	var st quotaState
	fields := map[string]any{
		"limit": &st.Limit, "mode": &st.Mode, "algorithm": &st.Algorithm,
		"capacity": &st.Capacity, "remaining": &st.Remaining, "reset_after_ms": &st.ResetAfterMS,
	}
	if want.q.Override != "" {
		fields["override"] = &st.Override
	}
	if want.action == "reset" {
		st.Reset = new(bool)
		fields["reset"] = st.Reset
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return quotaState{}, "not a JSON object"
	}
	seen := map[string]bool{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return quotaState{}, "not JSON"
		}
		// encoding/json matches names without regard to case; the
		// route writes them in one spelling, so the keys are compared
		// here, exactly.
		name, _ := t.(string)
		dst, ok := fields[name]
		switch {
		case !ok:
			return quotaState{}, "unexpected field " + config.Quote(name)
		case seen[name]:
			return quotaState{}, "field " + config.Quote(name) + " twice"
		}
		seen[name] = true
		if err := decodeField(dec, dst); err != nil {
			return quotaState{}, "field " + config.Quote(name) + ": " + err.Error()
		}
	}
	if _, err := dec.Token(); err != nil {
		return quotaState{}, "not JSON"
	}
	if _, err := dec.Token(); err != io.EOF {
		return quotaState{}, "more after the JSON object"
	}
	for name := range fields {
		if !seen[name] {
			return quotaState{}, "no field " + config.Quote(name)
		}
	}
	l := want.q.Rate.Limiter(want.limit.Algorithm)
	switch {
	case st.Limit != want.limit.Name:
		return quotaState{}, "another limit's"
	case st.Mode != "local":
		return quotaState{}, "mode is not local"
	case st.Algorithm != want.limit.Algorithm.String():
		return quotaState{}, fmt.Sprintf("algorithm is not the configured %s", want.limit.Algorithm)
	case st.Override != want.q.Override:
		return quotaState{}, fmt.Sprintf("override is not the configured %s", config.Quote(want.q.Override))
	case st.Capacity != l.Capacity():
		return quotaState{}, fmt.Sprintf("capacity is not the configured %d", l.Capacity())
	case st.Remaining < 0 || st.Remaining > st.Capacity:
		return quotaState{}, fmt.Sprintf("remaining is outside [0, %d]", st.Capacity)
	case st.ResetAfterMS < 0:
		return quotaState{}, "reset_after_ms is negative"
	}
	return st, ""
}

// decodeField reads the next JSON value into dst: a string, an integer
// (int64) or a boolean, and nothing else (no null).
func decodeField(dec *json.Decoder, dst any) error {
	t, err := dec.Token()
	if err != nil {
		return errors.New("not JSON")
	}
	switch d := dst.(type) {
	case *string:
		s, ok := t.(string)
		if !ok {
			return errors.New("not a string")
		}
		*d = s
	case *int64:
		n, ok := t.(json.Number)
		if !ok {
			return errors.New("not a number")
		}
		v, err := strconv.ParseInt(string(n), 10, 64)
		if err != nil {
			return errors.New("not an integer")
		}
		*d = v
	case *bool:
		b, ok := t.(bool)
		if !ok {
			return errors.New("not a boolean")
		}
		*d = b
	}
	return nil
}

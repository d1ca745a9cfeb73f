package ops

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"github.com/sluice-proxy/sluice/filter/config"
	"github.com/sluice-proxy/sluice/filter/engine"
)

// The environment variables holding secrets, so they stay out of shell
// history and process listings. The backend ones are named after the
// fields of the plugin config's "backend" block that hold them.
const (
	envBackendToken     = "SLUICE_BACKEND_TOKEN"
	envBackendBasicAuth = "SLUICE_BACKEND_BASIC_AUTH"
	envAdminToken       = "SLUICE_ADMIN_TOKEN"
)

// quotaTimeout bounds each HTTP call the command makes.
const quotaTimeout = 10 * time.Second

// keyValues collects repeated --key flags: the values of the limit's key
// parts, in the order of its "key" list.
type keyValues []string

func (k *keyValues) String() string     { return strings.Join(*k, ",") }
func (k *keyValues) Set(v string) error { *k = append(*k, v); return nil }

type quotaArgs struct {
	action                string
	configFile, limit     string
	keys                  keyValues
	webdis, upstash, envy string
	json                  bool
}

// quotaState is what get and reset print, from Redis or from an Envoy's
// admin route (whose JSON reply has the same field names).
type quotaState struct {
	Limit     string `json:"limit"`
	Mode      string `json:"mode"`
	Algorithm string `json:"algorithm"`
	// Override is the overrides entry giving the rate, "" for the
	// limit's own.
	Override string `json:"override,omitempty"`
	Capacity int64  `json:"capacity"`
	// RedisKey is the bucket's key for global and hybrid limits.
	RedisKey  string `json:"redis_key,omitempty"`
	Remaining int64  `json:"remaining"`
	// ResetAfterMS is when the key is back to its full allowance, and
	// ResetAt that instant: by Redis's clock for global and hybrid
	// limits, by this machine's for an Envoy's answer.
	ResetAfterMS int64     `json:"reset_after_ms"`
	ResetAt      time.Time `json:"reset_at"`
	// Reserved is, for hybrid token buckets, the units leased beyond the
	// empty bucket (see backend.Reserved).
	Reserved *int64 `json:"leases_reserved,omitempty"`
	// Reset is set by reset: true when the key was given its full
	// allowance. The admin route answers false for a key that holds no
	// slot of its own.
	Reset *bool `json:"reset,omitempty"`
}

func runQuota(args []string, stdout, stderr io.Writer) int {
	a, err := parseQuotaArgs(args, stderr)
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(stderr, "sluicectl quota: %v\n", err)
		}
		return exitUsage
	}
	st, err := quota(a)
	if err != nil {
		fmt.Fprintf(stderr, "sluicectl quota: %v\n", err)
		return exitUsage
	}
	printQuota(stdout, st, a.json)
	return exitOK
}

func parseQuotaArgs(args []string, stderr io.Writer) (*quotaArgs, error) {
	a := &quotaArgs{}
	fs := flag.NewFlagSet("sluicectl quota", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: sluicectl quota get|reset --config FILE --limit NAME [--key VALUE]... (--webdis URL | --upstash URL | --envoy URL) [--json]")
		fmt.Fprintf(stderr, "  --upstash reads its token from %s, --webdis basic auth (user:pass) from %s,\n", envBackendToken, envBackendBasicAuth)
		fmt.Fprintf(stderr, "  --envoy the admin route's bearer token from %s.\n", envAdminToken)
		fs.PrintDefaults()
	}
	fs.StringVar(&a.configFile, "config", "", "the plugin configuration (JSON) the filter runs")
	fs.StringVar(&a.limit, "limit", "", "the limit's name")
	fs.Var(&a.keys, "key", "a key part's value, once per part of the limit's key, in order")
	fs.StringVar(&a.webdis, "webdis", "", "global and hybrid limits: the Webdis URL in front of the limits' Redis")
	fs.StringVar(&a.upstash, "upstash", "", "global and hybrid limits: the Upstash REST URL of the limits' Redis")
	fs.StringVar(&a.envy, "envoy", "", "local limits: the URL of one Envoy's listener, whose admin route answers")
	fs.BoolVar(&a.json, "json", false, "print JSON")
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		fs.Usage()
		return nil, errors.New("get or reset comes first")
	}
	a.action = args[0]
	if a.action != "get" && a.action != "reset" {
		fs.Usage()
		return nil, fmt.Errorf("unknown action %q: get or reset", a.action)
	}
	if err := fs.Parse(args[1:]); err != nil {
		return nil, err
	}
	var missing []string
	if fs.NArg() > 0 {
		missing = append(missing, fmt.Sprintf("unexpected arguments %q", fs.Args()))
	}
	if a.configFile == "" {
		missing = append(missing, "--config is required")
	}
	if a.limit == "" {
		missing = append(missing, "--limit is required")
	}
	n := 0
	for _, s := range []string{a.webdis, a.upstash, a.envy} {
		if s != "" {
			n++
		}
	}
	if n != 1 {
		missing = append(missing, "exactly one of --webdis, --upstash or --envoy is required")
	}
	if len(missing) > 0 {
		return nil, errors.New(strings.Join(missing, "; "))
	}
	return a, nil
}

// quota runs get or reset where the limit's state lives.
func quota(a *quotaArgs) (quotaState, error) {
	cfg, lim, q, err := quotaLimit(a)
	if err != nil {
		return quotaState{}, err
	}
	if a.envy != "" {
		return adminQuota(a, cfg, lim, q)
	}
	return redisQuota(a, lim, q)
}

// quotaLimit reads the configuration and finds the limit and its bucket
// for the key values. The limit's mode must suit the way asked: local
// limits through an Envoy, global and hybrid ones in Redis.
func quotaLimit(a *quotaArgs) (*config.Config, *config.Limit, engine.QuotaKey, error) {
	data, err := readRegular(a.configFile)
	if err != nil {
		return nil, nil, engine.QuotaKey{}, err
	}
	cfg, err := config.Parse(data)
	if err != nil {
		return nil, nil, engine.QuotaKey{}, fmt.Errorf("%s: %v", a.configFile, err)
	}
	i := cfg.LimitIndex(a.limit)
	if i < 0 {
		return nil, nil, engine.QuotaKey{}, fmt.Errorf("%s has no limit %q", a.configFile, a.limit)
	}
	lim := &cfg.Limits[i]
	switch local := lim.Mode == config.ModeLocal; {
	case local && a.envy == "":
		return nil, nil, engine.QuotaKey{}, fmt.Errorf("limit %q is local: its state is in each Envoy's shared data; ask an Envoy with --envoy", lim.Name)
	case !local && a.envy != "":
		return nil, nil, engine.QuotaKey{}, fmt.Errorf("limit %q is %s: its state is in Redis; ask it with --webdis or --upstash", lim.Name, lim.Mode)
	}
	q, err := engine.ResolveQuotaKey(lim, a.keys)
	return cfg, lim, q, err
}

// httpURL parses a server's URL given on the command line.
func httpURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%q is not an http(s) URL", raw)
	}
	return u, nil
}

func printQuota(w io.Writer, st quotaState, asJSON bool) {
	if asJSON {
		b, _ := json.Marshal(st)
		fmt.Fprintf(w, "%s\n", b)
		return
	}
	fmt.Fprintf(w, "limit:          %s (%s, %s)\n", st.Limit, st.Mode, st.Algorithm)
	if st.Override != "" {
		fmt.Fprintf(w, "override:       %s\n", st.Override)
	}
	if st.RedisKey != "" {
		fmt.Fprintf(w, "redis key:      %s\n", st.RedisKey)
	}
	if st.Reset != nil {
		fmt.Fprintf(w, "reset:          %v\n", *st.Reset)
	}
	used := "used"
	if st.Algorithm != "token_bucket" {
		used = "window count"
	}
	fmt.Fprintf(w, "remaining:      %d of %d (%s %d)\n", st.Remaining, st.Capacity, used, st.Capacity-st.Remaining)
	fmt.Fprintf(w, "full again in:  %v (%s)\n", time.Duration(st.ResetAfterMS)*time.Millisecond, st.ResetAt.UTC().Format(time.RFC3339Nano))
	if st.Reserved != nil {
		fmt.Fprintf(w, "leases ahead:   %d\n", *st.Reserved)
	}
}

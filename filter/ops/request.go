package ops

import (
	"errors"
	"fmt"
	"strings"

	"github.com/sluice-proxy/sluice/filter/engine"
)

// Request is a request described the way curl takes it: a method and a
// URL, headers, and what Envoy knows of the request besides (the client
// address, the route and cluster it picked, dynamic metadata set by
// earlier filters).
type Request struct {
	Method string
	// Authority and Path are the :authority and :path pseudo-headers.
	Authority, Path string
	// Headers have lower-case names, in the order given.
	Headers [][2]string
	// Client is the downstream address, "ip" or "ip:port".
	Client         string
	Route, Cluster string
	Metadata       []Metadatum
}

// Metadatum is one dynamic metadata value: Path is dotted within
// Namespace.
type Metadatum struct {
	Namespace, Path, Value string
}

// Defaults of a described request, those of filtertest's requests.
const (
	defaultClient  = "10.0.0.1:40000"
	defaultRoute   = "default"
	defaultCluster = "backend"
	defaultHost    = "localhost"
)

// requestArgs are explain's arguments: the request and the options.
type requestArgs struct {
	config   string
	showKeys bool
	json     bool
	req      Request
}

// errHelp asks for the usage text.
var errHelp = errors.New("help")

// parseRequestArgs reads explain's command line: options anywhere, then
// [METHOD] URL. Options take their value as the next argument or after
// "=" (--client=10.0.0.1), and -H and --metadata repeat, as curl's do.
func parseRequestArgs(args []string) (requestArgs, error) {
	a := requestArgs{req: Request{Client: defaultClient, Route: defaultRoute, Cluster: defaultCluster}}
	var positional []string
	var host string
	for i := 0; i < len(args); i++ {
		arg := args[i]
		name, value, hasValue := arg, "", false
		if strings.HasPrefix(arg, "--") {
			name, value, hasValue = strings.Cut(arg, "=")
		}
		switch name {
		case "--show-keys", "--json", "-h", "--help":
			if hasValue {
				return a, fmt.Errorf("%s takes no value", name)
			}
			switch name {
			case "--show-keys":
				a.showKeys = true
			case "--json":
				a.json = true
			default:
				return a, errHelp
			}
			continue
		case "--config", "-X", "--request", "-H", "--header", "--client", "--route", "--cluster", "--metadata":
		default:
			if strings.HasPrefix(arg, "-") && arg != "-" {
				return a, fmt.Errorf("unknown option %s", name)
			}
			positional = append(positional, arg)
			continue
		}
		if !hasValue {
			if i+1 >= len(args) {
				return a, fmt.Errorf("%s needs a value", name)
			}
			i++
			value = args[i]
		}
		var err error
		switch name {
		case "--config":
			a.config = value
		case "-X", "--request":
			a.req.Method, err = method(value)
		case "-H", "--header":
			var h [2]string
			if h, err = header(value); err == nil {
				if h[0] == "host" {
					host = h[1] // curl's -H Host sets the authority
				} else {
					a.req.Headers = append(a.req.Headers, h)
				}
			}
		case "--client":
			a.req.Client = value
		case "--route":
			a.req.Route = value
		case "--cluster":
			a.req.Cluster = value
		case "--metadata":
			var m Metadatum
			if m, err = metadatum(value); err == nil {
				a.req.Metadata = append(a.req.Metadata, m)
			}
		}
		if err != nil {
			return a, fmt.Errorf("%s: %v", name, err)
		}
	}
	if a.config == "" {
		return a, errors.New("--config FILE is required")
	}
	switch len(positional) {
	case 1:
	case 2:
		if a.req.Method != "" {
			return a, errors.New("the method is given twice (-X and before the URL)")
		}
		var err error
		if a.req.Method, err = method(positional[0]); err != nil {
			return a, err
		}
		positional = positional[1:]
	default:
		return a, errors.New("want one URL, optionally after its method: [METHOD] URL")
	}
	if a.req.Method == "" {
		a.req.Method = "GET"
	}
	authority, path, err := splitURL(positional[0])
	if err != nil {
		return a, err
	}
	switch {
	case host != "":
		authority = host
	case authority == "":
		authority = defaultHost
	}
	a.req.Authority, a.req.Path = authority, path
	return a, nil
}

// method accepts an HTTP method token, upper-cased as Envoy sees it from
// HTTP/2 clients and as match conditions compare it.
func method(s string) (string, error) {
	if s == "" || !engine.IsHTTPToken(s) {
		return "", fmt.Errorf("invalid method %q", s)
	}
	return strings.ToUpper(s), nil
}

// header reads "Name: value" as curl's -H does; the name is lower-cased,
// as Envoy hands header names to filters.
func header(s string) ([2]string, error) {
	name, value, ok := strings.Cut(s, ":")
	if !ok || name == "" || !engine.IsHTTPToken(name) {
		return [2]string{}, fmt.Errorf(`want "Name: value", got %q`, s)
	}
	value = strings.Trim(value, " \t")
	if !engine.IsFieldValue(value) {
		return [2]string{}, fmt.Errorf("header %s: a value holds no control characters", name)
	}
	return [2]string{strings.ToLower(name), value}, nil
}

// metadatum reads namespace:path=value.
func metadatum(s string) (Metadatum, error) {
	ns, rest, ok1 := strings.Cut(s, ":")
	path, value, ok2 := strings.Cut(rest, "=")
	if !ok1 || !ok2 || ns == "" || path == "" || strings.HasPrefix(path, ".") || strings.HasSuffix(path, ".") || strings.Contains(path, "..") {
		return Metadatum{}, fmt.Errorf("want namespace:dotted.path=value, got %q", s)
	}
	return Metadatum{Namespace: ns, Path: path, Value: value}, nil
}

// splitURL takes the :authority and :path of an absolute URL
// (scheme://authority/path?query) or of a path ("/path?query"); a
// fragment is the client's and never sent.
func splitURL(url string) (authority, path string, err error) {
	u := url
	if i := strings.IndexByte(u, '#'); i >= 0 {
		u = u[:i]
	}
	if scheme, rest, ok := strings.Cut(u, "://"); ok && scheme != "" && engine.IsHTTPToken(scheme) {
		end := strings.IndexAny(rest, "/?")
		if end < 0 {
			end = len(rest)
		}
		authority, u = rest[:end], rest[end:]
		if authority == "" || strings.ContainsAny(authority, "@ ") {
			return "", "", fmt.Errorf("URL %q: want scheme://host[:port]/path", url)
		}
		if u == "" || u[0] == '?' {
			u = "/" + u
		}
	}
	if !strings.HasPrefix(u, "/") {
		return "", "", fmt.Errorf("URL %q: want http://host/path or /path", url)
	}
	for i := 0; i < len(u); i++ {
		if c := u[i]; c <= ' ' || c == 0x7f {
			return "", "", fmt.Errorf("URL %q: percent-encode spaces and control characters", url)
		}
	}
	return authority, u, nil
}

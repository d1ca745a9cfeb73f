package backend

import (
	"encoding/base64"
	"errors"
	"github.com/sluice-proxy/sluice/internal/enum"
	"strconv"
	"unicode/utf8"
)

// Protocol is how Redis commands travel over HTTP.
type Protocol uint8

const (
	// Webdis: one command per GET, arguments as percent-encoded path
	// segments, replies as {"COMMAND": value}.
	Webdis Protocol = iota
	// Upstash REST: POST of a JSON array of strings with a bearer token,
	// replies as {"result": value} or {"error": "…"}.
	Upstash
)

func (p Protocol) String() string {
	return enum.Name(p, "Protocol", "webdis", "upstash")
}

// Endpoint describes the HTTP service in front of Redis. The zero value
// is Webdis at path "/" with no authentication and an empty authority.
type Endpoint struct {
	Protocol Protocol
	// Authority is sent as :authority (the Envoy cluster's host name).
	Authority string
	// PathPrefix is prepended to every path; "" means "/". A missing
	// trailing slash is added for Webdis, whose command is a path segment.
	PathPrefix string
	// BasicAuth is "user:pass" for Webdis ACLs; "" sends no Authorization.
	BasicAuth string
	// Token is the Upstash bearer token; "" sends no Authorization.
	Token string
}

// Request is an HTTP call ready for proxy_http_call: Headers holds the
// pseudo-headers too.
type Request struct {
	Method  string
	Path    string
	Headers [][2]string
	Body    []byte
}

// ErrKeyEncoding says a key cannot be carried by the protocol: Upstash
// commands are JSON strings, which cannot hold invalid UTF-8 without
// merging distinct keys.
var ErrKeyEncoding = errors.New("backend: key is not valid UTF-8 and cannot be sent in a JSON command")

// EvalSHA encodes c as EVALSHA, the normal call.
func (e *Endpoint) EvalSHA(c Command) (Request, error) {
	return e.command(c, "EVALSHA", c.Script.SHA1)
}

// Eval encodes c as EVAL with the full script source, which needs no
// loaded script; it is the fallback when SCRIPT LOAD is not possible.
func (e *Endpoint) Eval(c Command) (Request, error) {
	return e.command(c, "EVAL", c.Script.Source)
}

// LoadScript encodes SCRIPT LOAD for s, the recovery from NOSCRIPT.
func (e *Endpoint) LoadScript(s *Script) Request {
	if e.Protocol == Upstash {
		body := []byte(`["SCRIPT","LOAD",`)
		body = appendJSONString(body, s.Source)
		body = append(body, ']')
		return e.post(body)
	}
	path := e.webdisPrefix()
	path = append(path, "SCRIPT/LOAD/"...)
	path = appendWebdisArg(path, s.Source)
	return e.get(path)
}

func (e *Endpoint) command(c Command, verb, script string) (Request, error) {
	if c.Script == nil {
		return Request{}, errors.New("backend: command has no script")
	}
	var num [20]byte
	if e.Protocol == Upstash {
		if !utf8.ValidString(c.Key) {
			return Request{}, ErrKeyEncoding
		}
		body := make([]byte, 0, 64+len(script)+len(c.Key)+c.NArgs*22)
		body = append(body, `["`...)
		body = append(body, verb...)
		body = append(body, `",`...)
		body = appendJSONString(body, script)
		body = append(body, `,"1",`...)
		body = appendJSONString(body, c.Key)
		for _, a := range c.Args[:c.NArgs] {
			body = append(body, `,"`...)
			body = append(body, strconv.AppendInt(num[:0], a, 10)...)
			body = append(body, '"')
		}
		body = append(body, ']')
		return e.post(body), nil
	}
	path := e.webdisPrefix()
	path = append(path, verb...)
	path = append(path, '/')
	path = appendWebdisArg(path, script)
	path = append(path, "/1/"...)
	path = appendWebdisArg(path, c.Key)
	for _, a := range c.Args[:c.NArgs] {
		path = append(path, '/')
		path = strconv.AppendInt(path, a, 10)
	}
	return e.get(path), nil
}

func (e *Endpoint) webdisPrefix() []byte {
	p := e.PathPrefix
	if p == "" {
		p = "/"
	}
	buf := make([]byte, 0, 256)
	if p[0] != '/' {
		buf = append(buf, '/')
	}
	buf = append(buf, p...)
	if buf[len(buf)-1] != '/' {
		buf = append(buf, '/')
	}
	return buf
}

func (e *Endpoint) get(pathBytes []byte) Request {
	path := string(pathBytes)
	h := make([][2]string, 0, 4)
	h = append(h, [2]string{":method", "GET"}, [2]string{":path", path}, [2]string{":authority", e.Authority})
	if e.BasicAuth != "" {
		h = append(h, [2]string{"authorization", "Basic " + base64.StdEncoding.EncodeToString([]byte(e.BasicAuth))})
	}
	return Request{Method: "GET", Path: path, Headers: h}
}

func (e *Endpoint) post(body []byte) Request {
	path := e.PathPrefix
	if path == "" {
		path = "/"
	} else if path[0] != '/' {
		path = "/" + path
	}
	h := make([][2]string, 0, 5)
	h = append(h, [2]string{":method", "POST"}, [2]string{":path", path}, [2]string{":authority", e.Authority},
		[2]string{"content-type", "application/json"})
	if e.Token != "" {
		h = append(h, [2]string{"authorization", "Bearer " + e.Token})
	}
	return Request{Method: "POST", Path: path, Headers: h, Body: body}
}

// appendWebdisArg percent-encodes s as one Webdis path segment. Webdis
// splits on '/', decodes '+' as a space, and treats a trailing ".ext" as
// an output format; so everything but letters, digits, '-', '_' and '~' is
// escaped, which covers '/', '+', '%', spaces and every '.'.
func appendWebdisArg(dst []byte, s string) []byte {
	const hex = "0123456789ABCDEF"
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '~' {
			dst = append(dst, c)
			continue
		}
		dst = append(dst, '%', hex[c>>4], hex[c&15])
	}
	return dst
}

// appendJSONString appends s (valid UTF-8) as a JSON string literal.
func appendJSONString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			dst = append(dst, '\\', c)
		case c == '\n':
			dst = append(dst, '\\', 'n')
		case c == '\t':
			dst = append(dst, '\\', 't')
		case c < 0x20 || c == 0x7f:
			dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&15])
		default:
			dst = append(dst, c)
		}
	}
	return append(dst, '"')
}

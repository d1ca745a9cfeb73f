// Package echo is the HTTP handler behind the echo-backend command, kept
// importable so tests can run the same backend in-process with httptest.
package echo

import (
	"encoding/json"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Reply is the JSON body the backend returns.
type Reply struct {
	Name    string              `json:"name"`
	Method  string              `json:"method"`
	Path    string              `json:"path"` // the raw request target, query included
	Host    string              `json:"host"`
	Headers map[string][]string `json:"headers"` // lower-case names
	Body    string              `json:"body"`
}

// maxDelay bounds /delay so a typo cannot hold a connection for hours.
const maxDelay = 5 * time.Minute

// Handler serves the echo endpoints; name is reported in every reply.
func Handler(name string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			http.Error(w, "reading body: "+err.Error(), http.StatusBadRequest)
			return
		}
		status := http.StatusOK
		switch {
		case strings.HasPrefix(r.URL.Path, "/status/"):
			code, err := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/status/"))
			if err != nil || code < 200 || code > 599 {
				http.Error(w, "status must be an integer in [200, 599]", http.StatusBadRequest)
				return
			}
			status = code
		case strings.HasPrefix(r.URL.Path, "/delay/"):
			d, err := parseDelay(strings.TrimPrefix(r.URL.Path, "/delay/"))
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-r.Context().Done():
				t.Stop()
				return
			}
		}
		// Echo-Response-Header plays an upstream that reports something
		// in its response headers, such as the tokens an LLM call used.
		var extra [][2]string
		for _, v := range r.Header.Values("Echo-Response-Header") {
			name, value, ok := strings.Cut(v, ":")
			name = strings.TrimSpace(name)
			if !ok || name == "" || strings.ContainsAny(name, " \t") {
				http.Error(w, "Echo-Response-Header must be <name>: <value>", http.StatusBadRequest)
				return
			}
			extra = append(extra, [2]string{name, strings.TrimSpace(value)})
		}
		reply := Reply{
			Name:    name,
			Method:  r.Method,
			Path:    r.RequestURI,
			Host:    r.Host,
			Headers: map[string][]string{},
			Body:    string(body),
		}
		keys := make([]string, 0, len(r.Header))
		for k := range r.Header {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			reply.Headers[strings.ToLower(k)] = r.Header[k]
		}
		out, _ := json.Marshal(reply) // only strings and string maps: cannot fail
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Echo-Name", name)
		for _, kv := range extra {
			w.Header().Add(kv[0], kv[1])
		}
		w.WriteHeader(status)
		if status != http.StatusNoContent && status != http.StatusNotModified {
			_, _ = w.Write(out)
		}
	})
}

type delayError string

func (e delayError) Error() string { return string(e) }

func parseDelay(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		secs, err2 := strconv.ParseFloat(s, 64)
		if err2 != nil {
			return 0, delayError("delay must be a duration like 250ms or a number of seconds")
		}
		d = time.Duration(secs * float64(time.Second))
	}
	if d < 0 || d > maxDelay {
		return 0, delayError("delay must be between 0 and 5m")
	}
	return d, nil
}

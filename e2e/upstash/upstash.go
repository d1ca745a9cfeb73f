// Package upstash is a small server speaking the Upstash Redis REST
// protocol over a real Redis, because no Upstash server can run here.
//
// Supported, as Upstash documents them:
//
//	POST /           body ["CMD", "arg", …]          → {"result": value}
//	POST /pipeline   body [["CMD", …], ["CMD", …]]   → [{"result": …}, {"error": …}]
//
// Every request needs "Authorization: Bearer <token>" (401 otherwise).
// A Redis error answers HTTP 400 with {"error": "<message>"}; Redis being
// unreachable answers 503 with {"error": …}; a malformed body answers 400.
// Numbers in a command may be JSON numbers or strings, as Upstash accepts.
package upstash

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"

	"github.com/redis/go-redis/v9"
)

// maxBody bounds a request body; scripts are a few KB.
const maxBody = 1 << 20

// Handler serves the protocol. Its zero value is unusable; use New.
type Handler struct {
	client *redis.Client
	token  string
}

// New returns a Handler sending commands to client and requiring token.
// A client with Protocol 2 (RESP2) gives the replies Upstash gives.
func New(client *redis.Client, token string) *Handler {
	return &Handler{client: client, token: token}
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer "+h.token {
		writeJSON(w, http.StatusUnauthorized, map[string]any{"error": "Unauthorized"})
		return
	}
	if r.Method != http.MethodPost {
		writeJSON(w, http.StatusMethodNotAllowed, map[string]any{"error": "only POST is supported"})
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil || len(body) > maxBody {
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": "cannot read body"})
		return
	}
	switch strings.TrimSuffix(r.URL.Path, "/") {
	case "":
		cmd, err := parseCommand(body)
		if err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]any{"error": err.Error()})
			return
		}
		status, reply := h.do(r.Context(), cmd)
		writeJSON(w, status, reply)
	case "/pipeline":
		var raw []json.RawMessage
		if err := json.Unmarshal(body, &raw); err != nil || len(raw) == 0 {
			writeJSON(w, http.StatusBadRequest, map[string]any{"error": "pipeline body must be a non-empty array of commands"})
			return
		}
		cmds := make([][]any, len(raw))
		for i, c := range raw {
			if cmds[i], err = parseCommand(c); err != nil {
				writeJSON(w, http.StatusBadRequest, map[string]any{"error": fmt.Sprintf("command %d: %v", i, err)})
				return
			}
		}
		replies := make([]map[string]any, len(cmds))
		for i, c := range cmds {
			status, reply := h.do(r.Context(), c)
			if status == http.StatusServiceUnavailable {
				writeJSON(w, status, reply)
				return
			}
			replies[i] = reply
		}
		writeJSON(w, http.StatusOK, replies)
	default:
		writeJSON(w, http.StatusNotFound, map[string]any{"error": "unknown path"})
	}
}

// parseCommand accepts a JSON array of strings and numbers.
func parseCommand(body []byte) ([]any, error) {
	var parts []any
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.UseNumber()
	if err := dec.Decode(&parts); err != nil {
		return nil, errors.New("body must be a JSON array")
	}
	if dec.More() {
		return nil, errors.New("trailing data after the command")
	}
	if len(parts) == 0 {
		return nil, errors.New("empty command")
	}
	for i, p := range parts {
		switch v := p.(type) {
		case string:
		case json.Number:
			parts[i] = v.String()
		default:
			return nil, fmt.Errorf("argument %d must be a string or number", i)
		}
	}
	return parts, nil
}

// do runs one command and returns the HTTP status and JSON envelope.
func (h *Handler) do(ctx context.Context, cmd []any) (int, map[string]any) {
	v, err := h.client.Do(ctx, cmd...).Result()
	switch {
	case errors.Is(err, redis.Nil):
		return http.StatusOK, map[string]any{"result": nil}
	case err != nil:
		var rerr redis.Error
		if errors.As(err, &rerr) {
			return http.StatusBadRequest, map[string]any{"error": rerr.Error()}
		}
		var nerr net.Error
		if errors.As(err, &nerr) || errors.Is(err, io.EOF) || strings.Contains(err.Error(), "connection refused") {
			return http.StatusServiceUnavailable, map[string]any{"error": "redis unavailable: " + err.Error()}
		}
		return http.StatusBadRequest, map[string]any{"error": err.Error()}
	}
	return http.StatusOK, map[string]any{"result": jsonable(v)}
}

// jsonable turns RESP3 shapes go-redis may return (maps with non-string
// keys, nested errors) into values encoding/json accepts, so a client
// using RESP3 cannot make the server answer 500.
func jsonable(v any) any {
	switch x := v.(type) {
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = jsonable(e)
		}
		return out
	case map[any]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[fmt.Sprint(k)] = jsonable(e)
		}
		return out
	case error:
		return x.Error()
	}
	return v
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b = []byte(`{"error":"cannot encode reply"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

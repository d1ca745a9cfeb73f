package envoy

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/sluice-proxy/sluice/e2e/host"
)

// adminHandler serves the admin endpoints the project relies on.
func (s *Server) adminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/ready", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=UTF-8")
		if !s.live.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, "PRE_INITIALIZING\n")
			return
		}
		io.WriteString(w, "LIVE\n")
	})
	mux.HandleFunc("/stats", func(w http.ResponseWriter, r *http.Request) {
		var re *regexp.Regexp
		if f := r.URL.Query().Get("filter"); f != "" {
			var err error
			if re, err = regexp.Compile(f); err != nil {
				http.Error(w, "Invalid re2 regex", http.StatusBadRequest)
				return
			}
		}
		w.Header().Set("Content-Type", "text/plain; charset=UTF-8")
		if s.rt == nil {
			return
		}
		if re == nil {
			s.rt.Stats().WriteText(w)
			return
		}
		// Like Envoy's ?filter=, the regex selects stats by name.
		var buf strings.Builder
		s.rt.Stats().WriteText(&buf)
		for _, line := range strings.SplitAfter(buf.String(), "\n") {
			name, _, _ := strings.Cut(line, ":")
			if line != "" && re.MatchString(name) {
				io.WriteString(w, line)
			}
		}
	})
	mux.HandleFunc("/stats/prometheus", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=UTF-8")
		if s.rt != nil {
			tags := make([]host.TagSpecifier, 0, len(s.cfg.StatsTags))
			for _, t := range s.cfg.StatsTags {
				tags = append(tags, host.TagSpecifier{Name: t.Name, Regex: t.Regex, FixedValue: t.FixedValue})
			}
			s.rt.Stats().WritePrometheus(w, tags)
		}
	})
	mux.HandleFunc("/listeners", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=UTF-8")
		for _, l := range s.cfg.Listeners {
			fmt.Fprintf(w, "%s::%s\n", l.Name, s.ListenerAddr(l.Name))
		}
	})
	mux.HandleFunc("/server_info", func(w http.ResponseWriter, r *http.Request) {
		state := "PRE_INITIALIZING"
		if s.live.Load() {
			state = "LIVE"
		}
		up := fmt.Sprintf("%ds", int64(time.Since(s.started).Seconds()))
		info := map[string]any{
			"version":             Version,
			"state":               state,
			"hot_restart_version": "disabled",
			"command_line_options": map[string]any{
				"concurrency":  s.opts.Concurrency,
				"config_path":  s.opts.ConfigPath,
				"log_level":    s.log.level.String(),
				"wasm_profile": string(s.rtProfile()),
			},
			"uptime_current_epoch": up,
			"uptime_all_epochs":    up,
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", " ")
		_ = enc.Encode(info)
	})
	mux.HandleFunc("/quitquitquit", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			// Envoy only performs mutating admin actions on POST.
			w.WriteHeader(http.StatusMethodNotAllowed)
			io.WriteString(w, "This endpoint requires POST\n")
			return
		}
		io.WriteString(w, "OK\n")
		s.quitOnce.Do(func() {
			s.log.Logf(LevelInfo, "main", "caught admin /quitquitquit")
			close(s.quit)
		})
	})
	return mux
}

func (s *Server) rtProfile() host.Profile {
	if s.rt != nil {
		return s.rt.Profile()
	}
	return s.opts.Profile
}

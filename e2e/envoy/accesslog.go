package envoy

// The HTTP connection manager's access_log, as Envoy's file access logger
// (envoy.access_loggers.file) writes it, for the command operators the
// filter's operators use. Simplified, and refused at load time with the
// field's path where a config asks for more:
//   - one logger type, the file logger; no access log filters;
//   - text formats only (log_format.text_format_source.inline_string,
//     log_format.text_format, or the deprecated format), no JSON and no
//     default format: the format is required;
//   - the operators listed in accessLogOperators, without a length limit;
//     FILTER_STATE only with :PLAIN;
//   - one line per request, written when its response is complete; a
//     value that is absent prints "-", as Envoy prints it.

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	filev3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/file/v3"

	"github.com/sluice-proxy/sluice/e2e/host"
)

// FileAccessLogName is the file access logger's extension name.
const FileAccessLogName = "envoy.access_loggers.file"

// AccessLog is one access_log entry of the HCM: a file and a format.
type AccessLog struct {
	Path   string
	format []logPart
}

// logEntry is what one request's line is made of.
type logEntry struct {
	start    time.Time
	duration time.Duration
	req      *host.Request
	resp     *host.Response
}

// logPart is a literal (op == "") or one command operator with its
// argument.
type logPart struct {
	literal string
	op, arg string
}

// accessLogOperators are the command operators the stand-in writes, each
// as Envoy does.
var accessLogOperators = map[string]func(e *logEntry, arg string) (string, bool){
	"REQ": func(e *logEntry, arg string) (string, bool) {
		for _, name := range strings.SplitN(arg, "?", 2) {
			if v, ok := joinedHeader(e.req.Headers, strings.ToLower(name)); ok {
				return v, true
			}
		}
		return "", false
	},
	"RESP": func(e *logEntry, arg string) (string, bool) {
		return joinedHeader(e.resp.Headers, strings.ToLower(arg))
	},
	"RESPONSE_CODE": func(e *logEntry, _ string) (string, bool) {
		return strconv.Itoa(e.resp.Status), true
	},
	"RESPONSE_CODE_DETAILS": func(e *logEntry, _ string) (string, bool) {
		return e.resp.Details, e.resp.Details != ""
	},
	"FILTER_STATE": func(e *logEntry, arg string) (string, bool) {
		v, ok := e.resp.FilterState[arg] // the name, its :PLAIN cut at load
		return v, ok
	},
	"PROTOCOL": func(*logEntry, string) (string, bool) { return "HTTP/1.1", true },
	"DURATION": func(e *logEntry, _ string) (string, bool) {
		return strconv.FormatInt(e.duration.Milliseconds(), 10), true
	},
	"ROUTE_NAME":                func(e *logEntry, _ string) (string, bool) { return e.req.RouteName, e.req.RouteName != "" },
	"UPSTREAM_CLUSTER":          func(e *logEntry, _ string) (string, bool) { return e.req.ClusterName, e.req.ClusterName != "" },
	"DOWNSTREAM_REMOTE_ADDRESS": func(e *logEntry, _ string) (string, bool) { return e.req.SourceAddress, e.req.SourceAddress != "" },
	"START_TIME": func(e *logEntry, _ string) (string, bool) {
		return e.start.UTC().Format("2006-01-02T15:04:05.000Z"), true
	},
}

// buildAccessLogs reads the HCM's access_log entries at path.
func buildAccessLogs(entries []*accesslogv3.AccessLog, path string) ([]*AccessLog, error) {
	var out []*AccessLog
	for i, e := range entries {
		epath := fmt.Sprintf("%s[%d]", path, i)
		fal := &filev3.FileAccessLog{}
		tc := e.GetTypedConfig()
		if tc == nil || !tc.MessageIs(fal) {
			return nil, &fieldError{Path: epath + ".typed_config", Msg: fmt.Sprintf("access logger type %s is not supported (only %s)", tc.GetTypeUrl(), FileAccessLogName)}
		}
		if err := tc.UnmarshalTo(fal); err != nil {
			return nil, &fieldError{Path: epath + ".typed_config", Msg: err.Error()}
		}
		tpath := epath + ".typed_config"
		if fal.GetPath() == "" {
			return nil, &fieldError{Path: tpath + ".path", Msg: "path is required"}
		}
		text, fpath := fal.GetFormat(), tpath+".format"
		if lf := fal.GetLogFormat(); lf != nil {
			fpath = tpath + ".log_format"
			switch {
			case lf.GetTextFormatSource() != nil:
				src := lf.GetTextFormatSource()
				if src.GetFilename() != "" || src.GetInlineBytes() != nil {
					return nil, &fieldError{Path: fpath + ".text_format_source", Msg: "only inline_string is supported by the stand-in"}
				}
				text, fpath = src.GetInlineString(), fpath+".text_format_source.inline_string"
			case lf.GetTextFormat() != "":
				text, fpath = lf.GetTextFormat(), fpath+".text_format"
			default:
				return nil, &fieldError{Path: fpath, Msg: "only a text format (text_format_source.inline_string or text_format) is supported by the stand-in"}
			}
		}
		if text == "" {
			return nil, &fieldError{Path: fpath, Msg: "a format is required: the stand-in has no default format"}
		}
		parts, err := parseLogFormat(text)
		if err != nil {
			return nil, &fieldError{Path: fpath, Msg: err.Error()}
		}
		out = append(out, &AccessLog{Path: fal.GetPath(), format: parts})
	}
	return out, nil
}

// parseLogFormat splits an access log format into literals and command
// operators: %NAME% or %NAME(ARG)%.
func parseLogFormat(text string) ([]logPart, error) {
	var parts []logPart
	for len(text) > 0 {
		i := strings.IndexByte(text, '%')
		if i < 0 {
			parts = append(parts, logPart{literal: text})
			break
		}
		if i > 0 {
			parts = append(parts, logPart{literal: text[:i]})
		}
		text = text[i+1:]
		j := strings.IndexByte(text, '%')
		if j < 0 {
			return nil, fmt.Errorf("a command operator is not closed with %%: %q", "%"+text)
		}
		op, arg := text[:j], ""
		if k := strings.IndexByte(op, '('); k >= 0 {
			if !strings.HasSuffix(op, ")") {
				return nil, fmt.Errorf("command operator %q: want NAME(ARG) with no length limit", op)
			}
			op, arg = op[:k], op[k+1:len(op)-1]
		}
		if _, ok := accessLogOperators[op]; !ok {
			return nil, fmt.Errorf("command operator %%%s%% is not supported by the stand-in", op)
		}
		if op == "FILTER_STATE" {
			name, plain := strings.CutSuffix(arg, ":PLAIN")
			if !plain {
				return nil, fmt.Errorf("%%FILTER_STATE(%s)%%: the stand-in writes filter state only as :PLAIN", arg)
			}
			arg = name
		}
		parts = append(parts, logPart{op: op, arg: arg})
		text = text[j+1:]
	}
	return parts, nil
}

// line is the access log line of e.
func (a *AccessLog) line(e *logEntry) string {
	var b strings.Builder
	for _, p := range a.format {
		if p.op == "" {
			b.WriteString(p.literal)
			continue
		}
		v, ok := accessLogOperators[p.op](e, p.arg)
		if !ok {
			v = "-"
		}
		b.WriteString(v)
	}
	return b.String()
}

// accessLogFiles are the files access logs write to, opened once each and
// shared by the listeners that name them, as Envoy's access log manager
// shares them.
type accessLogFiles struct {
	mu    sync.Mutex
	files map[string]*os.File
}

func (f *accessLogFiles) write(path, line string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	file := f.files[path]
	if file == nil {
		var err error
		if file, err = os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644); err != nil {
			return err
		}
		if f.files == nil {
			f.files = map[string]*os.File{}
		}
		f.files[path] = file
	}
	_, err := file.WriteString(line)
	return err
}

func (f *accessLogFiles) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, file := range f.files {
		_ = file.Close()
	}
	f.files = nil
}

package ops

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/sluice-proxy/sluice/filter/config"
)

// CheckReport is check's answer: every configuration found, every error
// and every warning. Its JSON is check --json's output; fields are only
// ever added.
type CheckReport struct {
	Configs []ConfigRef `json:"configs"`
	Errors  []Finding   `json:"errors"`
	// Unlisted counts the errors past the first config.MaxErrors of a
	// configuration, which Errors does not list.
	Unlisted int       `json:"unlisted,omitempty"`
	Warnings []Finding `json:"warnings"`
}

// ConfigRef is where a plugin configuration sits: a JSON file (Line 0),
// or a node of a YAML file (its first line and its path in the document).
type ConfigRef struct {
	File     string `json:"file"`
	Line     int    `json:"line,omitempty"`
	YAMLPath string `json:"yaml_path,omitempty"`
}

// Finding is one error or warning. Path is the JSON path in the plugin
// configuration ("limits[1].burst"), empty for the configuration as a
// whole or a file-level problem; Code names a warning's kind.
type Finding struct {
	ConfigRef
	Code    string `json:"code,omitempty"`
	Path    string `json:"path"`
	Message string `json:"message"`
}

// Warning codes.
const (
	warnXFF          = "xff_without_use_remote_address"
	warnNeverMatches = "never_matches"
	warnFailOpen     = "fail_open_replaces"
	warnPeer         = "peer_without_use_remote_address"
	warnAdmin        = "admin_without_use_remote_address"
	warnGrpcHTTP1    = "grpc_cluster_without_http2"
)

// Check checks the plugin configurations in data, the content of file:
// a JSON plugin configuration (a file named *.json, or any opening with
// "{"; an empty one is valid, as Envoy passes it), or Envoy or Istio YAML
// holding Sluice filters.
func Check(file string, data []byte) CheckReport {
	r := CheckReport{Configs: []ConfigRef{}, Errors: []Finding{}, Warnings: []Finding{}}
	var found []pluginConfig
	if isJSON(file, data) {
		found = []pluginConfig{{File: file, Config: string(data)}}
	} else {
		var problems []Finding
		var err error
		if found, problems, err = findPluginConfigs(file, data); err != nil {
			r.Errors = append(r.Errors, Finding{ConfigRef: ConfigRef{File: file}, Message: err.Error()})
			return r
		}
		r.Errors = append(r.Errors, problems...)
		if len(found) == 0 && len(problems) == 0 {
			r.Errors = append(r.Errors, Finding{ConfigRef: ConfigRef{File: file},
				Message: "no Sluice filter found (a wasm filter named sluice, with root_id or vm_id sluice, or code whose file name or URL says sluice; or an Istio WasmPlugin)"})
			return r
		}
	}
	for _, pc := range found {
		ref := ConfigRef{File: pc.File, Line: pc.Line, YAMLPath: pc.YAMLPath}
		r.Configs = append(r.Configs, ref)
		if pc.Err != "" {
			r.Errors = append(r.Errors, Finding{ConfigRef: ref, Message: pc.Err})
			continue
		}
		hcm := pc.HCM
		if hcm != nil && hcm.Err != "" {
			// The connection manager is refused: nothing is known of it.
			r.Errors = append(r.Errors, Finding{ConfigRef: ref, Message: "the HTTP connection manager at " + hcm.File + hcm.Err})
			hcm = nil
		}
		cfg, err := config.Parse([]byte(pc.Config))
		if err != nil {
			var errs config.Errors
			if !errors.As(err, &errs) {
				errs = config.Errors{{Message: err.Error()}}
			}
			for _, e := range errs {
				if e.Unlisted > 0 {
					r.Unlisted += e.Unlisted
					continue
				}
				r.Errors = append(r.Errors, Finding{ConfigRef: ref, Path: e.Path, Message: e.Message})
			}
			continue
		}
		for _, w := range append(warnings(cfg, hcm), grpcClusterWarning(cfg, pc.Clusters)...) {
			w.ConfigRef = ref
			r.Warnings = append(r.Warnings, w)
		}
	}
	return r
}

func runCheck(args []string, stdout, stderr io.Writer) int {
	asJSON := false
	var files []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--json":
			asJSON = true
		case a == "-h" || a == "--help":
			fmt.Fprintln(stderr, checkUsage)
			return exitOK
		case a == "--":
			files = append(files, args[i+1:]...)
			i = len(args)
		case strings.HasPrefix(a, "-") && a != "-":
			fmt.Fprintf(stderr, "sluicectl check: unknown option %s\n%s\n", a, checkUsage)
			return exitUsage
		default:
			files = append(files, a)
		}
	}
	if len(files) == 0 {
		fmt.Fprintf(stderr, "sluicectl check: no FILE given\n%s\n", checkUsage)
		return exitUsage
	}
	all := CheckReport{Configs: []ConfigRef{}, Errors: []Finding{}, Warnings: []Finding{}}
	unreadable := false
	for _, f := range files {
		data, err := readRegular(f)
		if err != nil {
			fmt.Fprintf(stderr, "sluicectl check: %v\n", err)
			unreadable = true
			continue
		}
		r := Check(f, data)
		all.Configs = append(all.Configs, r.Configs...)
		all.Errors = append(all.Errors, r.Errors...)
		all.Unlisted += r.Unlisted
		all.Warnings = append(all.Warnings, r.Warnings...)
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(all)
	} else {
		for _, e := range all.Errors {
			fmt.Fprintf(stdout, "%s: error: %s\n", e.where(), e.text())
		}
		if all.Unlisted > 0 {
			fmt.Fprintf(stdout, "and %d more error(s), not listed\n", all.Unlisted)
		}
		for _, w := range all.Warnings {
			fmt.Fprintf(stdout, "%s: warning: %s [%s]\n", w.where(), w.text(), w.Code)
		}
		fmt.Fprintf(stdout, "%d configuration(s) checked: %d error(s), %d warning(s)\n", len(all.Configs), len(all.Errors)+all.Unlisted, len(all.Warnings))
	}
	switch {
	case unreadable:
		return exitUsage
	case len(all.Errors) > 0:
		return exitProblems
	}
	return exitOK
}

const checkUsage = `usage: sluicectl check [--json] FILE...
FILE is a plugin config JSON, Envoy YAML (every Sluice filter inside, and
the ECDS files they name), an ECDS file, or an Istio WasmPlugin.
Exit status: 0 no errors (warnings allowed), 1 errors, 2 usage or unreadable file.`

// where is the finding's place: file[:line] and, in YAML, the node's path.
func (f Finding) where() string {
	s := pluginConfig{File: f.File, Line: f.Line}.location()
	if f.YAMLPath != "" {
		s += " (" + f.YAMLPath + ")"
	}
	return s
}

func (f Finding) text() string {
	if f.Path == "" {
		return f.Message
	}
	return f.Path + ": " + f.Message
}

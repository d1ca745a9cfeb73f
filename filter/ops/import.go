package ops

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/sluice-proxy/sluice/filter/ops/importer"
)

// ImportReport is import --json's output: the configuration and every
// finding. Fields are only ever added.
type ImportReport struct {
	Config   json.RawMessage    `json:"config"`
	Findings []importer.Finding `json:"findings"`
	Errors   []importer.Finding `json:"errors"`
}

func runImport(args []string, stdout, stderr io.Writer) int {
	var opt importer.Options
	asJSON := false
	var files []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		name, value, hasValue := strings.Cut(a, "=")
		switch {
		case a == "-h" || a == "--help":
			fmt.Fprintln(stderr, importUsage)
			return exitOK
		case a == "--json":
			asJSON = true
		case name == "--domain" || name == "--backend-cluster":
			if !hasValue {
				if i+1 >= len(args) {
					fmt.Fprintf(stderr, "sluicectl import: %s needs a value\n%s\n", name, importUsage)
					return exitUsage
				}
				i++
				value = args[i]
			}
			if name == "--domain" {
				opt.Domain = value
			} else {
				opt.BackendCluster = value
			}
		case a == "--":
			files = append(files, args[i+1:]...)
			i = len(args)
		case strings.HasPrefix(a, "-"):
			fmt.Fprintf(stderr, "sluicectl import: unknown option %s\n%s\n", a, importUsage)
			return exitUsage
		default:
			files = append(files, a)
		}
	}
	if len(files) == 0 {
		fmt.Fprintf(stderr, "sluicectl import: no FILE given\n%s\n", importUsage)
		return exitUsage
	}
	var inputs []importer.Input
	for _, f := range files {
		data, err := readRegular(f)
		if err != nil {
			fmt.Fprintf(stderr, "sluicectl import: %v\n", err)
			return exitUsage
		}
		inputs = append(inputs, importer.Input{Name: f, Data: data})
	}
	res := importer.Import(inputs, opt)
	if asJSON {
		rep := ImportReport{Config: res.Config, Findings: res.Findings, Errors: res.Errors}
		if rep.Config == nil {
			rep.Config = json.RawMessage("null")
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(rep)
	} else {
		_, _ = stdout.Write(res.Config)
		for _, e := range res.Errors {
			fmt.Fprintln(stderr, "error: "+e.String())
		}
		for _, f := range res.Findings {
			fmt.Fprintln(stderr, f)
		}
		fmt.Fprintf(stderr, "sluicectl import: %d error(s), %d construct(s) not imported exactly\n", len(res.Errors), len(res.Findings))
	}
	if len(res.Errors) > 0 || len(res.Findings) > 0 {
		return exitProblems
	}
	return exitOK
}

const importUsage = `usage: sluicectl import [--json] [--domain D] [--backend-cluster C] FILE...
FILE is an envoyproxy/ratelimit config (a YAML document with a domain) or
Envoy YAML holding route and virtual-host rate_limits, the ratelimit
filter or the local_ratelimit filter; give the ratelimit configs and the
Envoy config together. The Sluice plugin config goes to stdout, every
construct not imported exactly to stderr, with its file and YAML path
(--json: one document with both).
--domain D            the ratelimit domain, when no ratelimit filter names one
--backend-cluster C   import ratelimit limits as mode global through Redis
                      behind Envoy cluster C (default: local to each Envoy)
Exit status: 0 imported exactly, 1 errors or inexact constructs (the
config is still written when there are no errors), 2 usage or unreadable file.`

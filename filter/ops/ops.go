// Package ops is sluicectl: checking configs, explaining requests,
// importing Envoy's rate limiting (package importer) and reading or
// resetting quotas, with the filter's own parser, engine, key
// derivation and Redis scripts, never a re-implementation of them. It has
// no proxy-wasm dependency.
package ops

import (
	"fmt"
	"io"
)

// command is one sluicectl subcommand: it parses its own flags and returns
// the process's exit code.
type command struct {
	summary string
	run     func(args []string, stdout, stderr io.Writer) int
}

// commands is every subcommand, by name. Each lives in the file named
// after it.
var commands = map[string]command{
	"check":   {"validate plugin configs or Envoy YAML", runCheck},
	"explain": {"show what the filter would do with a request", runExplain},
	"import":  {"convert Envoy ratelimit and local_ratelimit configs", runImport},
	"quota":   {"get or reset a key's quota", runQuota},
}

// Exit codes: 0 success, 1 the command's answer is negative (a config with
// errors), 2 the command could not run (bad usage, unreachable server).
const (
	exitOK       = 0
	exitProblems = 1
	exitUsage    = 2
)

// Main runs sluicectl with the arguments after the program name.
func Main(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "sluicectl: unknown command %q\n", args[0])
		usage(stderr)
		return exitUsage
	}
	return cmd.run(args[1:], stdout, stderr)
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: sluicectl <command> [arguments]")
	for _, name := range []string{"check", "explain", "import", "quota"} {
		fmt.Fprintf(w, "  %-8s %s\n", name, commands[name].summary)
	}
}

// Command sluicectl is the operator's tool: it checks configs, explains
// what the filter would do with a request, and reads or resets quotas.
// The work is in filter/ops; this main only hands it the process's
// arguments and streams.
package main

import (
	"os"

	"github.com/sluice-proxy/sluice/filter/ops"
)

func main() { os.Exit(ops.Main(os.Args[1:], os.Stdout, os.Stderr)) }

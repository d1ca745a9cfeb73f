package ops

import (
	"fmt"
	"io"
)

func runQuota(args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "sluicectl quota: not built yet")
	return exitUsage
}

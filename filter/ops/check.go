package ops

import (
	"fmt"
	"io"
)

func runCheck(args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "sluicectl check: not built yet")
	return exitUsage
}

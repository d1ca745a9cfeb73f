package ops

import (
	"fmt"
	"io"
)

func runExplain(args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "sluicectl explain: not built yet")
	return exitUsage
}

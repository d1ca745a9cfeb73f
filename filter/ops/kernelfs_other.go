//go:build !linux

package ops

import "os"

// kernelFS: only Linux has procfs and sysfs among the systems sluicectl
// is built for.
func kernelFS(*os.File) string { return "" }

//go:build unix && !linux

package ops

import "testing"

// kernelFileRefusals: procfs and sysfs are Linux's.
func kernelFileRefusals(*testing.T, string) []refusal { return nil }

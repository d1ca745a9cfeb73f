package ops

import (
	"os"
	"path/filepath"
	"testing"
)

// kernelFileRefusals are the /proc files sluicectl refuses although they
// stat as regular: named directly, through a symbolic link, or by a
// config_discovery.
func kernelFileRefusals(t *testing.T, dir string) []refusal {
	link := filepath.Join(dir, "status.yaml")
	if err := os.Symlink("/proc/self/status", link); err != nil {
		t.Fatal(err)
	}
	const kernel = "a file of the kernel's procfs, not a configuration file"
	return []refusal{
		{[]string{"check", "/proc/self/status"}, "2", "/proc/self/status: " + kernel},
		{[]string{"check", "/proc/self/environ"}, "2", kernel},
		{[]string{"check", link}, "2", kernel},
		{[]string{"check", ecdsNaming(t, t.TempDir(), "/proc/self/status")}, "1", "cannot read the ECDS file"},
		{[]string{"explain", "--config", "/proc/self/status", "/"}, "2", kernel},
	}
}

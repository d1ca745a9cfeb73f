package ops

import (
	"os"
	"syscall"
)

// kernelFS names the file system of f when the kernel makes up its
// files as they are read (procfs, sysfs), and is "" otherwise.
func kernelFS(f *os.File) string {
	var st syscall.Statfs_t
	if syscall.Fstatfs(int(f.Fd()), &st) != nil {
		return ""
	}
	switch st.Type {
	case 0x9fa0: // PROC_SUPER_MAGIC
		return "procfs"
	case 0x62656572: // SYSFS_MAGIC
		return "sysfs"
	}
	return ""
}

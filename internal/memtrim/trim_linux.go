package memtrim

import (
	"fmt"
	"runtime/debug"

	"golang.org/x/sys/unix"
)

// Trim returns the heap's free pages to the kernel and drops this process's
// mappings of its executable's read-only segments (code and constant data:
// never written, so nothing is lost; the page cache still holds them).
func Trim() {
	debug.FreeOSMemory()
	for _, r := range readOnlyMappings(self()) {
		// By address: these pages are no Go object, so no slice may point there.
		unix.Syscall(unix.SYS_MADVISE, r[0], r[1]-r[0], unix.MADV_DONTNEED)
	}
}

// self names this process's executable as /proc/self/maps does, by device
// and inode: inside a sandbox its path may lie outside the mount
// namespace's root, and read differently.
func self() string {
	var st unix.Stat_t
	if err := unix.Stat("/proc/self/exe", &st); err != nil {
		return ""
	}
	return fmt.Sprintf("%02x:%02x %d", unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino)
}

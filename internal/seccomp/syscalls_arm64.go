package seccomp

import "golang.org/x/sys/unix"

const auditArch = unix.AUDIT_ARCH_AARCH64

// archPrologue has nothing to add on arm64 (no x32-style alternate ABI).
func archPrologue(*program) {}

// archDenied is empty: arm64 never had the legacy calls (iopl, sysfs, ...).
var archDenied []namedSyscall

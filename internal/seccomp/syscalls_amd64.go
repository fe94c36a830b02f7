package seccomp

import "golang.org/x/sys/unix"

const auditArch = unix.AUDIT_ARCH_X86_64

// x32Bit marks x32-ABI syscall numbers, which share AUDIT_ARCH_X86_64.
const x32Bit = 0x40000000

// archPrologue refuses the x32 ABI; expects the syscall number in A.
func archPrologue(p *program) {
	p.when(jge, x32Bit, deny)
}

// archDenied are x86_64-only syscalls (legacy or port I/O); vm86, vm86old and
// umount only exist for i386, which the arch check already refuses.
var archDenied = []namedSyscall{
	{"iopl", unix.SYS_IOPL},
	{"ioperm", unix.SYS_IOPERM},
	{"create_module", unix.SYS_CREATE_MODULE},
	{"query_module", unix.SYS_QUERY_MODULE},
	{"get_kernel_syms", unix.SYS_GET_KERNEL_SYMS},
	{"_sysctl", unix.SYS__SYSCTL},
	{"sysfs", unix.SYS_SYSFS},
	{"uselib", unix.SYS_USELIB},
	{"ustat", unix.SYS_USTAT},
}

package seccomp

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// archProbes check that the other ABIs sharing an x86_64 process are refused.
var archProbes = []probe{
	// x32 is not configured on most kernels (ENOSYS without the filter).
	{"x32 getpid", unix.EPERM, sys(x32Bit | unix.SYS_GETPID)},
	{"i386 getpid via int 0x80", unix.EPERM, int80Getpid},
}

// int80Getpid makes the i386 getpid syscall (20) through int 0x80 from a few
// bytes of machine code, since Go has no way to issue it directly.
func int80Getpid() unix.Errno {
	code := []byte{
		0xb8, 20, 0, 0, 0, // mov eax, 20
		0xcd, 0x80, // int 0x80
		0xc3, // ret (result in rax, where Go's ABI expects it)
	}
	mem, err := unix.Mmap(-1, 0, unix.Getpagesize(), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return errno(err)
	}
	copy(mem, code)
	if err := unix.Mprotect(mem, unix.PROT_READ|unix.PROT_EXEC); err != nil {
		return errno(err)
	}
	// A Go func value points to a word holding the code address.
	entry := &mem[0]
	funcval := unsafe.Pointer(&entry)
	call := *(*func() uintptr)(unsafe.Pointer(&funcval))
	if r := int32(call()); r < 0 {
		return unix.Errno(-r)
	}
	return 0
}

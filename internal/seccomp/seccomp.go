// Package seccomp builds and installs airlock's sandbox syscall filter (classic BPF, no cgo).
package seccomp

import (
	"fmt"
	"runtime"
	"sort"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Install sets no_new_privs and loads the filter into every thread of the calling process
// (seccomp(2) with SECCOMP_FILTER_FLAG_TSYNC). Errors name the failed step.
//
// The filter is inherited across fork and execve and cannot be removed, so every
// process started afterwards runs under it.
func Install() error {
	prog, err := Program()
	if err != nil {
		return fmt.Errorf("seccomp: build filter: %w", err)
	}

	// no_new_privs is per thread and an unprivileged seccomp(2) checks it on
	// the calling thread, so both calls must run on the same OS thread. TSYNC
	// then copies the filter and no_new_privs to every other thread.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("seccomp: set no_new_privs: %w", err)
	}

	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	tid, _, errno := unix.Syscall(unix.SYS_SECCOMP,
		unix.SECCOMP_SET_MODE_FILTER,
		unix.SECCOMP_FILTER_FLAG_TSYNC,
		uintptr(unsafe.Pointer(&fprog)))
	runtime.KeepAlive(prog)
	if errno != 0 {
		return fmt.Errorf("seccomp: load filter: %w", errno)
	}
	if tid != 0 {
		// With TSYNC a positive return is the ID of a thread that could not
		// be synchronized (it already runs an unrelated filter).
		return fmt.Errorf("seccomp: load filter: thread %d could not be synchronized", tid)
	}
	return nil
}

// Program returns the filter as classic BPF instructions (for tests and `airlock doctor`).
func Program() ([]unix.SockFilter, error) {
	return build()
}

// Denied lists the syscall names the filter refuses unconditionally (for docs/doctor).
func Denied() []string {
	var names []string
	for _, s := range deniedSyscalls() {
		names = append(names, s.name)
	}
	sort.Strings(names)
	return names
}

package native

import (
	"fmt"
	"os"
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The spawner: on amd64 the guest is started by clone3 with CLONE_VM and
// CLONE_VFORK beside its namespace flags. Go's own fork (syscall.forkExec)
// does not share memory with a child that gets a new user namespace, so it
// copies the supervisor's page tables and both sides then pay copy-on-write
// faults (0.4-1.2 ms); here the parent thread just waits for the exec.
//
// The child runs no Go code: spawn_linux_amd64.s, system calls reading a
// spawnBlock prepared here. It cannot wait for its id maps (the parent is
// suspended until it execs), so the caller writes them after spawn returns,
// and the guest takes the ids it is to run as once they exist (see
// guest.IDsFlag).

// spawnBlock is what the child reads, and the only memory it writes
// (step, errno, old). The assembly names its fields (go_asm.h).
type spawnBlock struct {
	path    unsafe.Pointer // *byte
	argv    unsafe.Pointer // **byte, nil-terminated
	envp    unsafe.Pointer // **byte, nil-terminated
	nfds    int64          // fds[i] becomes descriptor i, for i < nfds
	fds     [maxSpawnFDs]int64
	nofile  [2]uint64 // soft and hard RLIMIT_NOFILE to exec with; soft 0: as it is
	lastCap int64
	mask    uint64 // the signal mask to exec with
	capHdr  unix.CapUserHeader
	capData [2]unix.CapUserData
	dfl     [4]uint64 // a struct sigaction for SIG_DFL
	old     [4]uint64 // the child's scratch
	step    int64     // the step that failed, 0 if none did
	errno   uint64
}

const maxSpawnFDs = 8

// spawnSteps names the child's steps, by the number it stores on failure.
var spawnSteps = [...]string{1: "set parent death signal", 2: "dup3", 3: "restore RLIMIT_NOFILE", 4: "capset", 5: "raise ambient capability", 6: "restore signal mask", 7: "fork/exec"}

// cloneArgs is the kernel's struct clone_args (version 2, with cgroup).
type cloneArgs struct {
	flags, pidfd, childTID, parentTID, exitSignal, stack, stackSize, tls, setTID, setTIDSize, cgroup uint64
}

//go:noescape
func clone3(args *cloneArgs, size uintptr, b *spawnBlock) (pid uintptr, errno uintptr)

// spawn starts a.Path in new namespaces, with every capability of its user
// namespace kept across exec (ambient), all signal handlers at their
// defaults, and SIGKILL as its parent death signal: the calling thread must
// be locked (runtime.LockOSThread) and stay alive while the child should.
// It returns once the child has called execve; its errors are errnos, the
// exec's an *os.PathError as os/exec gives. ENOSYS: no clone3 here.
func spawn(a *spawnAttr) (int, error) {
	if len(a.Files) > maxSpawnFDs {
		return 0, fmt.Errorf("spawn: %d descriptors, at most %d", len(a.Files), maxSpawnFDs)
	}
	path, err := syscall.BytePtrFromString(a.Path)
	if err != nil {
		return 0, err
	}
	argv, err := syscall.SlicePtrFromStrings(a.Argv)
	if err != nil {
		return 0, err
	}
	envp, err := syscall.SlicePtrFromStrings(a.Env)
	if err != nil {
		return 0, err
	}
	b := &spawnBlock{path: unsafe.Pointer(path), argv: unsafe.Pointer(&argv[0]), envp: unsafe.Pointer(&envp[0]), nfds: int64(len(a.Files))}
	// Each source must lie above every target, so that no dup3 replaces
	// a source still to be read; copies are closed on return (CLOEXEC in
	// the child).
	n := len(a.Files)
	for i, fd := range a.Files {
		if fd < n {
			c, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, n)
			if err != nil {
				return 0, err
			}
			defer unix.Close(c)
			fd = c
		}
		b.fds[i] = int64(fd)
	}
	last := a.LastCap
	b.lastCap = int64(last)
	b.capHdr.Version = unix.LINUX_CAPABILITY_VERSION_3
	for c := 0; c <= last; c++ {
		b.capData[c/32].Effective |= 1 << (c % 32)
	}
	for i := range b.capData {
		b.capData[i].Permitted, b.capData[i].Inheritable = b.capData[i].Effective, b.capData[i].Effective
	}
	stack := make([]uint64, 512)
	args := &cloneArgs{
		flags:      a.Flags | unix.CLONE_VM | unix.CLONE_VFORK,
		exitSignal: uint64(syscall.SIGCHLD),
		stack:      uint64(uintptr(unsafe.Pointer(&stack[0]))),
		stackSize:  uint64(len(stack) * 8),
	}
	if a.Cgroup >= 0 {
		args.flags |= unix.CLONE_INTO_CGROUP
		args.cgroup = uint64(a.Cgroup)
	}
	// No descriptor may be made without CLOEXEC while the fd table is
	// copied (see syscall.ForkLock); and the child starts with every
	// signal blocked, until it has reset their handlers.
	syscall.ForkLock.Lock()
	all := ^uint64(0)
	if _, _, e := unix.RawSyscall6(unix.SYS_RT_SIGPROCMASK, unix.SIG_SETMASK, uintptr(unsafe.Pointer(&all)), uintptr(unsafe.Pointer(&b.mask)), 8, 0, 0); e != 0 {
		syscall.ForkLock.Unlock()
		return 0, e
	}
	pid, errno := clone3(args, unsafe.Sizeof(*args), b)
	unix.RawSyscall6(unix.SYS_RT_SIGPROCMASK, unix.SIG_SETMASK, uintptr(unsafe.Pointer(&b.mask)), 0, 8, 0, 0)
	syscall.ForkLock.Unlock()
	runtime.KeepAlive(stack)
	runtime.KeepAlive(argv)
	runtime.KeepAlive(envp)
	runtime.KeepAlive(path)
	if errno != 0 {
		return 0, syscall.Errno(errno)
	}
	if b.step != 0 {
		var ws unix.WaitStatus
		for {
			if _, err := unix.Wait4(int(pid), &ws, 0, nil); err != unix.EINTR {
				break
			}
		}
		e := syscall.Errno(b.errno)
		if int(b.step) == len(spawnSteps)-1 {
			return 0, &os.PathError{Op: "fork/exec", Path: a.Path, Err: e}
		}
		return 0, fmt.Errorf("%s: %w", spawnSteps[b.step], e)
	}
	return int(pid), nil
}

package native

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The spawner: on amd64 the guest is started by clone3 with CLONE_VM beside
// its namespace flags. Go's own fork (syscall.forkExec) does not share
// memory with a child that gets a new user namespace, so it copies the
// supervisor's page tables and both sides then pay copy-on-write faults
// (0.4-1.2 ms); this child shares them until it execs.
//
// The child runs no Go code: spawn_linux_amd64.s, system calls reading a
// spawnBlock prepared here, on a stack of its own. It is not a vfork
// (CLONE_VFORK would suspend this thread until the exec): its id maps can
// only be written once it exists, so this thread writes them while the
// child waits on a pipe, as Go's own child does, then waits for the exec
// (the close of a CLOEXEC pipe) before the block may be touched again.

// spawnBlock is what the child reads, and the only memory it writes
// (step, errno, old). The assembly names its fields (go_asm.h).
type spawnBlock struct {
	path    unsafe.Pointer // *byte
	argv    unsafe.Pointer // **byte, nil-terminated
	envp    unsafe.Pointer // **byte, nil-terminated
	syncFD  int64          // a byte on it says the id maps are written
	setIDs  int64          // not 0: take uid and gid 0 and no groups, once mapped
	nfds    int64          // fds[i] becomes descriptor i, for i < nfds
	fds     [maxSpawnFDs]int64
	nofile  [2]uint64 // soft and hard RLIMIT_NOFILE to exec with; soft 0: as it is
	lastCap int64
	slack   uint64                        // the timer slack to exec with; 0: as it is
	njoins  int64                         // joins[i] for i < njoins
	joins   [maxSpawnJoins]unsafe.Pointer // *byte: cgroup v1 tasks files to move into
	self    [8]byte                       // "0": the writer, to a tasks file
	mask    uint64                        // the signal mask to exec with
	capHdr  unix.CapUserHeader
	capData [2]unix.CapUserData
	dfl     [4]uint64 // a struct sigaction for SIG_DFL
	old     [4]uint64 // the child's scratch
	step    int64     // the step that failed, 0 if none did
	errno   uint64
	pidfd   int32       // the kernel's (CLONE_PIDFD)
	stack   [512]uint64 // the child's, which it never uses
}

const maxSpawnFDs = 8

// maxSpawnJoins bounds spawnAttr.Join's directories: one per cgroup v1
// hierarchy with a controller airlock limits (memory, cpu, pids).
const maxSpawnJoins = 8

// spawnSteps names the child's steps, by the number it stores on failure.
var spawnSteps = [...]string{1: "set parent death signal", 2: "wait for the id maps", 3: "setgroups", 4: "setresgid",
	5: "setresuid", 6: "dup3", 7: "restore RLIMIT_NOFILE", 8: "capset", 9: "raise ambient capability",
	10: "restore signal mask", 11: "open its cgroup's tasks file", 12: "join its cgroup", 13: "fork/exec",
	14: "set timer slack"}

// execStep is the step the child stores when execve itself failed (the
// assembly takes it from go_asm.h).
const execStep = 13

// cloneArgs is the kernel's struct clone_args (version 2, with cgroup).
type cloneArgs struct {
	flags, pidfd, childTID, parentTID, exitSignal, stack, stackSize, tls, setTID, setTIDSize, cgroup uint64
}

// clone3 calls clone3; the child never returns from it. (Its arguments
// escape: the block must stay put, on the heap, while the child reads it.)
func clone3(args *cloneArgs, size uintptr, b *spawnBlock) (pid uintptr, errno uintptr)

// spawn starts a.Path in new namespaces, with every capability of its user
// namespace kept across exec (ambient), all signal handlers at their
// defaults, and SIGKILL as its parent death signal: the calling thread must
// be locked (runtime.LockOSThread) and stay alive while the child should.
// It returns once the child has called execve, with its pid and a pidfd;
// its errors are errnos, the exec's an *os.PathError as os/exec gives,
// clone3's a *clone3Error.
func spawn(a *spawnAttr) (pid, pidfd int, err error) {
	n := len(a.Files)
	if n > maxSpawnFDs {
		return 0, -1, fmt.Errorf("spawn: %d descriptors, at most %d", n, maxSpawnFDs)
	}
	path, err := syscall.BytePtrFromString(a.Path)
	if err != nil {
		return 0, -1, err
	}
	argv, err := syscall.SlicePtrFromStrings(a.Argv)
	if err != nil {
		return 0, -1, err
	}
	envp, err := syscall.SlicePtrFromStrings(a.Env)
	if err != nil {
		return 0, -1, err
	}
	b := &spawnBlock{path: unsafe.Pointer(path), argv: unsafe.Pointer(&argv[0]), envp: unsafe.Pointer(&envp[0]), nfds: int64(n)}
	if a.SetIDs {
		b.setIDs = 1
	}
	// Each descriptor the child reads must lie above every target, so that
	// no dup3 replaces one still to be read: copies are made where needed,
	// and closed on return (CLOEXEC in the child).
	var closes []int
	defer func() {
		for _, fd := range closes {
			unix.Close(fd)
		}
	}()
	above := func(fd int) (int, error) {
		if fd >= n {
			return fd, nil
		}
		c, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, n)
		if err == nil {
			closes = append(closes, c)
		}
		return c, err
	}
	for i, fd := range a.Files {
		if fd, err = above(fd); err != nil {
			return 0, -1, err
		}
		b.fds[i] = int64(fd)
	}
	// sync: the go-ahead to the child. done: its write end is the child's
	// alone once cloned, so the read end sees EOF at its exec (or exit).
	var sync, done [2]int
	if err := unix.Pipe2(sync[:], unix.O_CLOEXEC); err != nil {
		return 0, -1, err
	}
	closes = append(closes, sync[0], sync[1])
	if err := unix.Pipe2(done[:], unix.O_CLOEXEC); err != nil {
		return 0, -1, err
	}
	closes = append(closes, done[0])
	doneW := done[1] // closed here once cloned
	if doneW < n {
		doneW, err = unix.FcntlInt(uintptr(done[1]), unix.F_DUPFD_CLOEXEC, n)
		unix.Close(done[1])
		if err != nil {
			return 0, -1, err
		}
	}
	if b.syncFD, err = int64Of(above(sync[0])); err != nil {
		unix.Close(doneW)
		return 0, -1, err
	}
	b.nofile = a.Nofile
	b.self[0] = '0'
	b.lastCap = int64(a.LastCap)
	b.slack = a.TimerSlack
	b.capHdr.Version = unix.LINUX_CAPABILITY_VERSION_3
	for c := 0; c <= a.LastCap; c++ {
		b.capData[c/32].Effective |= 1 << (c % 32)
	}
	for i := range b.capData {
		b.capData[i].Permitted, b.capData[i].Inheritable = b.capData[i].Effective, b.capData[i].Effective
	}
	args := &cloneArgs{
		flags:      a.Flags | unix.CLONE_VM | unix.CLONE_PIDFD,
		pidfd:      uint64(uintptr(unsafe.Pointer(&b.pidfd))),
		exitSignal: uint64(syscall.SIGCHLD),
		stack:      uint64(uintptr(unsafe.Pointer(&b.stack[0]))),
		stackSize:  uint64(len(b.stack) * 8),
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
		unix.Close(doneW)
		return 0, -1, e
	}
	cpid, errno := clone3(args, unsafe.Sizeof(*args), b)
	unix.RawSyscall6(unix.SYS_RT_SIGPROCMASK, unix.SIG_SETMASK, uintptr(unsafe.Pointer(&b.mask)), 0, 8, 0, 0)
	syscall.ForkLock.Unlock()
	unix.Close(doneW)
	if errno != 0 {
		return 0, -1, &clone3Error{syscall.Errno(errno)}
	}
	pid, pidfd = int(cpid), int(b.pidfd)
	err = nil
	if a.Maps != nil {
		err = a.Maps(pid)
	}
	// The child reads the block only after the go-ahead: what it joins
	// may be filled in until then. The paths live as long as b does.
	if err == nil && a.Join != nil {
		if dirs := a.Join(); len(dirs) > maxSpawnJoins {
			err = fmt.Errorf("spawn: %d cgroup directories to join, at most %d", len(dirs), maxSpawnJoins)
		} else {
			for i, d := range dirs {
				p, perr := syscall.BytePtrFromString(filepath.Join(d, "tasks"))
				if perr != nil {
					err = perr
					break
				}
				b.joins[i] = unsafe.Pointer(p)
			}
			b.njoins = int64(len(dirs))
		}
	}
	if err == nil {
		_, err = unix.Write(sync[1], []byte{0})
	}
	if err != nil {
		unix.PidfdSendSignal(pidfd, unix.SIGKILL, nil, 0)
	}
	// The child has exec'd or exited once done reads EOF: until then it
	// may use b, kept alive here.
	var buf [1]byte
	for {
		if _, rerr := unix.Read(done[0], buf[:]); rerr != unix.EINTR {
			break
		}
	}
	runtime.KeepAlive(b)
	runtime.KeepAlive(argv)
	runtime.KeepAlive(envp)
	runtime.KeepAlive(path)
	if err == nil && b.step != 0 {
		e := syscall.Errno(b.errno)
		if b.step == execStep {
			err = &os.PathError{Op: "fork/exec", Path: a.Path, Err: e}
		} else {
			err = fmt.Errorf("%s: %w", spawnSteps[b.step], e)
		}
	}
	if err != nil {
		var ws unix.WaitStatus
		for {
			if _, werr := unix.Wait4(pid, &ws, 0, nil); werr != unix.EINTR {
				break
			}
		}
		unix.Close(pidfd)
		return 0, -1, err
	}
	return pid, pidfd, nil
}

func int64Of(fd int, err error) (int64, error) { return int64(fd), err }

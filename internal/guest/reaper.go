package guest

import (
	"fmt"
	"runtime"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/internal/timerslack"
)

// reaper collects every child's exit status, ours and the orphans reparented
// to PID 1, and hands each status to whoever started that process. It also
// owns the one OS thread that forks them all (see runSpawner).
type reaper struct {
	children chan struct{} // a start since reapAll last found no child
	spawner  chan error    // the spawner thread's start (see runSpawner)
	requests chan spawnReq // the spawner thread's
	// commandPids, if not 0, is each command's RLIMIT_NPROC (proto.Init.CommandPids),
	// set before serving begins.
	commandPids uint64

	mu      sync.Mutex
	waiters map[int]chan syscall.WaitStatus
	spawn   chan spawnReq // requests, once lockdown has run
}

type spawnReq struct {
	path string
	argv []string
	attr *syscall.ProcAttr
	done chan spawnResult
}

type spawnResult struct {
	pid int
	err error
}

func startReaper() *reaper {
	r := &reaper{
		children: make(chan struct{}, 1),
		spawner:  make(chan error, 1),
		requests: make(chan spawnReq),
		waiters:  map[int]chan syscall.WaitStatus{},
	}
	go r.reapAll()
	// The spawner thread is made beside the set-up; nothing is sent to it
	// before lockdown (startSpawner).
	go r.runSpawner()
	return r
}

// start forks and execs under the lock, so the status of a process that exits
// at once cannot be reaped before its waiter is registered.
func (r *reaper) start(path string, argv []string, attr *syscall.ProcAttr) (int, <-chan syscall.WaitStatus, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.spawn == nil {
		return 0, nil, syscall.EAGAIN // lockdown has not run: nothing may start
	}
	done := make(chan spawnResult, 1)
	r.spawn <- spawnReq{path, argv, attr, done}
	res := <-done
	pid, err := res.pid, res.err
	if err != nil {
		return 0, nil, err
	}
	ch := make(chan syscall.WaitStatus, 1)
	r.waiters[pid] = ch
	select {
	case r.children <- struct{}{}:
	default: // reapAll has been told already
	}
	return pid, ch, nil
}

// reapAll waits for children in a blocking wait4 of its own, whose thread
// the kernel wakes as one ends: a SIGCHLD handler added the runtime's
// signal goroutine and a second wake-up to every command's exit (35 us).
// wait4 fails at once while there is no child: it then waits for the next
// start. Orphans become PID 1's children before their parent can be
// reaped, so none is missed in between.
//
// The first wait after a start keeps the goroutine's P, as syscall.Wait4
// does: its command is likely short, and giving the P up would wake a
// second thread for nothing (up to 4% of a run, measured). For a long
// command that costs one stall, until sysmon takes the P back. A wait
// begun while commands still run may last as long as they do, and gives
// the P up at once (waitAny).
func (r *reaper) reapAll() {
	for range r.children {
		long := false
		for {
			var ws syscall.WaitStatus
			pid, err := waitChild(&ws, long)
			if err == syscall.EINTR {
				continue
			}
			if err != nil {
				break // ECHILD
			}
			if !ws.Exited() && !ws.Signaled() {
				continue
			}
			r.mu.Lock()
			if ch, ok := r.waiters[pid]; ok {
				ch <- ws
				delete(r.waiters, pid)
			}
			long = len(r.waiters) > 0
			r.mu.Unlock()
		}
	}
}

// runSpawner dedicates one OS thread to forking every process the sandbox
// runs, and empties that thread's capability bounding set first. A child
// inherits the credentials of the thread that forked it, so this gives every
// process an empty bounding set at the cost of a few cheap per-thread prctl
// calls instead of one stop-the-world AllThreadsSyscall per capability. It
// is a thread of the guest's like the others, so every lockdown step that
// runs on all threads (Landlock, capabilities, seccomp) binds it too.
func (r *reaper) runSpawner() {
	runtime.LockOSThread() // never unlocked: the thread dies with the guest
	// The commands this thread starts get the kernel's timer slack, not the
	// guest's (see Main).
	unix.Prctl(unix.PR_SET_TIMERSLACK, timerslack.Default, 0, 0, 0)
	for c, last := 0, LastCap(); c <= last; c++ {
		err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0)
		if err == nil || err == unix.EINVAL {
			continue
		}
		// Dropping needs CAP_SETPCAP even for a capability already gone,
		// which a container's guest (all dropped by the runtime) lacks.
		if in, rerr := unix.PrctlRetInt(unix.PR_CAPBSET_READ, uintptr(c), 0, 0, 0); rerr == nil && in == 0 {
			continue
		}
		r.spawner <- fmt.Errorf("bounding set drop %d: %w", c, err)
		return
	}
	r.spawner <- nil
	for req := range r.requests {
		pid, err := r.forkExec(req)
		req.done <- spawnResult{pid, err}
	}
}

// forkExec starts a command. With commandPids, it starts it under that
// process limit, below the guest's own: the guest lowers its own soft limit
// for the fork, so the command has it from its first instruction, and
// raises it again after. Set after the exec instead, the limit came too
// late on a loaded machine: the command could fork before this thread ran
// again, and a fork bomb of such children took the guest's room. A guest
// thread made meanwhile may find the lower limit: the Go runtime retries
// for 0.2 s. The command's hard limit goes down to its soft one after the
// exec, so that it cannot raise its soft limit into the guest's room; a
// child it forked before that keeps the guest's hard limit, under which it
// could end the sandbox (a bomb that takes the room), not pass its limit.
func (r *reaper) forkExec(req spawnReq) (int, error) {
	n := r.commandPids
	if n == 0 {
		return syscall.ForkExec(req.path, req.argv, req.attr)
	}
	var own unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NPROC, &own); err != nil {
		return 0, fmt.Errorf("read the process limit: %w", err)
	}
	if err := unix.Setrlimit(unix.RLIMIT_NPROC, &unix.Rlimit{Cur: min(n, own.Max), Max: own.Max}); err != nil {
		return 0, fmt.Errorf("set the command's process limit: %w", err)
	}
	pid, err := syscall.ForkExec(req.path, req.argv, req.attr)
	if rerr := unix.Setrlimit(unix.RLIMIT_NPROC, &own); rerr != nil && err == nil {
		syscall.Kill(pid, syscall.SIGKILL) // reaped by reapAll, with no waiter
		return 0, fmt.Errorf("restore the guest's process limit: %w", rerr)
	}
	if err == nil {
		// Best effort: one that has ended and been reaped (ESRCH) needs
		// none, and pids are handed out in turn, so its number is no other
		// process's this soon.
		unix.Prlimit(pid, unix.RLIMIT_NPROC, &unix.Rlimit{Cur: n, Max: n}, nil)
	}
	return pid, err
}

// startSpawner lets processes start (see start) once the spawner thread has
// emptied its bounding set. Lockdown calls it.
func (r *reaper) startSpawner() error {
	if err := <-r.spawner; err != nil {
		return err
	}
	r.spawn = r.requests
	return nil
}

// waitChild waits for any child's status: through waitAny when long, else
// by syscall.Wait4, which keeps the goroutine's P (see reapAll).
func waitChild(ws *syscall.WaitStatus, long bool) (int, error) {
	if !long {
		return syscall.Wait4(-1, ws, 0, nil)
	}
	pid, errno := waitAny(ws)
	if errno != 0 {
		return pid, errno
	}
	return pid, nil
}

// waitAny is wait4(-1, ws, 0, nil) that gives up its P as it starts, as
// the runtime's own long waits do (entersyscallblock), rather than keep it
// until sysmon takes it back: with the guest on one P and its sysmon's
// sleeps stretched by the relaxed timer slack, a kept P left the guest deaf
// ~2 ms each time it went back to waiting on a command still running, and
// every exec into a sandbox that ran anything took that much longer.
// gVisor calls the same two runtime functions the same way (its
// rawfile.BlockingPoll); the runtime keeps them for such callers
// (go.dev/issue/67401).
//
//go:nosplit
//go:norace
func waitAny(ws *syscall.WaitStatus) (pid int, errno syscall.Errno) {
	entersyscallblock()
	r, _, errno := syscall.RawSyscall6(syscall.SYS_WAIT4, ^uintptr(0), uintptr(unsafe.Pointer(ws)), 0, 0, 0, 0)
	exitsyscall()
	return int(r), errno
}

//go:linkname entersyscallblock runtime.entersyscallblock
func entersyscallblock()

//go:linkname exitsyscall runtime.exitsyscall
func exitsyscall()

package guest

import (
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// reaper collects every child's exit status, ours and the orphans reparented
// to PID 1, and hands each status to whoever started that process.
type reaper struct {
	mu      sync.Mutex
	waiters map[int]chan syscall.WaitStatus
}

func startReaper() *reaper {
	r := &reaper{waiters: map[int]chan syscall.WaitStatus{}}
	sig := make(chan os.Signal, 64)
	signal.Notify(sig, syscall.SIGCHLD)
	go func() {
		for range sig {
			r.reapAll()
		}
	}()
	return r
}

// start forks and execs under the lock, so the status of a process that exits
// at once cannot be reaped before its waiter is registered.
func (r *reaper) start(path string, argv []string, attr *syscall.ProcAttr) (int, <-chan syscall.WaitStatus, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	pid, err := syscall.ForkExec(path, argv, attr)
	if err != nil {
		return 0, nil, err
	}
	ch := make(chan syscall.WaitStatus, 1)
	r.waiters[pid] = ch
	return pid, ch, nil
}

func (r *reaper) reapAll() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			continue
		}
		if pid <= 0 || err != nil {
			return
		}
		if !ws.Exited() && !ws.Signaled() {
			continue
		}
		r.mu.Lock()
		if ch, ok := r.waiters[pid]; ok {
			ch <- ws
			delete(r.waiters, pid)
		}
		r.mu.Unlock()
	}
}

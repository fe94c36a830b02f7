package native

import (
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/internal/nofile"
)

// spawnAttr says how to start a process with spawn.
type spawnAttr struct {
	Path    string
	Argv    []string
	Env     []string
	Files   []int  // Files[i] becomes the child's descriptor i
	Flags   uint64 // namespace flags (CLONE_NEW*)
	Cgroup  int    // a cgroup dir to start in (CLONE_INTO_CGROUP); -1: the parent's
	LastCap int    // the highest capability this kernel knows
	// Maps writes the child's id maps (/proc/PID/...) while it waits.
	Maps func(pid int) error
	// Join, called after Maps while the child waits, returns cgroup v1
	// directories (at most maxSpawnJoins) the child moves itself into
	// before it execs. A process that moves itself with one thread takes
	// no threadgroup lock; moved by another (its pid written to
	// cgroup.procs), it waits for an RCU grace period: ~20 ms on an idle
	// machine here.
	Join func() []string
	// SetIDs makes the child uid and gid 0 with no groups once mapped.
	SetIDs bool
	// Nofile, when its soft limit is not 0, is the RLIMIT_NOFILE to exec
	// with (see execNofile).
	Nofile [2]uint64
	// TimerSlack, when not 0, is the child's timer slack (ns), which every
	// thread it makes inherits.
	TimerSlack uint64
}

// execNofile is the RLIMIT_NOFILE to exec a child with, as os/exec has
// it: the one this process started with, while the Go runtime's raise of
// the soft limit (to the hard one less 1) is in place; else zeros (as it is).
func execNofile() [2]uint64 {
	var cur unix.Rlimit
	soft, hard := nofile.Soft, nofile.Hard
	if hard == 0 || soft == 0 || soft >= hard-1 || unix.Getrlimit(unix.RLIMIT_NOFILE, &cur) != nil || cur.Cur != hard-1 || cur.Max != hard {
		return [2]uint64{}
	}
	return [2]uint64{soft, hard}
}

// clone3Error is clone3's own failure: no child was made.
type clone3Error struct{ Err syscall.Errno }

func (e *clone3Error) Error() string { return "clone3: " + e.Err.Error() }
func (e *clone3Error) Unwrap() error { return e.Err }

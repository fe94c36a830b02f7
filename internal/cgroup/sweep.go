package cgroup

import (
	"errors"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// SweepStale removes empty groups named after a process below the caller's
// own cgroup dirs whose process no longer exists: what a sandbox owner
// killed outright (no Close, no state record for prune) left behind. The
// names are prefix+PID, prefix+PID-N or prefix+KIND-PID[-N] (ownerPID). A
// group that still holds a process is not stale, and rmdir refuses it. It
// returns how many it removed.
func SweepStale(prefix string) int {
	lay, err := discover()
	if err != nil {
		return 0
	}
	parents := map[string]bool{}
	for _, d := range lay.v1 {
		parents[d] = true
	}
	if lay.v2 != "" {
		parents[lay.v2] = true
	}
	n := 0
	for p := range parents {
		dirs, _ := filepath.Glob(filepath.Join(p, prefix+"*"))
		for _, d := range dirs {
			pid, ok := ownerPID(strings.TrimPrefix(filepath.Base(d), prefix))
			if !ok {
				continue
			}
			if err := unix.Kill(pid, 0); !errors.Is(err, unix.ESRCH) {
				continue // alive, or not ours to judge
			}
			if unix.Rmdir(d) == nil {
				n++
			}
		}
	}
	return n
}

// ownerPID reads the pid a group's name (past its prefix) is named after:
// "PID", "PID-N", or "KIND-PID[-N]" as in airlock-vm-<QEMU's pid>, whose
// groups, unread as "vm", were never swept.
func ownerPID(name string) (int, bool) {
	f := strings.Split(name, "-")
	if _, err := strconv.Atoi(f[0]); err != nil && len(f) > 1 {
		f = f[1:]
	}
	pid, err := strconv.Atoi(f[0])
	return pid, err == nil && pid > 0
}
